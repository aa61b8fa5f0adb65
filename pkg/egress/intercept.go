package egress

// Interception (docs/credentialed-egress.md, "Placeholders"): the run holds
// a placeholder per credential, never the value. A CONNECT to exactly a
// credential's host:port is terminated here with a leaf of the run's CA
// (pkg/runca) for that host; each HTTP/1.1 request inside is read, checked,
// the placeholder swapped for the value in the declared header only, and
// sent over verified TLS to the real host through the vetted dialer
// (dialCredentialed: Proxy.dial, then TLS). Only http/1.1 is offered in
// ALPN: one parser whose every header and body byte this file checks; h2
// would need its own framing, HPACK and stream state terminated and
// re-originated here, and every client of the toolbox falls back to 1.1.
//
// Refused with a generic answer and a log line naming the credential and
// the destination (never the value or a placeholder): a placeholder of any
// credential of the run outside the declared header of its own host
// (another header, the request line, the body or trailers, another
// credential's host, a plain-http request); the credential's value sent by
// the code; an SNI or Host that is not the declared host; a CONNECT to
// another port of a declared host; plain http to a declared host:port (the
// old plain-http route, kept for session grants only); an upgrade. Answers: identity asked,
// an encoded one refused, headers, body and trailers through the
// reflection guard, 1xx dropped, 101 refused, redirects handed back.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/roundtable-sandbox/sandbox/pkg/placeholder"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// MaxInterceptHeaderBytes bounds an intercepted request's header block.
const MaxInterceptHeaderBytes = 32 << 10

// Interceptor is what interception needs of the broker's credentials
// (package credential behind it): the raw value of a credential with the
// answer's checks, and matchers of texts in every form the reflection
// rules know.
type Interceptor interface {
	// OpenRaw loads c's credential: its value (what replaces the
	// placeholder) and the checks of an answer against it.
	OpenRaw(c policy.EgressCredential) (string, Injection, error)
	// Screen matches texts (placeholders, a value) as the reflection
	// guard matches a credential.
	Screen(texts ...string) Screen
}

// Screen finds texts in a request's parts.
type Screen interface {
	HeaderReflects(h http.Header) bool
	// TextReflects is HeaderReflects(http.Header{"": {v}}): one text
	// checked on its own.
	TextReflects(v string) bool
	// Guard fails with ErrReflected once what it read holds a text.
	Guard(r io.Reader) io.Reader
}

// LeafSource signs a server certificate for a declared host (*runca.CA).
type LeafSource interface {
	Leaf(host string) (*tls.Certificate, error)
}

// Errors of interception (their text is for the log; the code gets a
// generic answer).
var (
	errPlaceholderElsewhere = errors.New("egress: a placeholder outside the declared header of its own host")
	errValueSent            = errors.New("egress: the request carries the credential's value")
	errHeaderTwice          = errors.New("egress: the declared header more than once")
	errHostMismatch         = errors.New("egress: the request's Host is not the intercepted host")
	errSNI                  = errors.New("egress: the TLS server name is not the intercepted host")
	errUndeclaredPort       = errors.New("egress: another port of a credentialed host")
	errPlainIntercepted     = errors.New("egress: plain http to an intercepted destination (its https URL carries the placeholder)")
	errInterim101           = errors.New("egress: the destination switched protocols unasked")
	errOriginForm           = errors.New("egress: an intercepted request must be in origin form")
)

// interceptRoutes are a grant's intercepted destinations.
type interceptRoutes struct {
	ca    LeafSource
	in    Interceptor
	by    map[string]interceptRoute // dest (lower-case host:port)
	hosts map[string]string         // declared host: a credential's name
	all   []string                  // every placeholder of the run
	phs   Screen                    // matches any of all
}

type interceptRoute struct {
	c    policy.EgressCredential
	ph   string
	dest string // c.Dest(), once: every audit line names it
	port string // c.Port as text, for the Host check
}

