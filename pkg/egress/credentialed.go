package egress

// The credentialed route (docs/credentialed-egress.md): a plain-http
// absolute-form request for exactly a granted destination's host:port is
// sent on as HTTPS to that destination, with the credential's header added
// here, so the container never holds the value. The guest's own header of
// that name is refused; TLS verifies the declared host (the system roots,
// or a policy's test root CA for a loopback IP literal only); redirects are
// handed back, never followed, so no other host ever sees the header; the
// destination is asked for identity (whatever the guest asked for) and an
// answer still encoded is refused, so the reflection check reads the bytes
// the guest gets; an answer whose headers or body reflect the credential
// is refused or cut (the model route's reflection rules); a CONNECT is a
// tunnel the proxy cannot see into and never carries a credential.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// Injector opens a granted destination's credential for one request; the
// broker implements it over its credential loader (package credential).
type Injector interface {
	Open(c policy.EgressCredential) (Injection, error)
}

// Injection is one request's credential: the header value (revealed only
// as the request is written) and the reflection checks of the answer.
type Injection interface {
	// Value is the header's value.
	Value() string
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
// the injector and the roots their TLS trusts.
type credRoutes struct {
	by        map[string]policy.EgressCredential
	inj       Injector
	testRoots *x509.CertPool // loopback IP literals only
	tr        *http.Transport
}

// WithCredentials serves the grant's credentialed destinations with inj;
// without it (or without destinations) there is no credentialed route and
// such a request is forwarded as plain http like any other. The grant's
// TestRootCA, if any, has passed policy validation.
func (p *Proxy) WithCredentials(inj Injector) (*Proxy, error) {
	if inj == nil || len(p.grant.Credentials) == 0 {
		return p, nil
	}
	cr := &credRoutes{by: map[string]policy.EgressCredential{}, inj: inj}
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
	cr.tr = &http.Transport{
		Proxy: nil, // never the environment's
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("egress: a credentialed destination is reached over TLS only")
		},
		DialTLSContext:         p.dialCredentialed,
		DisableKeepAlives:      true, // one request, one vetted dial, one log line
		DisableCompression:     true, // the guest's bytes, as they are
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		ResponseHeaderTimeout:  p.lifetime(),
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1
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

// forwardCredentialed serves one absolute-form request for the granted
// destination c: refusals first, then HTTPS with the header added.
func (p *Proxy) forwardCredentialed(w http.ResponseWriter, r *http.Request, u *url.URL, c policy.EgressCredential) {
	dest := c.Dest()
	refuse := func(w http.ResponseWriter, r *http.Request, err error) {
		p.refuse(w, r, "https", dest, err, "credential", c.Name)
	}
	if err := checkCredentialedRequest(r, c); err != nil {
		refuse(w, r, err)
		return
	}
	inj, err := p.creds.inj.Open(c)
	if err != nil {
		p.log.Error("egress credential unavailable", "dest", dest, "credential", c.Name, "err", err)
		refuse(w, r, errCredential)
		return
	}
	start := p.now()
	out := r.Clone(r.Context())
	host := dest
	if c.Port == 443 {
		host = strings.TrimSuffix(dest, ":443") // the Host header as a browser sends it
	}
	out.URL = &url.URL{Scheme: "https", Host: host, Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	out.Host, out.RequestURI = "", ""
	rc := http.NewResponseController(w)
	until := p.now().Add(p.lifetime())
	_ = rc.SetReadDeadline(until)
	_ = rc.SetWriteDeadline(until)

	var (
		status    int
		bodyBytes atomic.Int64
		reflected atomic.Bool
	)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.Host = ""
			// Identity only: the reflection guard reads the bytes as sent, so
			// it must get them as the guest will read them.
			pr.Out.Header.Set("Accept-Encoding", "identity")
			// Added after the hop-by-hop headers are gone, and only here.
			pr.Out.Header.Set(c.Header, inj.Value())
		},
		Transport: noInterim{p.creds.tr},
		ErrorLog:  log0,
		ModifyResponse: func(resp *http.Response) error {
			if err := checkCredentialedAnswer(resp.Header, inj); err != nil {
				if errors.Is(err, errReflected) {
					reflected.Store(true)
				}
				return err
			}
			status = resp.StatusCode
			resp.Body = guardedBody{r: inj.Guard(resp.Body), c: resp.Body, n: &bodyBytes, reflected: &reflected,
				trailer: func() bool { return inj.HeaderReflects(resp.Trailer) }}
			return nil
		},
		ErrorHandler: refuse,
	}
	// Logged also when a cut answer aborts the handler (net/http's
	// ErrAbortHandler panic): host, status, bytes, never the value.
	defer func() {
		if status == 0 {
			return // refused: refuse logged it
		}
		attrs := []any{"dest", dest, "credential", c.Name, "status", status, "bytes_in", bodyBytes.Load(),
			"duration_ms", p.now().Sub(start).Milliseconds()}
		if reflected.Load() {
			p.log.Warn("egress credentialed answer cut: it reflects the credential", attrs...)
			return
		}
		p.log.Info("egress credentialed", attrs...)
	}()
	rp.ServeHTTP(w, out)
}

// checkCredentialedRequest refuses what a guest may not send to a
// credentialed destination: a header (or declared trailer) that a server
// may read as the credential header, and a protocol upgrade.
func checkCredentialedRequest(r *http.Request, c policy.EgressCredential) error {
	for _, h := range []http.Header{r.Header, r.Trailer} {
		for name := range h {
			if sameFieldName(name, c.Header) {
				return errCredentialHeader
			}
		}
	}
	if r.Header.Get("Upgrade") != "" {
		return errUpgrade
	}
	return nil
}

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

// noInterim runs the request without the caller's client trace: the
// reverse proxy's trace hands a 1xx answer's headers (103 Early Hints, say)
// straight to the guest, past ModifyResponse's reflection check. Without a
// trace the transport drops 1xx answers itself. Cancellation and deadline
// still follow the request's context, until the body is closed.
type noInterim struct{ rt http.RoundTripper }

func (n noInterim) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := context.AfterFunc(req.Context(), func() { cancel(context.Cause(req.Context())) })
	end := func() { stop(); cancel(nil) }
	resp, err := n.rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		end()
		return nil, err
	}
	resp.Body = endBody{ReadCloser: resp.Body, end: end}
	return resp, nil
}

type endBody struct {
	io.ReadCloser
	end func()
}

func (b endBody) Close() error { err := b.ReadCloser.Close(); b.end(); return err }
