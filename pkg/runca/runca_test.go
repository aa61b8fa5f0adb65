package runca

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func pool(t *testing.T, c *CA) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(c.CertPEM()) {
		t.Fatal("CertPEM does not parse")
	}
	return p
}

// TestLeafPerHost: one leaf per declared host, cached, verifying for that
// host only; none for an undeclared one.
func TestLeafPerHost(t *testing.T) {
	now := time.Now()
	c, err := New([]string{"git.example.com", "127.0.0.1", "::1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := pool(t, c)
	for _, h := range []string{"git.example.com", "127.0.0.1", "::1"} {
		l, err := c.Leaf(h)
		if err != nil {
			t.Fatalf("Leaf(%s): %v", h, err)
		}
		again, _ := c.Leaf(h)
		if again != l {
			t.Errorf("Leaf(%s) minted twice", h)
		}
		if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("leaf for %s does not verify: %v", h, err)
		}
		if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots, CurrentTime: now}); err == nil {
			t.Errorf("leaf for %s verifies for another host", h)
		}
	}
	a, _ := c.Leaf("git.example.com")
	b, _ := c.Leaf("127.0.0.1")
	if reflect.DeepEqual(a.Certificate, b.Certificate) {
		t.Error("two hosts share a leaf")
	}
	for _, h := range []string{"example.com", "evil.git.example.com", "127.0.0.2", "Git.example.com", ""} {
		if _, err := c.Leaf(h); !errors.Is(err, ErrHost) {
			t.Errorf("Leaf(%q) = %v, want ErrHost", h, err)
		}
	}
}

// TestNameConstrained: the CA vouches for nothing but its hosts even when
// a certificate for another name is signed with its key (what a stolen
// copy could do): the constraint is in the CA certificate and critical.
func TestNameConstrained(t *testing.T) {
	now := time.Now()
	for _, hosts := range [][]string{{"git.example.com"}, {"127.0.0.1"}} {
		c, err := New(hosts, now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// Forge through the in-package key: another host's leaf.
		c.hosts["evil.example.net"], c.hosts["10.0.0.1"] = true, true
		for _, h := range []string{"evil.example.net", "10.0.0.1"} {
			l, err := c.Leaf(h)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: pool(t, c), CurrentTime: now}); err == nil {
				t.Errorf("CA for %v vouches for %s", hosts, h)
			}
		}
		if !c.cert.PermittedDNSDomainsCritical {
			t.Error("name constraints not critical")
		}
	}
}

// TestOnlyTheCertificateLeaves: CertPEM holds one CERTIFICATE block and no
// key; the printed and logged forms show no key material.
func TestOnlyTheCertificateLeaves(t *testing.T) {
	c, err := New([]string{"git.example.com"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, rest := pem.Decode(c.CertPEM())
	if b == nil || b.Type != "CERTIFICATE" || len(strings.TrimSpace(string(rest))) != 0 {
		t.Fatalf("CertPEM is not exactly one certificate")
	}
	d := c.key.D.Text(16)
	for _, s := range []string{c.String(), fmt.Sprint(c.LogValue()), fmt.Sprintf("%v", c)} {
		if strings.Contains(s, d) {
			t.Error("key revealed")
		}
	}
	if c.Certificate().MaxPathLen != 0 || !c.Certificate().MaxPathLenZero {
		t.Error("CA may sign intermediates")
	}
}

// TestOpenSSLVerifiesLeaves: OpenSSL (what curl, git and Python use in
// the toolbox) accepts each leaf under the name-constrained CA: it reads
// a leaf's common name as a DNS name against the DNS constraint, so an IP
// literal's leaf must carry none.
func TestOpenSSLVerifiesLeaves(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed")
	}
	for _, hosts := range [][]string{{"127.0.0.1"}, {"git.example.com"}, {"git.example.com", "127.0.0.1", "::1"}} {
		c, err := New(hosts, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		caFile := filepath.Join(dir, "ca.pem")
		os.WriteFile(caFile, c.CertPEM(), 0o644)
		for _, h := range hosts {
			l, err := c.Leaf(h)
			if err != nil {
				t.Fatal(err)
			}
			leafFile := filepath.Join(dir, "leaf.pem")
			os.WriteFile(leafFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: l.Certificate[0]}), 0o644)
			flag := "-verify_hostname"
			if net.ParseIP(h) != nil {
				flag = "-verify_ip"
			}
			out, err := exec.Command(openssl, "verify", "-CAfile", caFile, flag, h, leafFile).CombinedOutput()
			if err != nil {
				t.Errorf("CA for %v, leaf %s: openssl verify: %v: %s", hosts, h, err, out)
			}
		}
	}
}
