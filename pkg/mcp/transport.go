package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// budget bounds everything one logical operation (a tools/call, a session's
// initialization, a tools/list page) may receive, across every HTTP response
// it causes: bytes after decompression and server-sent events. It also records
// why the operation failed at the transport level, so the caller can turn the
// SDK's free-text errors into our fixed categories.
type budget struct {
	maxBytes  int64
	maxEvents int

	mu        sync.Mutex
	bytes     int64
	events    int
	violation error // first of errTooLarge, errTooManyEvents, errRedirect, errMethod
	transport bool  // a round trip failed below HTTP (dial, TLS, reset)
	status    int   // the last non-2xx HTTP status seen, 0 if none
	// unknown: the server refused a request for its session id (see
	// sessionRefused); such a request was not run.
	unknown bool
}

func newBudget(maxBytes int64, maxEvents int) *budget {
	return &budget{maxBytes: maxBytes, maxEvents: maxEvents}
}

type budgetKey struct{}

// withBudget attaches b to ctx; the guarded transport charges every response
// of requests made with ctx (or a context derived from it, including the
// SDK's detached ones, which keep values) to b.
func withBudget(ctx context.Context, b *budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

func budgetFrom(ctx context.Context) *budget {
	b, _ := ctx.Value(budgetKey{}).(*budget)
	return b
}

func (b *budget) fail(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.violation == nil {
		b.violation = err
	}
	return b.violation
}

func (b *budget) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.violation
}

func (b *budget) noteTransport() {
	b.mu.Lock()
	b.transport = true
	b.mu.Unlock()
}

func (b *budget) noteStatus(code int) {
	b.mu.Lock()
	b.status = code
	b.mu.Unlock()
}

func (b *budget) noteUnknownSession() {
	b.mu.Lock()
	b.unknown = true
	b.mu.Unlock()
}

func (b *budget) unknownSession() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unknown
}

func (b *budget) snapshot() (violation error, transport bool, status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.violation, b.transport, b.status
}

// charge adds n bytes and ev events; it returns the violation once a bound is
// passed.
func (b *budget) charge(n int64, ev int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.violation != nil {
		return b.violation
	}
	b.bytes += n
	b.events += ev
	switch {
	case b.bytes > b.maxBytes:
		b.violation = errTooLarge
	case b.events > b.maxEvents:
		b.violation = errTooManyEvents
	}
	return b.violation
}

func (b *budget) remaining() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxBytes - b.bytes
}

// Internal transport-level causes; classify maps them to exported categories.
var (
	errTooLarge      = errors.New("response too large")
	errTooManyEvents = errors.New("too many events")
	errRedirect      = errors.New("redirect refused")
	errMethod        = errors.New("request method refused")
	errTransport     = errors.New("transport failed")
)

// guard is the only http.RoundTripper between the SDK (or our stateless
// client) and the network. It fixes the credential, refuses redirects and
// anything but POST and DELETE, strips cookies, and charges every response
// body to the operation's budget. It never lets an error text from below
// (which may carry the URL) escape: callers see only the internal causes.
type guard struct {
	base       http.RoundTripper
	credential string
	// kill aborts every request of this guard (Close past its deadline).
	kill context.Context
	// fallback bounds requests that carry no budget (the session DELETE).
	fallbackBytes  int64
	fallbackEvents int
	// server names the upstream in log lines; log receives DELETE failures.
	server string
	log    *slog.Logger

	mu sync.Mutex
	// gone holds session ids the server said it does not know: ending such
	// a session sends nothing (the DELETE would only be refused again).
	gone map[string]bool
}

// sessionHeader carries the session id on every request of a session.
const sessionHeader = "Mcp-Session-Id"

// maxForgotten bounds the ids remembered for skipping their DELETE (the SDK
// itself skips it after a plain 404, so some entries are never consumed).
const maxForgotten = 8

// forget marks id as unknown to the server, so its DELETE is skipped.
func (g *guard) forget(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone == nil {
		g.gone = map[string]bool{}
	}
	if len(g.gone) >= maxForgotten {
		clear(g.gone) // worst case: a DELETE the server refuses
	}
	g.gone[id] = true
}