// WithInterception intercepts the credentials of the grant that have a
// placeholder in phs (by credential name) with leaves from ca. Call it
// after WithCredentials; without credentials it changes nothing.
func (p *Proxy) WithInterception(ca LeafSource, in Interceptor, phs map[string]placeholder.Placeholder) (*Proxy, error) {
	if p.creds == nil || len(phs) == 0 {
		return p, nil
	}
	if ca == nil || in == nil {
		return nil, errors.New("egress: interception needs a CA and an interceptor")
	}
	ir := &interceptRoutes{ca: ca, in: in, by: map[string]interceptRoute{}, hosts: map[string]string{}}
	for _, c := range p.grant.Credentials {
		ph, ok := phs[c.Name]
		if !ok || ph.Empty() {
			continue
		}
		ir.by[c.Dest()] = interceptRoute{c: c, ph: ph.Reveal(), dest: c.Dest(), port: strconv.Itoa(c.Port)}
		ir.hosts[c.Host] = c.Name
		ir.all = append(ir.all, ph.Reveal())
	}
	if len(ir.all) == 0 {
		return p, nil
	}
	ir.phs = in.Screen(ir.all...)
	p.icpt = ir
	return p, nil
}

// interceptFor returns the intercepted route of a CONNECT target, or the
// name of the credential whose host it names on another port.
func (p *Proxy) interceptFor(dest string) (interceptRoute, string, bool) {
	if p.icpt == nil {
		return interceptRoute{}, "", false
	}
	host, port, err := net.SplitHostPort(dest)
	if err != nil {
		return interceptRoute{}, "", false
	}
	host = strings.ToLower(host)
	if ir, ok := p.icpt.by[net.JoinHostPort(host, port)]; ok {
		return ir, "", true
	}
	return interceptRoute{}, p.icpt.hosts[host], false
}

// screenPlain refuses a plain-http request (absolute form) that carries
// any placeholder of the run in its request line, headers, body or
// trailers; nil when nothing is intercepted.
func (p *Proxy) screenPlain(r *http.Request) error {
	if p.icpt == nil {
		return nil
	}
	if p.icpt.phs.HeaderReflects(r.Header) || p.icpt.phs.HeaderReflects(http.Header{"": {r.RequestURI}}) {
		return errPlaceholderElsewhere
	}
	body, whole, err := screenBody(r, p.icpt.phs, nil)
	if err != nil {
		return errPlaceholderElsewhere
	}
	r.Body = body
	if whole && r.ContentLength < 0 && len(r.Trailer) == 0 {
		r.ContentLength, r.TransferEncoding = int64(bodyLen(body)), nil
	}
	return nil
}

// MaxScreenedBodyBytes is how much of a request body is read and screened
// before anything of the request is sent: a body up to this size that
// holds a placeholder or the value never leaves in part. A longer one
// streams through the guard and is cut where one is found (the
// destination then gets a truncated request, never the text).
const MaxScreenedBodyBytes = 64 << 10

// screenBody reads up to MaxScreenedBodyBytes of r's body (and its
// trailers when it ends there) through scr's guard. It returns the body to
// send, whole when all of it was read; an error when scr found a text.
// n, when not nil, counts the bytes read.
func screenBody(r *http.Request, scr Screen, n *atomic.Int64) (io.ReadCloser, bool, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return r.Body, true, nil
	}
	var found atomic.Bool
	sb := screenedBody{r: scr.Guard(r.Body), c: r.Body, n: n, found: &found,
		trailer: func() bool { return scr.HeaderReflects(r.Trailer) }}
	buf, err := io.ReadAll(io.LimitReader(sb, MaxScreenedBodyBytes+1))
	if err != nil {
		if found.Load() {
			return nil, false, ErrReflectedRequest
		}
		return nil, false, err
	}
	if len(buf) <= MaxScreenedBodyBytes {
		_ = r.Body.Close()
		return memBody{bytes.NewReader(buf)}, true, nil
	}
	return readCloser{io.MultiReader(bytes.NewReader(buf), sb), sb}, false, nil
}

// memBody is a body read whole: writeWholeRequest sends it in one
// buffer with the head (Request.Write does not know it for an in-memory
// reader and flushes the head on its own first).
type memBody struct{ *bytes.Reader }

func (memBody) Close() error { return nil }

func bodyLen(b io.ReadCloser) int {
	if m, ok := b.(memBody); ok {
		return int(m.Size())
	}
	return -1
}

type readCloser struct {
	io.Reader
	io.Closer
}

// screenedBody is a request body through a Screen's guard; at its end
// the trailers are screened too.
type screenedBody struct {
	r       io.Reader
	c       io.Closer
	trailer func() bool
	n       *atomic.Int64
	found   *atomic.Bool
}

