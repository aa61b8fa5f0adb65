package fleet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nkeys"
)

// pki is the run's CA and one certificate it signed for every fleet
// address (server, route and client use), as PEM files in dir.
type pki struct {
	ca, cert, key string
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

func newPKI(dir string, hosts int) (pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fleet harness CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return pki{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return pki{}, err
	}
	boxKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, err
	}
	var ips []net.IP
	for i := 1; i <= hosts; i++ {
		ips = append(ips, net.ParseIP(addr(i)))
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fleet harness box"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &boxKey.PublicKey, caKey)
	if err != nil {
		return pki{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(boxKey)
	if err != nil {
		return pki{}, err
	}
	p := pki{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "box.pem"), key: filepath.Join(dir, "box.key")}
	for _, w := range []struct {
		path, typ string
		der       []byte
	}{{p.ca, "CERTIFICATE", caDER}, {p.cert, "CERTIFICATE", der}, {p.key, "EC PRIVATE KEY", keyDER}} {
		if err := writePEM(w.path, w.typ, w.der); err != nil {
			return pki{}, err
		}
	}
	return p, nil
}

// newUser writes a user nkey's seed (0600) and returns its public key.
func newUser(path string) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", err
	}
	return pub, os.WriteFile(path, seed, 0o600)
}

// newEncryptionKey writes a JetStream encryption key (0600).
func newEncryptionKey(path string) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600)
}
