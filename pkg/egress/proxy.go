// Package egress gives a granted turn (or run) a network without a network
// interface: the proxy route served on its broker socket, and the bridge
// that carries a container's loopback TCP connections to that socket.
//
// Guarantees (DESIGN.md section 11): every destination is dialled through
// safefetch.Dialer (vetted and pinned; the operator's egress.allow is its
// only widening) and this package has no other dial path to the network;
// only HTTP CONNECT to host:port and absolute-form http:// requests are
// served; the grant's bounds hold for the whole turn: destination
// connections open at once, bytes each way over all connections, each
// connection's lifetime, and the turn deadline; a refusal is an HTTP status
// with generic text; a log line names the destination host:port, the vetted
// address, bytes and duration of each connection, never a path, query,
// header or payload. A grant's credentialed destinations (credentialed.go)
// are the one case where the proxy adds to a request: the granted header,
// over verified TLS, to exactly that host:port, with the answer checked for
// reflection; a CONNECT never carries a credential.
package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// DialTimeout bounds one destination dial: one resolution
// (safefetch.ResolveTimeout) and a few vetted addresses
// (safefetch.ConnectTimeout each).
const DialTimeout = 15 * time.Second

// MaxRefusals is a turn's budget of refused proxy requests (4xx); after it
// every proxy request is refused before any lookup or dial, and unlogged.
const MaxRefusals = 64

// maxResponseHeaderBytes bounds a destination's response header block
// (absolute-form requests).
const maxResponseHeaderBytes = 64 << 10

// copyBufferBytes is each direction's copy buffer.
const copyBufferBytes = 64 << 10

// maxDestBytes bounds a destination as asked (CONNECT target, absolute-form
// host:port): a 253-byte name and ":65535" fit, a bracketed IPv6 literal
// too. A longer one cannot be valid and is refused as malformed before any
// lookup; so no log line carries more than this of guest-chosen text.
const maxDestBytes = 262

// Errors of the proxy's own bounds (dial errors are safefetch's).
var (
	ErrConnections = errors.New("egress: connection limit reached")
	ErrBytes       = errors.New("egress: byte budget spent")
	ErrLifetime    = errors.New("egress: connection lifetime reached")
)

// IsProxyRequest reports whether r is for the proxy route: a CONNECT, or a
// request whose target is in absolute form (not a "/" path). Everything else
// belongs to the broker's own routes and their strict refusals.
func IsProxyRequest(r *http.Request) bool {
	return r.Method == http.MethodConnect ||
		r.URL != nil && r.URL.IsAbs() && !strings.HasPrefix(r.RequestURI, "/")
}

// Proxy is one turn's proxy route. Create it with New; it is an
// http.Handler for the requests IsProxyRequest selects.
type Proxy struct {
	dialer   *safefetch.Dialer
	grant    policy.Egress
	deadline time.Time
	log      *slog.Logger
	now      func() time.Time
	rp       *httputil.ReverseProxy
	creds    *credRoutes      // credentialed destinations (credentialed.go), or nil
	icpt     *interceptRoutes // intercepted destinations (intercept.go), or nil

	open     atomic.Int64 // destination connections open
	out, in  budget       // bytes to and from destinations, the whole turn
	refusals atomic.Int64
}

// New returns the proxy route for a grant. d is the vetted dialer (its Allow
// the operator's egress.allow); deadline is the turn deadline.
func New(d *safefetch.Dialer, grant policy.Egress, deadline time.Time, log *slog.Logger) *Proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		dialer: d, grant: grant, deadline: deadline, log: log, now: time.Now,
		out: budget{max: grant.MaxBytesOut}, in: budget{max: grant.MaxBytesIn},
	}
	t := &http.Transport{
		Proxy: nil, // never the environment's
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return p.dial(ctx, "http", addr)
		},
		DialTLSContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("egress: no TLS in absolute form") // https goes through CONNECT
		},
		DisableKeepAlives:      true, // one request, one vetted dial, one log line
		DisableCompression:     true, // the guest's bytes, as they are
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		ResponseHeaderTimeout:  p.lifetime(),
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	p.rp = &httputil.ReverseProxy{
		// Rewrite (not Director) so no Forwarded or X-Forwarded-* header is
		// added or passed on; the hop-by-hop and Proxy-* headers go too.
		Rewrite:      func(pr *httputil.ProxyRequest) { pr.Out.Host = "" },
		Transport:    t,
		ErrorLog:     log0,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { p.refuse(w, r, "http", hostPort(r.URL), err) },
	}
	return p
}