func (s screenedBody) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if s.n != nil {
		s.n.Add(int64(n))
	}
	if errors.Is(err, io.EOF) && s.trailer() {
		err = ErrReflectedRequest
	}
	if errors.Is(err, ErrReflected) || errors.Is(err, ErrReflectedRequest) {
		s.found.Store(true)
		err = ErrReflectedRequest
	}
	return n, err
}

func (s screenedBody) Close() error { return s.c.Close() }

// interceptConnect serves a CONNECT to an intercepted destination: the
// broker's TLS with the run CA's leaf, then its requests one at a time.
func (p *Proxy) interceptConnect(w http.ResponseWriter, r *http.Request, ir interceptRoute) {
	dest := ir.dest
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		answer(w, http.StatusInternalServerError)
		return
	}
	defer c.Close()
	ctx := r.Context()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	// The whole intercepted connection lives at most a connection lifetime.
	_ = c.SetDeadline(p.now().Add(p.lifetime()))
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var raw net.Conn = c
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		raw = prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(append([]byte(nil), b...)), c)}
	}
	tc := tls.Server(raw, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			// A DNS name must be asked for by name; an IP literal is sent
			// without SNI by every client.
			if hi.ServerName == "" && !isIPLiteral(ir.c.Host) || hi.ServerName != "" && !strings.EqualFold(hi.ServerName, ir.c.Host) {
				return nil, errSNI
			}
			return p.icpt.ca.Leaf(ir.c.Host)
		},
	})
	hctx, cancel := context.WithTimeout(ctx, DialTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		reason := "egress: TLS with the code failed (it refused the run CA, or asked for another name)"
		if errors.Is(err, errSNI) {
			reason = errSNI.Error()
		}
		p.refusals.Add(1)
		p.log.Warn("egress refused", "kind", "intercept", "dest", dest, "credential", ir.c.Name, "reason", reason)
		return
	}
	s := &interceptSession{p: p, ir: ir, client: tc, ctx: ctx,
		// The audit line's fixed attributes, formatted once for the
		// connection by the handler (the line is on every request's path).
		alog: p.log.With("kind", "intercept", "dest", ir.dest, "credential", ir.c.Name)}
	s.lr = &io.LimitedReader{R: tc}
	s.br = bufio.NewReader(s.lr)
	s.hr = headReader{br: s.br}
	s.bw = bufio.NewWriter(tc)
	defer s.closeUp()
	for s.serveOne() {
	}
}

func isIPLiteral(h string) bool { _, err := netip.ParseAddr(h); return err == nil }

// prefixConn reads bytes the server had buffered before the hijack first.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// interceptSession is one intercepted client connection: its requests in
// turn, one destination connection reused across them.
type interceptSession struct {
	p      *Proxy
	alog   *slog.Logger // p.log with the audit line's fixed attributes
	ir     interceptRoute
	ctx    context.Context
	client *tls.Conn
	lr     *io.LimitedReader
	br     *bufio.Reader
	hr     headReader // the requests' strict reader over br (requesthead.go)
	bw     *bufio.Writer

	// Opened at the first request, for the connection's life.
	value string
	inj   Injection
	vs    Screen // the value
	both  Screen // the placeholders and the value

	sent      atomic.Int64 // the current request's body bytes
	got       atomic.Int64 // the current answer's body bytes
	reflected atomic.Bool  // the current answer was cut by the guard

	// line is the one value under the empty name that a request line or
	// a small answer's body takes in a header block for one pass of a
	// Screen; out is the current outgoing request. Both reused: a
	// request's are not read once the next one is (issue 37's
	// per-request allocations).
	line [1]string
	out  http.Request
	ans  []byte // a small answer's body (answerBuf)

	up   net.Conn
	upLR *io.LimitedReader
	upBR *bufio.Reader
	upBW *bufio.Writer
}

func (s *interceptSession) closeUp() {
	if s.up != nil {
		_ = s.up.Close()
		s.up, s.upBR, s.upBW = nil, nil, nil
	}
}

// refuse writes a generic answer to the code, logs the reason with the
// credential and destination, and ends the connection (false).
func (s *interceptSession) refuse(err error, method string) bool {
	code := Status(err)
	if code >= 400 && code < 500 {
		s.p.refusals.Add(1)
	}
	fmt.Fprintf(s.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		code, http.StatusText(code), len(publicText[code]), publicText[code])
	_ = s.bw.Flush()
	attrs := []any{"status", code, "reason", reason(err), "kind", "intercept", "dest", s.ir.dest, "credential", s.ir.c.Name}
	if method != "" {
		attrs = append(attrs, "method", method)
	}
	s.p.log.Warn("egress refused", attrs...)
	return false
}

