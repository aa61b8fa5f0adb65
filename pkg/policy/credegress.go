package policy

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// EgressCredential is one credentialed destination of an approved run
// (docs/credentialed-egress.md): the run's broker answers a plain-http
// absolute-form request for exactly Host:Port by opening HTTPS to it and
// adding Header, built from the credential file Credential in Format. It
// never holds the value; the broker loads it (credset copies only the
// names a policy lists).
type EgressCredential struct {
	Name       string `json:"name"`       // what a run asks for
	Host       string `json:"host"`       // a DNS name (lower case) or a canonical IP literal
	Port       int    `json:"port"`       // the HTTPS port
	Credential string `json:"credential"` // credential file name, never a value
	Header     string `json:"header"`     // one of CredentialHeaders (canonical form)
	Format     string `json:"format"`     // one of CredentialFormats
	User       string `json:"user,omitempty"`
	// Env is the variable the run sees the credential's placeholder in
	// (docs/credentialed-egress.md); "" for the plain-http route only.
	Env string `json:"env,omitempty"`
}

// CredentialHeaders are the only headers a credential may be injected as
// (canonical form; configuration may spell them in any case).
var CredentialHeaders = []string{"Authorization", "X-Api-Key", "Private-Token"}

// Credential formats: "{}" is the value itself.
const (
	FormatBearer = "Bearer {}"
	FormatToken  = "token {}"
	FormatRaw    = "{}"
	FormatBasic  = "basic" // Basic auth with the fixed user User
)

// CredentialFormats lists the accepted formats.
var CredentialFormats = []string{FormatBearer, FormatToken, FormatRaw, FormatBasic}

// Bounds of a run's credentialed destinations.
const (
	MaxEgressCredentials = 16
	MaxTestRootCABytes   = 64 << 10
	maxCredentialUser    = 64
)

var dnsNameRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidEgressHost reports whether h is a lower-case DNS name (its last
// label not numeric) or a canonical IP literal without brackets.
func ValidEgressHost(h string) bool {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String() == h && a.Zone() == ""
	}
	return len(h) <= 253 && dnsNameRe.MatchString(h)
}

// CanonicalCredentialHeader returns the allow-listed header h names (any
// case), or false.
func CanonicalCredentialHeader(h string) (string, bool) {
	c := http.CanonicalHeaderKey(h)
	for _, ok := range CredentialHeaders {
		if c == ok {
			return c, true
		}
	}
	return "", false
}

// ValidCredentialUser reports whether u may be a basic-auth user: 1 to 64
// printable ASCII characters without ':'.
func ValidCredentialUser(u string) bool {
	if u == "" || len(u) > maxCredentialUser {
		return false
	}
	for i := 0; i < len(u); i++ {
		if u[i] <= ' ' || u[i] > '~' || u[i] == ':' {
			return false
		}
	}
	return true
}

// Dest is the destination as host:port (the key a request is matched on).
func (c EgressCredential) Dest() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// HeaderValue is the header value for the credential value v. Call it
// only where the value goes on the wire.
func (c EgressCredential) HeaderValue(v string) string {
	switch c.Format {
	case FormatBasic:
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.User+":"+v))
	default:
		return strings.Replace(c.Format, "{}", v, 1)
	}
}

// IsLoopback reports whether the destination is a loopback IP literal:
// the only destinations a policy's TestRootCA is trusted for.
func (c EgressCredential) IsLoopback() bool {
	a, err := netip.ParseAddr(c.Host)
	return err == nil && a.IsLoopback()
}

func (c EgressCredential) validate() error {
	switch {
	case !validCredName(c.Name):
		return bad("egress.credentials: %q is not a credential destination name", c.Name)
	case !ValidEgressHost(c.Host):
		return bad("egress.credentials %s: host must be a lower-case DNS name or a canonical IP literal", c.Name)
	case c.Port < 1 || c.Port > 65535:
		return bad("egress.credentials %s: port must be 1 to 65535", c.Name)
	case !validCredName(c.Credential):
		return bad("egress.credentials %s: credential must name a credential", c.Name)
	}
	if h, ok := CanonicalCredentialHeader(c.Header); !ok || h != c.Header {
		return bad("egress.credentials %s: header must be one of %s", c.Name, strings.Join(CredentialHeaders, ", "))
	}
	switch c.Format {
	case FormatBasic:
		if c.Header != "Authorization" || !ValidCredentialUser(c.User) {
			return bad("egress.credentials %s: basic needs header Authorization and a user", c.Name)
		}
	case FormatBearer, FormatToken, FormatRaw:
		if c.User != "" {
			return bad("egress.credentials %s: user is only for format basic", c.Name)
		}
	default:
		return bad("egress.credentials %s: format must be one of %q", c.Name, CredentialFormats)
	}
	if c.Env != "" {
		if err := ValidCredentialEnv(c.Env); err != nil {
			return bad("egress.credentials %s: env %v", c.Name, err)
		}
	}
	return nil
}

// validateCredentials checks a grant's credentialed destinations: each
// valid, names and destinations unique, and a test root CA that parses.
func (e Egress) validateCredentials() error {
	if len(e.Credentials) > MaxEgressCredentials {
		return bad("egress.credentials: at most %d", MaxEgressCredentials)
	}
	names, dests, envs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, c := range e.Credentials {
		if err := c.validate(); err != nil {
			return err
		}
		if names[c.Name] || dests[c.Dest()] || c.Env != "" && envs[c.Env] {
			return bad("egress.credentials: names, destinations and variables must be unique")
		}
		names[c.Name], dests[c.Dest()], envs[c.Env] = true, true, c.Env != ""
	}
	if e.TestRootCA != "" {
		if _, err := ParseRootCA(e.TestRootCA); err != nil {
			return bad("egress.testRootCA: %v", err)
		}
	}
	return nil
}

// ParseRootCA parses PEM certificates (a test root CA) into a pool.
func ParseRootCA(pemText string) (*x509.CertPool, error) {
	if len(pemText) > MaxTestRootCABytes {
		return nil, errString("over " + strconv.Itoa(MaxTestRootCABytes) + " bytes")
	}
	pool := x509.NewCertPool()
	rest, n := []byte(pemText), 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, errString("only CERTIFICATE blocks")
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, errString("a certificate does not parse")
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return nil, errString("must be PEM certificates and nothing else")
	}
	return pool, nil
}

type errString string

func (e errString) Error() string { return string(e) }
