// Package mcp is the broker's upstream MCP client: it performs one tools/call
// of an operator-declared tool on an operator-configured Streamable HTTP
// server, either through a proper MCP session (initialize, session id,
// protocol-version header, JSON or server-sent-event answers, DELETE at the
// end) or as one stateless JSON-RPC POST.
//
// Guarantee: whatever the upstream does, a caller gets back only a
// normalized CallToolResult object (content, structuredContent, isError),
// bounded in bytes, events and time, or an error from a fixed set of
// categories whose text never holds the URL, a header, the credential,
// a session id or upstream body text. Redirects are refused before the
// target is contacted, no cookie is kept, no proxy is taken from the
// environment, and the URL must pass policy.CheckURL. Server instructions,
// session ids, headers and _meta never leave this package.
package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// ProtocolVersion is the MCP revision this client declares in initialize.
// Servers may negotiate any revision the SDK supports down to 2024-11-05.
// The SDK's newer draft (stateless server/discover) is deliberately not
// requested: it would make the handshake depend on a probe most servers
// answer with an error.
const ProtocolVersion = "2025-11-25"

// Defaults applied by NewClient for zero Options fields.
const (
	DefaultMaxResponseBytes = 1 << 20
	DefaultTimeout          = 60 * time.Second
	DefaultMaxEvents        = 256
	maxHeaderBytes          = 64 << 10
	// closeTimeout bounds each session-ending DELETE when Close's context
	// has no earlier deadline.
	closeTimeout = 5 * time.Second
)

var userAgent = "roundtable-sandbox-broker/" + version.Version

// Error categories. Every error this package returns wraps exactly one of
// them (last, with %w) and carries no upstream-derived text.
var (
	// ErrInvalid: the call itself is malformed (tool name, arguments, mode).
	ErrInvalid = errors.New("mcp call refused")
	// ErrURL: the server URL does not pass policy.CheckURL.
	ErrURL = errors.New("mcp server URL refused")
	// ErrRedirect: the upstream answered with a redirect.
	ErrRedirect = errors.New("mcp upstream redirect refused")
	// ErrTooLarge: the upstream answer exceeded MaxResponseBytes.
	ErrTooLarge = errors.New("mcp upstream answer too large")
	// ErrTooManyEvents: the upstream event stream exceeded MaxEvents.
	ErrTooManyEvents = errors.New("mcp upstream sent too many events")
	// ErrTimeout: the call outlived Timeout.
	ErrTimeout = errors.New("mcp upstream timed out")
	// ErrCanceled: the caller's context ended or the client was closed.
	ErrCanceled = errors.New("mcp call canceled")
	// ErrUnavailable: the upstream could not be reached or answered with an
	// HTTP error status.
	ErrUnavailable = errors.New("mcp upstream unavailable")
	// ErrRPC: the upstream answered with a JSON-RPC error.
	ErrRPC = errors.New("mcp upstream returned an error")
	// ErrProtocol: the upstream answer is not a well-formed MCP answer.
	ErrProtocol = errors.New("mcp upstream answer malformed")
)