// maxReusedAnswer is the largest small answer body whose buffer a
// session keeps for the next one.
const maxReusedAnswer = 16 << 10

// answerBuf is a buffer of n bytes for a small answer's body: the
// session's own up to maxReusedAnswer (relay sends the body before it
// returns, so the next request's answer may have it), a new one above.
func (s *interceptSession) answerBuf(n int) []byte {
	if n > maxReusedAnswer {
		return make([]byte, n)
	}
	// Never nil, an empty answer too: the caller reads nil as "not a
	// small answer" (the streaming path).
	if s.ans == nil || cap(s.ans) < n {
		s.ans = make([]byte, n, max(n, 1024))
	}
	return s.ans[:n]
}

// ErrReflectedRequest: a request's body or trailers carry a placeholder
// or the value (the request guard's finding).
var ErrReflectedRequest = errors.New("egress: a placeholder or the credential's value in the request body or trailers")

// serveOne reads, checks and relays one request; false ends the
// connection.
func (s *interceptSession) serveOne() bool {
	s.lr.N = MaxInterceptHeaderBytes + 4096 // what the reader may already hold
	req, err := s.hr.read()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
			return false
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false
		}
		if !errors.Is(err, errRequestHead) {
			err = errMalformed
		}
		return s.refuse(err, "")
	}
	s.lr.N = math.MaxInt64
	method := req.Method
	if s.inj == nil {
		v, inj, err := s.p.icpt.in.OpenRaw(s.ir.c)
		if err != nil {
			s.p.log.Error("egress credential unavailable", "dest", s.ir.dest, "credential", s.ir.c.Name, "err", err)
			return s.refuse(errCredential, method)
		}
		s.value, s.inj = v, inj
		s.vs = s.p.icpt.in.Screen(v)
		s.both = s.p.icpt.in.Screen(append(append([]string(nil), s.p.icpt.all...), v)...)
	}
	if err := s.check(req); err != nil {
		return s.refuse(err, method)
	}
	s.sent.Store(0)
	out, substituted, err := s.outgoing(req)
	if err != nil {
		return s.refuse(err, method)
	}
	return s.relay(req, out, substituted)
}

// check refuses what no intercepted request may be: not origin form,
// another Host, an upgrade, an alias or a second line of the declared
// header, a placeholder in the request line or a header other than the
// declared one, the value anywhere.
func (s *interceptSession) check(req *http.Request) error {
	c := s.ir.c
	if req.Method == http.MethodConnect || !strings.HasPrefix(req.RequestURI, "/") &&
		!(req.Method == http.MethodOptions && req.RequestURI == "*") {
		return errOriginForm
	}
	if !s.hostMatches(req.Host) {
		return errHostMismatch
	}
	if firstValue(req.Header, "Upgrade") != "" || firstValue(req.Header, "Http2-Settings") != "" {
		return errUpgrade
	}
	for name := range req.Header {
		if name != c.Header && sameFieldName(name, c.Header) {
			return errCredentialHeader // an alias a server may read as the declared header
		}
	}
	for name := range req.Trailer {
		if sameFieldName(name, c.Header) {
			return errCredentialHeader
		}
	}
	if len(req.Header.Values(c.Header)) > 1 {
		return errHeaderTwice
	}
	// One pass over every header but the declared one and the request
	// line, for the placeholders and the value at once; the cheaper
	// placeholder-only pass names which, on a refusal only. The block
	// checked is req.Header itself, the declared header set aside and the
	// request line under the empty name (no parsed field has it), then
	// put back: no copy of the block per request (issue 37's cost).
	h := req.Header
	declared, hasDeclared := h[c.Header]
	delete(h, c.Header)
	s.line[0] = req.RequestURI
	h[""] = s.line[:]
	found := s.both.HeaderReflects(h)
	elsewhere := found && s.p.icpt.phs.HeaderReflects(h)
	delete(h, "")
	s.line[0] = ""
	if hasDeclared {
		h[c.Header] = declared
	}
	switch {
	case elsewhere:
		return errPlaceholderElsewhere
	case found:
		return errValueSent
	}
	if v := h.Get(c.Header); v != "" && s.vs.TextReflects(v) {
		return errValueSent
	}
	return nil
}

