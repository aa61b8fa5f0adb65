package main

// The demo API stand-in: an HTTPS endpoint on loopback that requires a
// bearer token, `make demo`'s credentialed destination (the run holds a
// placeholder in $DEMO_API_TOKEN; its broker swaps in the token:
// docs/credentialed-egress.md, "Placeholders").

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"
)

// demoAPI answers every GET carrying "Authorization: Bearer <token>" and
// refuses the rest with 401; its log line says whether the token matched,
// never what was sent.
func demoAPI(log *slog.Logger, token string) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) == 1
		log.Info("demo API request", "method", r.Method, "path", r.URL.Path, "token_accepted", ok)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="demo"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "demo API: hello, the bearer token was accepted (%s %s)\n", r.Method, r.URL.Path)
	})
}

// selfSigned makes the stand-in's certificate for ip, its own root
// (the demo names it in egress.testRootCAFile, which trusts it for loopback
// IP literals only).
func selfSigned(ip net.IP) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{Organization: []string{"roundtable demo API stand-in"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{ip},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// serveAPI writes the certificate (0644) and a fresh token (0600) to their
// files, then listens (the port file last: once it exists, all are there)
// and serves the demo API over TLS; it exits on any failure.
func serveAPI(log *slog.Logger, addr, portFile, certFile, tokenFile string) {
	fail := func(what string, err error) {
		log.Error(what, "err", err)
		os.Exit(2)
	}
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil {
		fail("-api-listen must be an IP literal and a port", err)
	}
	cert, certPEM, err := selfSigned(ip)
	if err != nil {
		fail("demo API certificate", err)
	}
	raw := make([]byte, 16)
	if _, err := io.ReadFull(rand.Reader, raw); err != nil {
		fail("demo API token", err)
	}
	token := "demo-api-" + hex.EncodeToString(raw)
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		fail("write the demo API certificate", err)
	}
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		fail("write the demo API token", err)
	}
	ln := listen(log, addr, portFile)
	log.Info("demo API stand-in listening (HTTPS)", "addr", ln.Addr().String())
	srv := &http.Server{Handler: demoAPI(log, token), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() {
		log.Error("serve demo API stand-in", "err", srv.ServeTLS(ln, "", ""))
		os.Exit(1)
	}()
}
