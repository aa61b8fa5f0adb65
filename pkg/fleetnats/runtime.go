package fleetnats

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// The files PrepareRuntime writes into sandbox-nats's runtime directory,
// all 0600 and owned by the server's user; cmd/sandbox-nats reads Conf and
// EncryptionKey from there by default.
const (
	RuntimeDir        = "/run/sandbox-nats"
	ConfName          = "nats.conf"
	CAName            = "ca.pem"
	CertName          = "box.pem"
	KeyName           = "box.key"
	EncryptionKeyName = "jetstream.key"
	// MinEncryptionKeyBytes is what serve.MinKeyBytes also requires.
	MinEncryptionKeyBytes = 32
	maxFleetFileBytes     = 1 << 20
)

// PrepareRuntime checks this box's server keys and files and writes the
// server's private copies of its TLS material and encryption key and the
// generated configuration into dir (sandbox-nats.service's
// RuntimeDirectory), owned by uid:gid. It runs as root before the server
// (ExecStartPre=+), so that the operator's files stay root's and the
// server, on its own unprivileged user, holds copies on tmpfs only while it
// runs. Nothing is written unless every check passed.
func PrepareRuntime(f config.Fleet, dir string, uid, gid int) error {
	if err := CheckServer(f); err != nil {
		return err
	}
	ca, err := readFleetFile("fleet.tls.ca", f.TLS.CA, false)
	if err != nil {
		return err
	}
	cert, err := readFleetFile("fleet.tls.cert", f.TLS.Cert, false)
	if err != nil {
		return err
	}
	key, err := readFleetFile("fleet.tls.key", f.TLS.Key, true)
	if err != nil {
		return err
	}
	encKey, err := readFleetFile("fleet.server.encryptionKeyFile", f.Server.EncryptionKeyFile, true)
	if err != nil {
		return err
	}
	if err := checkTLSMaterial(f, ca, cert, key); err != nil {
		return err
	}
	if k := strings.TrimRight(string(encKey), "\r\n"); len(k) < MinEncryptionKeyBytes || strings.ContainsAny(k, "\r\n") {
		return fmt.Errorf("fleet.server.encryptionKeyFile: %s must hold one line of at least %d bytes (openssl rand -hex 32): %w", f.Server.EncryptionKeyFile, MinEncryptionKeyBytes, ErrServerConfig)
	}
	conf, err := ServerConfig(f, TLSFiles{CA: filepath.Join(dir, CAName), Cert: filepath.Join(dir, CertName), Key: filepath.Join(dir, KeyName)})
	if err != nil {
		return err
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("runtime directory %s: %v (sandbox-nats.service's RuntimeDirectory= makes it)", dir, err)
	}
	defer unix.Close(dfd)
	for _, w := range []struct {
		name string
		data []byte
	}{{CAName, ca}, {CertName, cert}, {KeyName, key}, {EncryptionKeyName, encKey}, {ConfName, conf}} {
		if err := atomicfile.WriteAt(dfd, w.name, w.data, 0o600); err != nil {
			return fmt.Errorf("runtime directory %s: %s: %v", dir, w.name, err)
		}
		if err := unix.Fchownat(dfd, w.name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("runtime directory %s: chown %s: %v", dir, w.name, err)
		}
	}
	return nil
}

// readFleetFile reads one of the operator's fleet files, bounded; a
// secret must not be readable by every user.
func readFleetFile(key, path string, secret bool) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", key, err, ErrServerConfig)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", key, err, ErrServerConfig)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s is not a regular file: %w", key, path, ErrServerConfig)
	}
	if secret && st.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("%s: %s is readable by every user (mode %v): chmod 0600 it: %w", key, path, st.Mode().Perm(), ErrServerConfig)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxFleetFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", key, err, ErrServerConfig)
	}
	if len(data) > maxFleetFileBytes || len(data) == 0 {
		return nil, fmt.Errorf("%s: %s must hold 1 byte to %d bytes: %w", key, path, maxFleetFileBytes, ErrServerConfig)
	}
	return data, nil
}

// checkTLSMaterial: the certificate and key make a pair, and the fleet's
// CA signed the certificate for server and for client use (a route is
// both: each end verifies the other's certificate).
func checkTLSMaterial(f config.Fleet, ca, cert, key []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("fleet.tls.ca: %s holds no PEM certificate: %w", f.TLS.CA, ErrServerConfig)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		// crypto/tls names the mismatch, never key material.
		return fmt.Errorf("fleet.tls.cert and fleet.tls.key: %s and %s are not a certificate and its key: %v: %w", f.TLS.Cert, f.TLS.Key, err, ErrServerConfig)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("fleet.tls.cert: %v: %w", err, ErrServerConfig)
	}
	inter := x509.NewCertPool()
	for rest := cert; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && c != leaf {
			inter.AddCert(c)
		}
	}
	for _, use := range []struct {
		name string
		eku  x509.ExtKeyUsage
	}{{"server", x509.ExtKeyUsageServerAuth}, {"client", x509.ExtKeyUsageClientAuth}} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{use.eku}}); err != nil {
			return fmt.Errorf("fleet.tls.cert: %s is not valid for %s use under fleet.tls.ca (routes need server and client use): %v: %w", f.TLS.Cert, use.name, err, ErrServerConfig)
		}
	}
	return nil
}