func (s *interceptSession) hostMatches(h string) bool {
	c := s.ir.c
	host, port := h, ""
	if hh, pp, err := net.SplitHostPort(h); err == nil {
		host, port = hh, pp
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		host = h[1 : len(h)-1]
	}
	if !strings.EqualFold(host, c.Host) {
		return false
	}
	return port == "" && c.Port == 443 || port == s.ir.port
}

// outgoing is the request as the destination gets it: the value checks,
// the placeholder swapped in the declared header, hop-by-hop headers
// gone, identity asked for, the body and trailers guarded.
func (s *interceptSession) outgoing(req *http.Request) (*http.Request, bool, error) {
	c := s.ir.c
	// req was read here and is not used again as the code sent it: its
	// header block becomes the outgoing one in place (what it held
	// before is read first).
	h := req.Header
	declared, expect := h.Get(c.Header), firstValue(h, "Expect")
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for k := range h {
		if hopRequest(k) {
			delete(h, k)
		}
	}
	substituted := false
	if v := declared; v != "" {
		nv, left, ok := substitute(v, s.ir.ph, s.value)
		if s.p.icpt.phs.TextReflects(left) {
			return nil, false, errPlaceholderElsewhere // a piece of one, another credential's, or one re-encoded
		}
		if ok {
			setOne(h, c.Header, nv)
			substituted = true
		}
	}
	setOne(h, "Accept-Encoding", "identity")
	s.out = http.Request{Method: req.Method, URL: req.URL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Host: req.Host, ContentLength: req.ContentLength, TransferEncoding: req.TransferEncoding,
		Trailer: req.Trailer}
	out := &s.out
	if strings.EqualFold(expect, "100-continue") {
		// The broker's own interim answer (the destination's are dropped):
		// the body is read here before anything is sent.
		_, _ = io.WriteString(s.bw, "HTTP/1.1 100 Continue\r\n\r\n")
		if err := s.bw.Flush(); err != nil {
			return nil, false, err
		}
	}
	body, whole, err := screenBody(req, s.both, &s.sent)
	if err != nil {
		return nil, false, err
	}
	out.Body = body
	if whole && out.ContentLength < 0 && len(req.Trailer) == 0 {
		out.ContentLength, out.TransferEncoding = int64(bodyLen(body)), nil
	}
	return out, substituted, nil
}

// setOne sets h[k] to the one value v, in the slice it holds when that
// has one value (the parsed block's, not shared): h[k] = []string{v}
// without its allocation.
func setOne(h http.Header, k, v string) {
	if vs := h[k]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[k] = []string{v}
}

// hopRequest reports whether an intercepted request's field k is dropped
// (a canonical name: the parsed block's keys are). One pass over the
// block's few fields rather than a lookup of each of these.
func hopRequest(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate",
		"Te", "Transfer-Encoding", "Upgrade", "Expect":
		return true
	}
	return false
}

// firstValue is h.Get(k) for a canonical k, without canonicalizing it
// again.
func firstValue(h http.Header, k string) string {
	if vs := h[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// hopResponseHeaders are dropped from an intercepted answer (canonical
// names: the parsed blocks' keys are).
var hopResponseHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Upgrade", "Te"}

// substitute swaps ph for value in a declared header's value v: the whole
// value, the credentials after a scheme ("Bearer", "token", ...), or the
// user or the password of Basic. left is v with the swapped placeholder
// taken out (what must hold no other placeholder); ok is false when v has
// no placeholder in a place it may be.
func substitute(v, ph, value string) (out, left string, ok bool) {
	if v == ph {
		return value, "", true
	}
	scheme, cred, hasScheme := strings.Cut(v, " ")
	if !hasScheme {
		return v, v, false
	}
	if strings.EqualFold(scheme, "Basic") {
		dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		if err != nil {
			return v, v, false
		}
		user, pass, colon := strings.Cut(string(dec), ":")
		if !colon || user != ph && pass != ph {
			return v, string(dec), false
		}
		lu, lp := user, pass
		if user == ph {
			user, lu = value, ""
		}
		if pass == ph {
			pass, lp = value, ""
		}
		return scheme + " " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)), lu + ":" + lp, true
	}
	if cred == ph {
		return scheme + " " + value, scheme, true
	}
	return v, v, false
}