// Options bound every upstream exchange.
type Options struct {
	// MaxResponseBytes bounds all bytes received for one call, across every
	// HTTP response and SSE event of that call, after decompression; the
	// returned result is also at most this size. Default 1 MiB.
	MaxResponseBytes int64
	// Timeout bounds one call, including session initialization. Default 60 s.
	Timeout time.Duration
	// MaxEvents bounds the SSE events (keep-alive comments included) one call
	// may receive. Default 256.
	MaxEvents int
	// Transport replaces the network transport below the guard (tests only).
	// Redirect refusal, budgets and the credential still apply.
	Transport http.RoundTripper
	// Logger receives session lifecycle events (server name and error
	// category only, never payloads or credentials). Nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.Transport == nil {
		o.Transport = newBaseTransport(o.Timeout)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Client holds at most one upstream session per server for one turn. It is
// safe for concurrent use; calls to the same server are serialized.
type Client struct {
	opts Options
	log  *slog.Logger

	// life ends when Close starts: in-flight calls are canceled.
	life     context.Context
	endLife  context.CancelFunc
	kill     context.Context // ends when Close's own context ends
	killNow  context.CancelFunc
	mu       sync.Mutex
	closed   bool
	sessions map[string]*upstream
	bg       sync.WaitGroup // sessions being ended in the background
}

// upstream is the per-server state of one turn.
type upstream struct {
	mu        sync.Mutex
	server    policy.MCPServer
	cred      string
	stateless bool // auto mode found (or was told) no session is needed
	sess      *sdk.ClientSession
	http      *http.Client
}

// NewClient returns a client with opts' bounds (zero fields take defaults).
func NewClient(opts Options) *Client {
	c := &Client{opts: opts.withDefaults(), sessions: map[string]*upstream{}}
	c.log = c.opts.Logger
	c.life, c.endLife = context.WithCancel(context.Background())
	c.kill, c.killNow = context.WithCancel(context.Background())
	return c
}

func (c *Client) newGuard(server, cred string) *guard {
	return &guard{
		base:           c.opts.Transport,
		credential:     cred,
		kill:           c.kill,
		fallbackBytes:  c.opts.MaxResponseBytes,
		fallbackEvents: c.opts.MaxEvents,
		server:         server,
		log:            c.log,
	}
}

// CallTool performs one tools/call of tool on server s with args (a JSON
// object). credential is the bearer value or "" for none. It returns the
// CallToolResult JSON object, bounded by MaxResponseBytes.
func (c *Client) CallTool(ctx context.Context, s policy.MCPServer, credential, tool string, args json.RawMessage) (json.RawMessage, error) {
	if err := checkCall(s, credential, tool, args); err != nil {
		return nil, err
	}
	u, err := c.upstreamFor(s, credential)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	stop := context.AfterFunc(c.life, cancel)
	defer stop()

	u.mu.Lock()
	defer u.mu.Unlock()
	renewed := false
	for {
		if c.life.Err() != nil {
			// Close has begun: never start a session it would not end.
			return nil, fmt.Errorf("mcp: client closed: %w", ErrCanceled)
		}
		if u.stateless {
			return c.statelessCall(ctx, u, tool, args)
		}
		if u.sess == nil {
			sess, err := c.connect(ctx, u)
			if errors.Is(err, errFallback) {
				c.log.Info("mcp server answered initialize without a session; using stateless calls for this turn", "server", u.server.Name)
				u.stateless = true
				continue
			}
			if err != nil {
				return nil, err
			}
			if c.life.Err() != nil {
				c.endSession(sess)
				return nil, fmt.Errorf("mcp: client closed: %w", ErrCanceled)
			}
			u.sess = sess
		}
		res, gone, err := c.sessionCall(ctx, u, tool, args)
		if gone {
			if !renewed {
				// The server forgot the session (restart, expiry) and refused
				// the call for its session id, so the call did not run and
				// sending it again on a fresh session cannot run it twice.
				// One renewal per call: a server that forgets every session
				// at once gets no loop.
				renewed = true
				c.log.Info("mcp session unknown to the server (restart or expiry); renewing it", "server", u.server.Name)
				continue
			}
			c.log.Warn("mcp server refused a renewed session too; giving up on this call", "server", u.server.Name)
			return nil, err
		}
		return res, err
	}
}

func checkServer(s policy.MCPServer) error {
	if err := policy.CheckURL(s.URL, s.AllowHTTP); err != nil {
		return fmt.Errorf("mcp: %w", ErrURL)
	}
	switch s.Session {
	case "", policy.SessionAuto, policy.SessionStateless:
		return nil
	}
	return fmt.Errorf("mcp: unknown session mode: %w", ErrInvalid)
}

func checkCall(s policy.MCPServer, credential, tool string, args json.RawMessage) error {
	if err := checkServer(s); err != nil {
		return err
	}
	// The broker checks this too; repeated here so this client alone can
	// never call an undeclared tool.
	if !protocol.ValidMCPToolName(tool) || !slices.Contains(s.Tools, tool) {
		return fmt.Errorf("mcp: tool not declared: %w", ErrInvalid)
	}
	if !validBearer(credential) {
		return fmt.Errorf("mcp: credential not usable as a bearer token: %w", ErrInvalid)
	}
	t := bytes.TrimLeft(args, " \t\r\n")
	if len(t) == 0 || t[0] != '{' || !json.Valid(args) {
		return fmt.Errorf("mcp: arguments must be a JSON object: %w", ErrInvalid)
	}
	return nil
}

// validBearer refuses values that cannot travel in a header unchanged
// (control characters would split or be rejected by net/http).
func validBearer(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return strings.TrimSpace(v) == v
}

// upstreamFor returns the turn's state for s, replacing it when the server's
// address or the credential changed: a session never spans two principals.
func (c *Client) upstreamFor(s policy.MCPServer, cred string) (*upstream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("mcp: client closed: %w", ErrCanceled)
	}
	if u, ok := c.sessions[s.Name]; ok {
		if u.server.URL == s.URL && u.server.Session == s.Session && u.server.AllowHTTP == s.AllowHTTP && u.cred == cred {
			return u, nil
		}
		delete(c.sessions, s.Name)
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			c.closeUpstream(context.Background(), u)
		}()
	}
	u := &upstream{
		server:    s,
		cred:      cred,
		stateless: s.Session == policy.SessionStateless,
		http:      newHTTPClient(c.newGuard(s.Name, cred)),
	}
	c.sessions[s.Name] = u
	return u, nil
}