// forgotten reports (once) whether id was forgotten.
func (g *guard) forgotten(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gone[id] {
		delete(g.gone, id)
		return true
	}
	return false
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	b := budgetFrom(req.Context())
	if b == nil || req.Method == http.MethodDelete {
		// The session-ending DELETE must work even after the session's
		// initialization budget ran out; its body is discarded anyway.
		b = newBudget(g.fallbackBytes, g.fallbackEvents)
	}
	refuse := func(err error) (*http.Response, error) {
		// RoundTrip must close the request body on every path; once handed
		// to the base transport, that transport does.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	if err := b.failed(); err != nil {
		return refuse(err)
	}
	switch req.Method {
	case http.MethodPost:
	case http.MethodDelete:
		if g.forgotten(req.Header.Get(sessionHeader)) {
			// Answer locally what the server would: the session is gone.
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return &http.Response{
				Status: "404 Not Found", StatusCode: http.StatusNotFound,
				Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{}, Body: http.NoBody, Request: req,
			}, nil
		}
	default:
		// The SDK would GET for a standalone or resumed SSE stream; both are
		// disabled, so a GET here is a bug or a server trick: refuse it.
		return refuse(b.fail(errMethod))
	}

	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(g.kill, cancel)
	out := req.Clone(ctx) // shares the body, which the base transport closes
	out.Header.Del("Cookie")
	out.Header.Del("Authorization")
	out.Header.Del("Proxy-Authorization")
	out.Header.Set("User-Agent", userAgent)
	if g.credential != "" {
		out.Header.Set("Authorization", "Bearer "+g.credential)
	}
	resp, err := g.base.RoundTrip(out)
	if err != nil {
		stop()
		cancel()
		if req.Context().Err() == nil && g.kill.Err() == nil {
			b.noteTransport()
		}
		if req.Method == http.MethodDelete {
			g.deleteFailed(req.Context(), "")
		}
		return nil, errTransport
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// Never follow, never read: the redirect target must see nothing.
		_ = resp.Body.Close()
		stop()
		cancel()
		return nil, b.fail(errRedirect)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b.noteStatus(resp.StatusCode)
	}
	if resp.ContentLength > 0 && resp.ContentLength > b.remaining() {
		_ = resp.Body.Close()
		stop()
		cancel()
		return nil, b.fail(errTooLarge)
	}
	resp.Header.Del("Set-Cookie")
	resp.Body = &meteredBody{
		rc:     resp.Body,
		b:      b,
		sse:    baseMediaType(resp.Header.Get("Content-Type")) == "text/event-stream",
		finish: func() { stop(); cancel() },
	}
	if req.Header.Get(sessionHeader) != "" && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest) {
		unknown, body := sessionRefused(resp)
		resp.Body = body
		if unknown {
			b.noteUnknownSession()
			// Forget it now: the SDK may end the connection (and DELETE)
			// before the caller sees the error.
			g.forget(req.Header.Get(sessionHeader))
		}
		if unknown && req.Method == http.MethodDelete {
			return resp, nil // already ended: not a failure
		}
	}
	if req.Method == http.MethodDelete && (resp.StatusCode < 200 || resp.StatusCode > 299) &&
		resp.StatusCode != http.StatusMethodNotAllowed {
		// 405: the server does not let clients end sessions (spec-allowed).
		g.deleteFailed(req.Context(), fmt.Sprintf("HTTP status %d", resp.StatusCode))
	}
	return resp, nil
}

// maxRefusalBytes bounds what is read of an error answer to recognize a
// session refusal; real ones are about a hundred bytes.
const maxRefusalBytes = 4 << 10

// sessionRefused decides whether resp (to a request that carried a session
// id) says the server does not know that session, which also means the
// request was not run: the server refused it at the transport, before any
// JSON-RPC dispatch. Exactly two answers count:
//   - HTTP 404, whatever the body: the specification's answer to a request
//     with a terminated or unknown session id (Go SDK: plain text; the
//     TypeScript and Python SDKs' transports: a JSON-RPC error).
//   - HTTP 400 with an application/json body of at most maxRefusalBytes that
//     is a JSON-RPC error answer (no result) whose message mentions the
//     session: what servers that route by session id in front of the SDK
//     answer, among them the official reference server
//     (@modelcontextprotocol/server-everything: "Bad Request: No valid
//     session ID provided") and older Python SDK servers.
//
// Any other 400 (a malformed request, an unsupported protocol version)
// would fail the same way on a fresh session, so it does not count. The
// message is matched, never logged or returned. It returns the body to hand
// on, with whatever was read put back (and charged to the budget).
func sessionRefused(resp *http.Response) (bool, io.ReadCloser) {
	if resp.StatusCode == http.StatusNotFound {
		return true, resp.Body
	}
	if resp.StatusCode != http.StatusBadRequest || baseMediaType(resp.Header.Get("Content-Type")) != "application/json" {
		return false, resp.Body
	}
	peek, err := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBytes+1))
	body := &replayBody{Reader: io.MultiReader(bytes.NewReader(peek), resp.Body), c: resp.Body}
	if err != nil || len(peek) > maxRefusalBytes {
		return false, body
	}
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(peek, &m) != nil || m.JSONRPC != "2.0" || m.Result != nil || m.Error == nil {
		return false, body
	}
	return strings.Contains(strings.ToLower(m.Error.Message), "session"), body
}