var log0 = log.New(io.Discard, "", 0)

func (p *Proxy) lifetime() time.Duration {
	return time.Duration(p.grant.ConnectionTimeoutMs) * time.Millisecond
}

// ServeHTTP serves one proxy request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.refusals.Load() >= MaxRefusals {
		answer(w, http.StatusForbidden)
		return
	}
	if !p.now().Before(p.deadline) {
		p.refuse(w, r, "", "", errTurnOver)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case IsProxyRequest(r):
		p.forward(w, r)
	default:
		p.refuse(w, r, "", "", errMalformed)
	}
}

var (
	errTurnOver  = errors.New("egress: turn deadline passed")
	errMalformed = errors.New("egress: not a CONNECT host:port or absolute-form http request")
	errScheme    = errors.New("egress: absolute form is for http; https goes through CONNECT")
)

// connect serves "CONNECT host:port": dial, hijack, answer 200, relay.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	dest := r.RequestURI
	// net/http parses an authority target as http://<target>: anything that
	// does not come back as exactly host:port (userinfo, a path, a query)
	// is refused here; the host itself is the dialer's to vet.
	if len(dest) > maxDestBytes || r.URL == nil || r.URL.Host != dest || r.URL.User != nil || r.URL.Path != "" ||
		r.URL.RawQuery != "" || r.URL.Fragment != "" || strings.ContainsAny(dest, "@/?#%\\ ") {
		p.refuse(w, r, "CONNECT", "", errMalformed)
		return
	}
	if ir, other, ok := p.interceptFor(dest); ok {
		p.interceptConnect(w, r, ir)
		return
	} else if other != "" {
		p.refuse(w, r, "CONNECT", dest, errUndeclaredPort, "credential", other)
		return
	}
	ctx := r.Context()
	up, err := p.dial(ctx, "CONNECT", dest)
	if err != nil {
		p.refuse(w, r, "CONNECT", dest, err)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.end(err)
		_ = up.Close()
		answer(w, http.StatusInternalServerError)
		return
	}
	// The server's read and write deadlines are for the broker's own calls;
	// the tunnel's bounds are the lifetime timer and ctx (turn deadline).
	_ = c.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { up.end(errTurnOver); _ = up.Close(); _ = c.Close() })
	defer stop()
	defer c.Close()
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent right after its request (a TLS ClientHello,
	// typically) already sit in the server's buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	relay(c, up)
}

// relay copies both ways until the destination side ends; the client's
// end of input half-closes the destination connection.
func relay(client net.Conn, up *conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.CopyBuffer(up, onlyReader{client}, make([]byte, copyBufferBytes))
		_ = up.CloseWrite()
	}()
	_, _ = io.CopyBuffer(onlyWriter{client}, onlyReader{up}, make([]byte, copyBufferBytes))
	_ = up.Close()
	_ = client.Close()
	<-done
}

// onlyReader and onlyWriter hide ReadFrom/WriteTo so copies go through the
// counting Read and Write.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// forward serves one absolute-form http:// request through the reverse
// proxy, whose only dial is p.dial.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	if r.URL.Scheme != "http" {
		p.refuse(w, r, "http", "", errScheme)
		return
	}
	if len(r.URL.Host) > maxDestBytes {
		p.refuse(w, r, "http", "", errMalformed)
		return
	}
	u, err := safefetch.ParseURL(r.RequestURI)
	if err != nil {
		p.refuse(w, r, "http", "", err)
		return
	}
	if err := p.screenPlain(r); err != nil {
		p.refuse(w, r, "http", hostPort(u), err)
		return
	}
	// One mechanism (docs/credentialed-egress.md): a credential is
	// reached by its https URL with its placeholder (intercept.go), never
	// by plain http, intercepted or not (a grant that minted it no
	// placeholder has no route to it at all).
	if c, ok := p.credentialed(u); ok {
		p.refuse(w, r, "http", hostPort(u), errPlainIntercepted, "credential", c.Name)
		return
	}
	if _, other, _ := p.interceptFor(hostPort(u)); other != "" {
		p.refuse(w, r, "http", hostPort(u), errUndeclaredPort, "credential", other)
		return
	}
	// The broker server's deadlines are for its own calls; a proxied
	// exchange gets the connection lifetime.
	rc := http.NewResponseController(w)
	until := p.now().Add(p.lifetime())
	_ = rc.SetReadDeadline(until)
	_ = rc.SetWriteDeadline(until)
	out := r.Clone(r.Context())
	out.URL, out.Host, out.RequestURI = u, u.Host, ""
	p.rp.ServeHTTP(w, out)
}