// Close cancels in-flight calls and ends every upstream session (an HTTP
// DELETE with the session id). When ctx ends first, remaining requests are
// aborted and ErrTimeout is returned. The client refuses calls afterwards.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	all := c.sessions
	c.sessions = map[string]*upstream{}
	c.mu.Unlock()

	c.endLife()
	stop := context.AfterFunc(ctx, c.killNow)
	defer stop()
	var wg sync.WaitGroup
	for _, u := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.closeUpstream(ctx, u)
		}()
	}
	wg.Wait()
	c.bg.Wait()
	c.killNow()
	if ctx.Err() != nil {
		return fmt.Errorf("mcp: closing sessions: %w", ErrTimeout)
	}
	return nil
}

func (c *Client) closeUpstream(ctx context.Context, u *upstream) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sess == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		// The SDK bounds its DELETE by 5 s; the guard's kill context
		// aborts it sooner when Close's context ends.
		_ = u.sess.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		<-done // kill has fired or will: the DELETE is being aborted
	}
	u.sess = nil
}

// classify turns a failure into one of the exported categories using what
// the guard recorded and the context, never the error's text.
func classify(ctx context.Context, b *budget, err error, what string) error {
	violation, transport, status := b.snapshot()
	switch {
	case errors.Is(violation, errTooLarge) || errors.Is(err, errTooLarge):
		return fmt.Errorf("mcp: %s: %w", what, ErrTooLarge)
	case errors.Is(violation, errTooManyEvents) || errors.Is(err, errTooManyEvents):
		return fmt.Errorf("mcp: %s: %w", what, ErrTooManyEvents)
	case errors.Is(violation, errRedirect) || errors.Is(err, errRedirect):
		return fmt.Errorf("mcp: %s: %w", what, ErrRedirect)
	case errors.Is(violation, errMethod):
		return fmt.Errorf("mcp: %s: unexpected request: %w", what, ErrProtocol)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("mcp: %s: %w", what, ErrTimeout)
	case ctx.Err() != nil:
		return fmt.Errorf("mcp: %s: %w", what, ErrCanceled)
	case transport || errors.Is(err, errTransport):
		return fmt.Errorf("mcp: %s: connection failed: %w", what, ErrUnavailable)
	case status != 0:
		return fmt.Errorf("mcp: %s: HTTP status %d: %w", what, status, ErrUnavailable)
	}
	var rpcErr *sdkRPCError
	if errors.As(err, &rpcErr) {
		return fmt.Errorf("mcp: %s: JSON-RPC error %d: %w", what, rpcErr.code, ErrRPC)
	}
	if code, ok := sdkRPCCode(err); ok {
		return fmt.Errorf("mcp: %s: JSON-RPC error %d: %w", what, code, ErrRPC)
	}
	return fmt.Errorf("mcp: %s: %w", what, ErrProtocol)
}

// sdkRPCError is a JSON-RPC error answer seen by the stateless path.
type sdkRPCError struct{ code int64 }

func (e *sdkRPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d", e.code) }
