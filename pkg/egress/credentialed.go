package egress

// The credentialed destinations of a grant (docs/credentialed-egress.md):
// each is reached only by a CONNECT to exactly its host:port, intercepted
// with the placeholder the run holds (intercept.go), never by plain http
// (the old plain-http route, with its git rewrite and curl shim, is gone:
// one mechanism). What both ends of an intercepted request share is here:
// TLS to the declared host through the vetted dialer (the system roots, or
// a policy's test root CA for a loopback IP literal only), the header
// aliases a server may read as the credential's, the answer's encoding
// and reflection checks, and the guarded body.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// Injection is one request's credential's reflection checks of the
// answer.
type Injection interface {
	// HeaderReflects reports whether an answer's headers reflect it.
	HeaderReflects(h http.Header) bool
	// Guard wraps an answer's body: its reads fail with ErrReflected once
	// the body reflects the credential, before any counted run of it is
	// handed out.
	Guard(r io.Reader) io.Reader
}

// Errors of the credentialed route.
var (
	errCredentialHeader = errors.New("egress: the request carries its own credential header for a credentialed destination")
	errUpgrade          = errors.New("egress: no protocol upgrade to a credentialed destination")
	errCredential       = errors.New("egress: the destination's credential could not be loaded")
	errReflected        = errors.New("egress: the answer's headers reflect the credential")
	errEncoded          = errors.New("egress: the answer is still encoded (Content-Encoding), the reflection check cannot read it")
	// ErrReflected is what an Injection's guarded body fails with.
	ErrReflected = errors.New("egress: the answer reflects the credential")
)

// credRoutes are a grant's credentialed destinations by host:port, with
// the roots their TLS trusts.
type credRoutes struct {
	by        map[string]policy.EgressCredential
	testRoots *x509.CertPool // loopback IP literals only
}

// WithCredentials knows the grant's credentialed destinations: a plain-http
// request for one is refused, and WithInterception intercepts them. The
// grant's TestRootCA, if any, has passed policy validation.
func (p *Proxy) WithCredentials() (*Proxy, error) {
	if len(p.grant.Credentials) == 0 {
		return p, nil
	}
	cr := &credRoutes{by: map[string]policy.EgressCredential{}}
	for _, c := range p.grant.Credentials {
		cr.by[c.Dest()] = c
	}
	if p.grant.TestRootCA != "" {
		pool, err := policy.ParseRootCA(p.grant.TestRootCA)
		if err != nil {
			return nil, err
		}
		cr.testRoots = pool
	}
	p.creds = cr
	return p, nil
}

// credentialed returns the granted destination u names exactly, if any.
func (p *Proxy) credentialed(u *url.URL) (policy.EgressCredential, bool) {
	if p.creds == nil || u.Port() == "" {
		return policy.EgressCredential{}, false
	}
	c, ok := p.creds.by[net.JoinHostPort(strings.ToLower(u.Hostname()), u.Port())]
	return c, ok
}

// dialCredentialed is the credentialed transport's only dial: p.dial (the
// vetted dialer, the grant's bounds), then TLS verifying the declared host.
func (p *Proxy) dialCredentialed(ctx context.Context, _, addr string) (net.Conn, error) {
	c, ok := p.creds.by[addr]
	if !ok {
		return nil, errors.New("egress: not a credentialed destination")
	}
	raw, err := p.dial(ctx, "https", addr)
	if err != nil {
		return nil, err
	}
	conf := &tls.Config{ServerName: c.Host, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if c.IsLoopback() && p.creds.testRoots != nil {
		conf.RootCAs = p.creds.testRoots
	}
	tc := tls.Client(raw, conf)
	hctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.end(err)
		_ = raw.Close()
		return nil, errTLS{err}
	}
	return tc, nil
}

// errTLS is a failed handshake (a certificate that does not verify, say).
type errTLS struct{ err error }

func (e errTLS) Error() string { return "egress: TLS to the credentialed destination failed" }
func (e errTLS) Unwrap() error { return e.err }

// sameFieldName reports whether a server may read header names a and b as
// one: ASCII case folded, and every byte that is not a letter or a digit
// read as '-' (CGI, PHP and Rack read Private_Token and Private-Token both
// as HTTP_PRIVATE_TOKEN; older Apache maps any other byte to '_' too).
func sameFieldName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		if foldFieldByte(a[i]) != foldFieldByte(b[i]) {
			return false
		}
	}
	return true
}

func foldFieldByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return c
	}
	return '-'
}

// checkCredentialedAnswer refuses an answer's header block that the guest
// may not get: still encoded (asked for identity, the destination answered
// otherwise; the guard cannot read compressed bytes), or reflecting the
// credential.
func checkCredentialedAnswer(h http.Header, inj Injection) error {
	if err := checkEncoding(h); err != nil {
		return err
	}
	if inj.HeaderReflects(h) {
		return errReflected
	}
	return nil
}

// checkEncoding refuses an answer still encoded: asked for identity, the
// destination answered otherwise, and the guard cannot read compressed
// bytes.
func checkEncoding(h http.Header) error {
	for _, v := range h.Values("Content-Encoding") {
		for e := range strings.SplitSeq(v, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "identity") {
				return errEncoded
			}
		}
	}
	return nil
}

// guardedBody is an answer's body through the reflection guard, counted;
// at its end the trailers (known only then, written after it) are checked
// too, and a reflecting one cuts the answer before they are sent.
type guardedBody struct {
	r         io.Reader
	c         io.Closer
	n         *atomic.Int64
	reflected *atomic.Bool
	trailer   func() bool
}

func (g guardedBody) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	g.n.Add(int64(n))
	if errors.Is(err, io.EOF) && g.trailer() {
		err = ErrReflected
	}
	if errors.Is(err, ErrReflected) {
		g.reflected.Store(true)
	}
	return n, err
}

func (g guardedBody) Close() error { return g.c.Close() }
