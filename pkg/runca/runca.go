// Package runca is a run's own certificate authority
// (docs/credentialed-egress.md): made in the run's broker's memory when the
// broker starts, it signs a leaf certificate for each credentialed host the
// run declares, so the broker can terminate the run's TLS to that host and
// swap a placeholder for the credential. Guarantees: the CA's private key
// is generated here and no function returns, writes or logs it; only the
// CA certificate leaves (CertPEM, for the run's CA bundle); a leaf is
// minted only for a host the CA was made for, once (then cached); the CA
// is name-constrained (critical) to exactly those hosts, so even a copy of
// its certificate trusted elsewhere vouches for nothing else.
package runca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"time"
)

// ErrHost: a leaf was asked for a host the CA was not made for.
var ErrHost = errors.New("runca: not a host of this run")

// Backdate covers a container clock slightly behind the broker's.
const Backdate = 5 * time.Minute

// CA is one run's certificate authority. Create it with New.
type CA struct {
	key      *ecdsa.PrivateKey
	cert     *x509.Certificate
	pem      []byte
	hosts    map[string]bool
	notAfter time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// New makes a CA for hosts (lower-case DNS names or canonical IP literals,
// as policy.ValidEgressHost accepts) valid from now (less Backdate) for
// validity: the run's whole life.
func New(hosts []string, now time.Time, validity time.Duration) (*CA, error) {
	if len(hosts) == 0 {
		return nil, errors.New("runca: no hosts")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("runca: key: %w", err)
	}
	c := &CA{key: key, hosts: map[string]bool{}, leaves: map[string]*tls.Certificate{}, notAfter: now.Add(validity)}
	var dns []string
	var ips []*net.IPNet
	for _, h := range hosts {
		c.hosts[h] = true
		if a, err := netip.ParseAddr(h); err == nil {
			bits := a.BitLen()
			ips = append(ips, &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)})
		} else {
			dns = append(dns, h)
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "roundtable-sandbox run CA", Organization: []string{"roundtable-sandbox"}},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              c.notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
		// Only the declared hosts: a name constraint a verifier must
		// understand (critical), on both name kinds so neither is open.
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         dns,
		PermittedIPRanges:           ips,
	}
	if len(dns) == 0 {
		tmpl.PermittedDNSDomains = []string{"invalid"} // RFC 2606: no DNS name at all
	}
	if len(ips) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("runca: certificate: %w", err)
	}
	if c.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("runca: certificate: %w", err)
	}
	c.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return c, nil
}

func serial() *big.Int {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[0] &= 0x7f // positive
	return new(big.Int).SetBytes(b)
}

// CertPEM is the CA certificate (never the key): what the run trusts.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.pem...) }

// Certificate is the CA certificate, parsed.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Fingerprint is the CA certificate's SHA-256, for log lines.
func (c *CA) Fingerprint() string {
	s := sha256.Sum256(c.cert.Raw)
	return hex.EncodeToString(s[:])
}

// LogValue shows the fingerprint and the hosts' count only.
func (c *CA) LogValue() slog.Value {
	return slog.GroupValue(slog.String("fingerprint", c.Fingerprint()), slog.Int("hosts", len(c.hosts)))
}

// String never shows the key.
func (c *CA) String() string { return "runca " + c.Fingerprint()[:16] }

// Leaf returns the server certificate for host (the CA signs it the first
// time; later calls return the same one), or ErrHost.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	if !c.hosts[host] {
		return nil, ErrHost
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("runca: leaf key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		NotBefore:    c.cert.NotBefore,
		NotAfter:     c.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		// No common name: OpenSSL reads a CN as a DNS name against the
		// CA's DNS constraint, and an IP literal is none.
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.Subject = pkix.Name{CommonName: host}
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("runca: leaf: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("runca: leaf: %w", err)
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	c.leaves[host] = l
	return l, nil
}