// relay sends out on the destination connection (dialled at the first
// request) and hands the answer back after its checks; false ends the
// client connection.
func (s *interceptSession) relay(req, out *http.Request, substituted bool) bool {
	p := s.p
	start := p.now()
	if s.up == nil {
		up, err := p.dialCredentialed(s.ctx, "", s.ir.dest)
		if err != nil {
			return s.refuse(err, req.Method)
		}
		s.up = up
		s.upLR = &io.LimitedReader{R: up}
		s.upBR = bufio.NewReader(s.upLR)
		s.upBW = bufio.NewWriter(up)
	}
	uw := s.upBW
	if !writeWholeRequest(uw, out) {
		err := out.Write(uw)
		if err != nil {
			s.closeUp()
			return s.refuse(bodyErr(err), req.Method)
		}
	}
	if err := uw.Flush(); err != nil {
		s.closeUp()
		return s.refuse(err, req.Method)
	}
	var resp *http.Response
	for {
		s.upLR.N = maxResponseHeaderBytes + 4096
		r, err := readAnswer(s.upBR, out)
		if err != nil {
			s.closeUp()
			return s.refuse(err, req.Method)
		}
		if r.StatusCode == http.StatusSwitchingProtocols {
			s.closeUp()
			return s.refuse(errInterim101, req.Method)
		}
		if r.StatusCode >= 200 {
			resp = r
			break
		}
		// 1xx (103 Early Hints, say): dropped unread by the code.
	}
	s.upLR.N = math.MaxInt64
	// The reason phrase is the destination's free text, which no guard
	// reads: the code gets the status code's own text instead.
	resp.Status = ""
	for _, k := range hopResponseHeaders {
		delete(resp.Header, k)
	}
	got, reflected := &s.got, &s.reflected
	got.Store(0)
	reflected.Store(false)
	upBody := resp.Body
	var whole []byte // a small answer's body, read whole
	small := resp.ContentLength >= 0 && resp.ContentLength <= MaxScreenedBodyBytes && len(resp.TransferEncoding) == 0
	if small {
		// A small answer of known length (no trailers): read whole, then
		// its headers and body checked in one pass by the same rules as
		// the streaming guard (without its buffers); a reflecting one is
		// refused before any of it leaves.
		buf := s.answerBuf(int(resp.ContentLength))
		n, err := io.ReadFull(upBody, buf)
		got.Store(int64(n))
		if err != nil {
			s.closeUp()
			return s.refuse(err, req.Method)
		}
		if err := checkEncoding(resp.Header); err != nil {
			s.closeUp()
			return s.refuse(err, req.Method)
		}
		// The body joins the header block under the empty name (no
		// parsed field has it) for the one pass, then leaves it.
		s.line[0] = string(buf)
		resp.Header[""] = s.line[:]
		found := s.inj.HeaderReflects(resp.Header)
		delete(resp.Header, "")
		s.line[0] = ""
		if found {
			s.closeUp()
			return s.refuse(errReflected, req.Method)
		}
		// Read whole: its reader is made only if writeWholeAnswer
		// leaves it to resp.Write (not on a small answer's path).
		resp.Body = http.NoBody
		whole = buf
	} else {
		if err := checkCredentialedAnswer(resp.Header, s.inj); err != nil {
			s.closeUp()
			return s.refuse(err, req.Method)
		}
		// Response.Write closes the body it was given when it fails,
		// and closing a destination body reads it on to its end: the
		// destination's connection is closed first, below, instead.
		resp.Body = readCloser{guardedBody{r: s.inj.Guard(upBody), c: upBody, n: got, reflected: reflected,
			trailer: func() bool { return s.inj.HeaderReflects(resp.Trailer) }}, io.NopCloser(nil)}
	}
	closeAfter := resp.Close || req.Close
	resp.Close = req.Close
	var err error
	if whole == nil || !writeWholeAnswer(s.bw, resp, whole) {
		if whole != nil {
			resp.Body = io.NopCloser(bytes.NewReader(whole))
		}
		err = resp.Write(s.bw)
	}
	if err == nil {
		err = s.bw.Flush()
	}
	if whole == nil {
		if err != nil || reflected.Load() {
			// Not read to its end (Response.Write reads a body to its
			// end when it succeeds): the connection goes first, so
			// closing the body (which reads on to the end) does not wait
			// for the destination.
			s.closeUp()
		}
		_ = upBody.Close()
	}
	_ = resp.Body.Close()
	// The audit line of every request (attributes, not boxed values: it
	// is on each request's path).
	end := p.now()
	attrs := [...]slog.Attr{slog.String("method", req.Method), slog.Int("status", resp.StatusCode), slog.Bool("substituted", substituted),
		slog.Int64("bytes_out", s.sent.Load()), slog.Int64("bytes_in", got.Load()),
		slog.Int64("duration_ms", end.Sub(start).Milliseconds()), {}}
	if reflected.Load() {
		s.closeUp()
		s.audit(slog.LevelWarn, "egress intercepted answer cut: it reflects the credential", end, attrs[:6])
		return false
	}
	if err != nil {
		s.closeUp()
		attrs[6] = slog.String("reason", reason(err))
		s.audit(slog.LevelWarn, "egress intercepted answer not delivered", end, attrs[:])
		return false
	}
	s.audit(slog.LevelInfo, "egress intercepted", end, attrs[:6])
	if closeAfter {
		s.closeUp()
	}
	if resp.ContentLength < 0 && !slices.Contains(resp.TransferEncoding, "chunked") {
		// Delimited by the end of the connection (an HTTP/1.0 answer of
		// unknown length): the code reads until it closes.
		s.closeUp()
		return false
	}
	return !req.Close
}