// hostPort names a URL's destination for the log: host and port only.
func hostPort(u interface {
	Hostname() string
	Port() string
}) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// refuse answers err as a status with generic text and logs it in the
// broker's words, with attrs (a credential's name, say); a 4xx counts
// against MaxRefusals.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, kind, dest string, err error, attrs ...any) {
	code := Status(err)
	if r.Context().Err() != nil && code >= 500 {
		code = http.StatusServiceUnavailable
	}
	if code >= 400 && code < 500 && p.refusals.Add(1) == MaxRefusals {
		p.log.Warn("egress refusal budget spent: every later proxy request is refused unread", "refusals", MaxRefusals)
	}
	answer(w, code)
	all := []any{"status", code, "reason", reason(err)}
	if kind != "" {
		all = append(all, "kind", kind)
	}
	if dest != "" {
		all = append(all, "dest", dest)
	}
	p.log.Warn("egress refused", append(all, attrs...)...)
}

// reason is a refusal's log text: the proxy's and safefetch's own words
// (host, address, rule); any other error (a destination's malformed answer,
// say, whose text may quote it) only by its category.
func reason(err error) string {
	var se *safefetch.Error
	switch {
	case errors.As(err, &se), errors.Is(err, errMalformed), errors.Is(err, errScheme), errors.Is(err, errTurnOver),
		errors.Is(err, ErrConnections), errors.Is(err, ErrBytes), errors.Is(err, ErrLifetime),
		errors.Is(err, errCredentialHeader), errors.Is(err, errUpgrade), errors.Is(err, errCredential),
		errors.Is(err, errReflected), errors.Is(err, errEncoded), errors.As(err, new(errTLS)),
		errors.Is(err, errPlaceholderElsewhere), errors.Is(err, errValueSent), errors.Is(err, errHeaderTwice),
		errors.Is(err, errHostMismatch), errors.Is(err, errSNI), errors.Is(err, errUndeclaredPort), errors.Is(err, errPlainIntercepted),
		errors.Is(err, errInterim101), errors.Is(err, errOriginForm), errors.Is(err, ErrReflectedRequest),
		errors.Is(err, ErrReflected), errors.Is(err, errRequestHead):
		return err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "egress: " + err.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "egress: destination timed out"
	}
	return "egress: destination exchange failed"
}

// Status maps a refusal or dial error to the proxy's answer: 403 for a
// destination the dialer refuses, 429 for a spent bound, 400 for a
// malformed request, 502 for an unreachable destination, 504 for a timeout,
// 503 once the turn is over.
func Status(err error) int {
	switch {
	case errors.Is(err, errMalformed), errors.Is(err, errScheme), errors.Is(err, errCredentialHeader), errors.Is(err, errUpgrade):
		return http.StatusBadRequest
	case errors.Is(err, ErrConnections), errors.Is(err, ErrBytes):
		return http.StatusTooManyRequests
	case errors.Is(err, errPlaceholderElsewhere), errors.Is(err, errValueSent), errors.Is(err, errHeaderTwice),
		errors.Is(err, errHostMismatch), errors.Is(err, errOriginForm), errors.Is(err, ErrReflectedRequest),
		errors.Is(err, errRequestHead):
		return http.StatusBadRequest
	case errors.Is(err, safefetch.ErrAddress), errors.Is(err, safefetch.ErrURL), errors.Is(err, errUndeclaredPort),
		errors.Is(err, errPlainIntercepted):
		return http.StatusForbidden
	case errors.Is(err, errTurnOver):
		return http.StatusServiceUnavailable
	case errors.Is(err, safefetch.ErrDeadline), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrLifetime):
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// publicText is all a refusal says: the status and nothing of the reason.
var publicText = map[int]string{
	http.StatusBadRequest:          "bad proxy request\n",
	http.StatusForbidden:           "destination refused\n",
	http.StatusTooManyRequests:     "egress limit reached\n",
	http.StatusBadGateway:          "destination unreachable\n",
	http.StatusServiceUnavailable:  "egress unavailable\n",
	http.StatusGatewayTimeout:      "destination timed out\n",
	http.StatusInternalServerError: "proxy error\n",
}

func answer(w http.ResponseWriter, code int) {
	h := w.Header()
	clear(h)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Connection", "close")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, publicText[code])
}