// replayBody reads what was peeked, then the rest; Close closes the original.
type replayBody struct {
	io.Reader
	c io.Closer
}

func (r *replayBody) Close() error { return r.c.Close() }

// deleteFailed logs a session-ending DELETE that did not succeed: the server
// may keep the session (and what it holds) until its own expiry. Only the
// server's name and the reason's category are logged.
func (g *guard) deleteFailed(ctx context.Context, reason string) {
	switch {
	case reason != "":
	case g.kill.Err() != nil:
		reason = "aborted at the close deadline"
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		reason = "timed out"
	case ctx.Err() != nil:
		reason = "canceled"
	default:
		reason = "connection failed"
	}
	if g.log != nil {
		g.log.Warn("mcp session end (DELETE) failed; the server keeps the session until it expires it", "server", g.server, "reason", reason)
	}
}

// meteredBody charges what it reads to a budget and, for event streams,
// counts events (a blank line ending a non-empty block, comments included, so
// an endless stream of keep-alive comments is bounded too).
type meteredBody struct {
	rc     io.ReadCloser
	b      *budget
	sse    bool
	finish func()
	once   sync.Once

	// SSE line state across reads.
	lineLen  int  // bytes on the current line
	blockLen int  // non-empty lines in the current block
	cr       bool // last byte was '\r'
}

func (m *meteredBody) Read(p []byte) (int, error) {
	if err := m.b.failed(); err != nil {
		return 0, err
	}
	n, err := m.rc.Read(p)
	if n > 0 {
		ev := 0
		if m.sse {
			ev = m.count(p[:n])
		}
		if verr := m.b.charge(int64(n), ev); verr != nil {
			return 0, verr
		}
	}
	if err != nil && err != io.EOF {
		// A reset mid-body; classify ranks deadlines and cancellation first.
		m.b.noteTransport()
		return n, errTransport
	}
	return n, err
}

func (m *meteredBody) count(p []byte) int {
	ev := 0
	endLine := func() {
		if m.lineLen == 0 {
			if m.blockLen > 0 {
				ev++
			}
			m.blockLen = 0
		} else {
			m.blockLen++
		}
		m.lineLen = 0
	}
	for _, c := range p {
		switch c {
		case '\n':
			if m.cr {
				// "\r\n": the line already ended at '\r'.
				m.cr = false
				continue
			}
			endLine()
		case '\r':
			m.cr = true
			endLine()
			continue
		default:
			m.lineLen++
		}
		m.cr = false
	}
	return ev
}

func (m *meteredBody) Close() error {
	err := m.rc.Close()
	m.once.Do(m.finish)
	return err
}

// newBaseTransport is the network transport: no proxy from the environment,
// bounded header sizes and handshakes, HTTP/2 when offered.
func newBaseTransport(timeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    min(timeout, 10*time.Second),
		ResponseHeaderTimeout:  timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
		MaxIdleConns:           8,
		MaxConnsPerHost:        8,
		IdleConnTimeout:        30 * time.Second,
	}
}

// newHTTPClient wraps g in a client that never follows redirects and keeps no
// cookies. Its own Timeout stays zero: event streams legitimately outlive a
// fixed per-request timer, and every call carries its own deadline.
func newHTTPClient(g *guard) *http.Client {
	return &http.Client{
		Transport: g,
		Jar:       nil,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errRedirect
		},
	}
}

func baseMediaType(ct string) string {
	for i := 0; i < len(ct); i++ {
		if ct[i] == ';' {
			ct = ct[:i]
			break
		}
	}
	// Trim spaces and lower-case without pulling in mime parsing of
	// attacker-shaped parameters.
	start, end := 0, len(ct)
	for start < end && (ct[start] == ' ' || ct[start] == '\t') {
		start++
	}
	for end > start && (ct[end-1] == ' ' || ct[end-1] == '\t') {
		end--
	}
	out := []byte(ct[start:end])
	for i, c := range out {
		if c >= 'A' && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return string(out)
}