// audit writes a request's audit line (docs/credentialed-egress.md) at t,
// the request's end: the handler is called directly, as Logger.LogAttrs
// would without the caller's pc (the handler adds no source) and a second
// clock read (issue 37's per-request cost).
func (s *interceptSession) audit(level slog.Level, msg string, t time.Time, attrs []slog.Attr) {
	ctx := context.Background()
	h := s.alog.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(t, level, msg, 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r)
}

// requestFramed reports whether Request.Write writes field k from the
// request's framing rather than its header block (its exclude set).
func requestFramed(k string) bool {
	switch k {
	case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// goUserAgent is what Request.Write sends when a request has no
// User-Agent field.
const goUserAgent = "Go-http-client/1.1"

// writeWholeRequest writes an outgoing request whose body is absent or
// read whole as out.Write would (the same bytes: TestWriteWholeRequest
// pins them), head and body in one buffer, so in one TLS record when they
// fit (Request.Write sends the head of a body it does not know to be in
// memory on its own first). It covers a request with an ASCII Host of
// plain host characters, a request URI without control bytes, no
// trailers, no Close and a User-Agent without line breaks; for anything
// else it writes nothing and returns false (the caller uses out.Write).
func writeWholeRequest(w *bufio.Writer, out *http.Request) bool {
	var body *bytes.Reader
	switch b := out.Body.(type) {
	case nil:
	case memBody:
		if b.Size() == 0 || int64(b.Len()) != b.Size() || out.ContentLength != b.Size() {
			return false
		}
		body = b.Reader
	default:
		if out.Body != http.NoBody {
			return false
		}
	}
	if body == nil && out.ContentLength != 0 || out.Method == "" || out.Method == http.MethodConnect || out.Close ||
		len(out.TransferEncoding) > 0 || out.Trailer != nil || out.URL == nil || !plainHost(out.Host) {
		return false
	}
	ruri := out.URL.RequestURI()
	for i := range len(ruri) {
		if ruri[i] < ' ' || ruri[i] == 0x7f {
			return false
		}
	}
	ua := goUserAgent
	if vs, ok := out.Header["User-Agent"]; ok {
		ua = ""
		if len(vs) > 0 {
			ua = vs[0]
		}
	}
	if strings.ContainsAny(ua, "\r\n") {
		return false
	}
	ua = textproto.TrimString(ua)
	_, _ = w.WriteString(out.Method)
	_ = w.WriteByte(' ')
	_, _ = w.WriteString(ruri)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.WriteString(out.Host)
	_, _ = w.WriteString("\r\n")
	if ua != "" {
		_, _ = w.WriteString("User-Agent: ")
		_, _ = w.WriteString(ua)
		_, _ = w.WriteString("\r\n")
	}
	if body != nil || out.Method == http.MethodPost || out.Method == http.MethodPut || out.Method == http.MethodPatch {
		_, _ = w.WriteString("Content-Length: ")
		_, _ = w.Write(strconv.AppendInt(w.AvailableBuffer(), out.ContentLength, 10))
		_, _ = w.WriteString("\r\n")
	}
	writeFields(w, out.Header, requestFramed)
	_, _ = w.WriteString("\r\n")
	if body != nil {
		_, _ = body.WriteTo(w)
	}
	return true
}

// plainHost reports whether h is a non-empty Host of letters, digits and
// '.', '-', ':', '[', ']' only: what Request.Write sends unchanged (no
// punycode, no IPv6 zone).
func plainHost(h string) bool {
	for i := range len(h) {
		switch c := h[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == ':', c == '[', c == ']':
		default:
			return false
		}
	}
	return h != ""
}

// answerFramed reports whether Response.Write writes field k from the
// answer's framing rather than its header block (its exclude set).
func answerFramed(k string) bool {
	switch k {
	case "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// writeFields writes h's fields but the framed ones as Header.WriteSubset
// does (the same bytes: FuzzWriteFields pins them): names in byte order,
// a name that is not a token dropped, each value with its CR and LF as
// spaces and trimmed. It is WriteSubset without its pooled sorter, its
// Replacer and an interface call per piece: both heads of every
// intercepted request pass here (issue 37's per-request cost).
func writeFields(w *bufio.Writer, h http.Header, framed func(string) bool) {
	var arr [16]string // a request's or answer's names, most often
	keys := arr[:0]
	for k := range h {
		if !framed(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			if strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0 {
				v = newlinesToSpaces(v)
			}
			_, _ = w.WriteString(k)
			_, _ = w.WriteString(": ")
			_, _ = w.WriteString(textproto.TrimString(v))
			_, _ = w.WriteString("\r\n")
		}
	}
}

// newlinesToSpaces is net/http's headerNewlineToSpace replacer: byte by
// byte (strings.Map would turn invalid UTF-8 into U+FFFD).
func newlinesToSpaces(v string) string {
	b := []byte(v)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// writeWholeAnswer writes an answer whose body was read whole as
// resp.Write would (the same bytes: TestWriteWholeAnswer pins it), without
// its transfer writer, body probe and formatting: a small answer's path,
// on every request (issue 37's cost). It covers an HTTP/1.x answer with a
// body of known, non-zero length, no Connection field (relay drops it) and
// no trailers, to a request other than HEAD; for anything else it writes
// nothing and returns false (the caller uses resp.Write).
func writeWholeAnswer(w *bufio.Writer, resp *http.Response, body []byte) bool {
	if resp.ProtoMajor != 1 || resp.ProtoMinor < 0 || resp.ProtoMinor > 9 || resp.StatusCode < 200 || resp.StatusCode > 999 ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		resp.ContentLength <= 0 || resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) > 0 ||
		resp.Trailer != nil || resp.Request != nil && resp.Request.Method == http.MethodHead {
		return false
	}
	if _, ok := resp.Header["Connection"]; ok {
		return false
	}
	text := resp.Status
	if text == "" {
		text = http.StatusText(resp.StatusCode)
		if text == "" {
			text = "status code " + strconv.Itoa(resp.StatusCode)
		}
	} else {
		text = strings.TrimPrefix(text, strconv.Itoa(resp.StatusCode)+" ")
	}
	_, _ = w.WriteString("HTTP/1.")
	_ = w.WriteByte('0' + byte(resp.ProtoMinor))
	_ = w.WriteByte(' ')
	_, _ = w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(resp.StatusCode), 10))
	_ = w.WriteByte(' ')
	_, _ = w.WriteString(text)
	_, _ = w.WriteString("\r\n")
	if resp.Close {
		_, _ = w.WriteString("Connection: close\r\n")
	}
	_, _ = w.WriteString("Content-Length: ")
	_, _ = w.Write(strconv.AppendInt(w.AvailableBuffer(), resp.ContentLength, 10))
	_, _ = w.WriteString("\r\n")
	writeFields(w, resp.Header, answerFramed)
	_, _ = w.WriteString("\r\n")
	_, _ = w.Write(body)
	return true
}

// bodyErr is a request write's failure as a refusal: the guard's finding
// when it was one (net/http wraps a body's read error in a type that does
// not unwrap, hence the text).
func bodyErr(err error) error {
	if errors.Is(err, ErrReflectedRequest) || strings.Contains(err.Error(), ErrReflectedRequest.Error()) {
		return ErrReflectedRequest
	}
	return err
}
