package mcp

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
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
	case http.MethodPost, http.MethodDelete:
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
	return resp, nil
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
