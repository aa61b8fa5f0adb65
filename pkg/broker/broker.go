// Package broker is one turn's only exit from its sealed container: an HTTP
// handler and server on the turn's Unix socket that forwards a fixed model
// call with the real credential swapped in, runs allow-listed host tools and
// calls declared MCP tools, and refuses everything else. A rich channel's
// broker (policy.Rich) also serves pkg/broker/richroute's routes, lending
// them its budgets and credentials (rich.go); a sealed turn's has none.
//
// Guarantees (DESIGN.md section 5): only POST /model, /tools/<configured>
// and /mcp/<configured>; no query, encoding, extra segment, unknown header,
// hop-by-hop, proxy, forwarded or cookie header, and no caller credential but
// the dummy key; bodies are one bounded JSON object of valid Unicode text
// (never repaired); upstream requests are built from scratch with fixed URL,
// headers, model, stream:false and clamped max_tokens; answers are bounded JSON objects re-encoded from what was
// checked, with no upstream header, cookie or credential reflection; errors
// are generic; at most maxCalls calls, one in flight (the slot is taken
// before a body is read), a JSON token budget checked before decoding,
// MaxRefusals refused requests, maxConnections connections, and nothing
// after the turn deadline. No payload or credential
// is logged: log lines carry the turn, route, status, latency and a reason
// built from the broker's own words.
package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/chat"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/hosttool"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/richroute"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/rpc"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/egress"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// MCPUpstream is the upstream MCP client the broker calls (package mcp).
type MCPUpstream interface {
	// CallTool performs one tools/call of tool on server s with args (a JSON
	// object). credential is the bearer value or "" for none. It returns the
	// CallToolResult JSON object, already bounded in size.
	CallTool(ctx context.Context, s policy.MCPServer, credential, tool string, args json.RawMessage) (json.RawMessage, error)
	// Close ends every upstream session (called at turn end / shutdown).
	Close(ctx context.Context) error
}

// Credentials loads a named credential; credential.Dir implements it.
type Credentials interface {
	Load(name string) (credential.Secret, error)
}

// Config is everything a broker needs. Policy and Credentials are required.
type Config struct {
	Policy      *policy.Policy
	Credentials Credentials
	// MCP may be nil: every MCP call is then refused (fails closed).
	MCP    MCPUpstream
	Logger *slog.Logger
	// Now replaces time.Now in tests.
	Now func() time.Time
	// Fetcher replaces the fetch tools' fetcher: a trusted test seam (its
	// resolver and dialer), never set from configuration. nil means a
	// fetcher whose dialer allows exactly the policy's egressAllow.
	Fetcher *safefetch.Fetcher
	// LocalAddrs is this box's own addresses, which the fetcher's dialer
	// (fetch tools, attachments, the proxy route) refuses. nil means the
	// process's rtnetlink watch (safefetch.SystemLocalAddrs); a fake in
	// tests. Unused when Fetcher is set.
	LocalAddrs safefetch.LocalAddrs
	// ControlUID is the only peer uid a rich channel or session broker's control
	// route accepts: the host's (Run: the owner of the policy file).
	ControlUID int
	// PollWait replaces PollWait (tests).
	PollWait time.Duration
	// AnthropicSilence replaces AnthropicSilence (tests).
	AnthropicSilence time.Duration
}

// Broker serves one turn.
type Broker struct {
	pol      *policy.Policy
	creds    Credentials
	mcp      MCPUpstream
	log      *slog.Logger
	now      func() time.Time
	model    *http.Client
	tools    *http.Client
	fetcher  *safefetch.Fetcher
	identity hosttool.Identity
	// egress is the proxy route when the policy grants it, else nil.
	egress *egress.Proxy
	// runEnv is the run's placeholders and CA certificate (intercept.go), else nil.
	runEnv *runEnv
	// rich is a rich channel broker's own routes (pkg/broker/richroute:
	// pull, control, model, compactor, attachments), else nil.
	rich *richroute.Routes
	// grants is a session broker's per-exec grant (grant.go), else nil.
	grants *grantState

	mu       sync.Mutex
	calls    int
	inFlight atomic.Bool
	refusals atomic.Int64   // 4xx answers of this turn (MaxRefusals)
	unread   atomic.Int64   // requests answered unread after MaxRefusals (logged once, at the end)
	active   sync.WaitGroup // handlers running, awaited at shutdown
	// stopping is set when Serve starts awaiting active (under stopMu): a
	// request a connection read just before the server closed must not
	// start a handler then (it would run unawaited, after Serve returned,
	// and its Add would race the Wait).
	stopMu   sync.Mutex
	stopping bool
}

// enter counts a handler in active, or answers false once Serve is
// stopping.
func (b *Broker) enter() bool {
	b.stopMu.Lock()
	defer b.stopMu.Unlock()
	if b.stopping {
		return false
	}
	b.active.Add(1)
	return true
}

// LogValue shows the turn only: never identity text, URLs or credentials.
func (b *Broker) LogValue() slog.Value { return slog.GroupValue(slog.String("turn", b.pol.TurnID)) }

// New checks cfg and returns a broker.
func New(cfg Config) (*Broker, error) {
	if cfg.Policy == nil || cfg.Credentials == nil {
		return nil, errors.New("broker: policy and credentials are required")
	}
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	fetcher := cfg.Fetcher
	if fetcher == nil {
		allow, err := safefetch.ParseAllow(cfg.Policy.EgressAllow)
		if err != nil {
			return nil, fmt.Errorf("broker: policy egressAllow: %w", err)
		}
		fetcher = &safefetch.Fetcher{Dialer: &safefetch.Dialer{Allow: allow, Local: cfg.LocalAddrs},
			UserAgent: "roundtable-sandbox-broker/" + version.Version}
	}
	l := cfg.Policy.Limits
	upstreamTimeout := time.Duration(l.UpstreamTimeoutMs) * time.Millisecond
	// The same vetted dialer as the fetch tools: one way out.
	dialer := fetcher.Dialer
	if dialer == nil {
		dialer = &safefetch.Dialer{Local: cfg.LocalAddrs}
	}
	var proxy *egress.Proxy
	var re *runEnv
	if g := cfg.Policy.Egress; g != nil {
		var err error
		proxy, err = newEgressProxy(dialer, *g, cfg.Policy.Deadline(), log.With("turn", cfg.Policy.TurnID, "route", "egress"))
		if err != nil {
			return nil, fmt.Errorf("broker: policy egress: %w", err)
		}
		if proxy, re, err = withInterception(proxy, g, cfg.Credentials, now(), cfg.Policy.Deadline()); err != nil {
			return nil, fmt.Errorf("broker: policy egress: %w", err)
		}
	}
	b := &Broker{
		egress:   proxy,
		runEnv:   re,
		pol:      cfg.Policy,
		creds:    cfg.Credentials,
		mcp:      cfg.MCP,
		log:      log.With("turn", cfg.Policy.TurnID),
		now:      now,
		model:    envelope.NewUpstreamClient(upstreamTimeout),
		tools:    envelope.NewUpstreamClient(upstreamTimeout),
		fetcher:  fetcher,
		identity: hosttool.Identity{TurnID: cfg.Policy.TurnID, Identity: cfg.Policy.Identity},
	}
	if cfg.Policy.Grants != nil {
		b.grants = newGrantState(cfg.Policy, cfg.ControlUID, cfg.Credentials, dialer, b.log, now)
	}
	if cfg.Policy.Rich != nil {
		b.rich = richroute.New(richroute.Config{Policy: cfg.Policy, Credentials: cfg.Credentials, Logger: b.log, Now: now,
			Fetcher: fetcher, ControlUID: cfg.ControlUID, MaxLogged: MaxRefusals, PollWait: cfg.PollWait,
			Silence: cfg.AnthropicSilence}, richHost{b})
	}
	return b, nil
}

// ServeHTTP handles one guest call and logs one line about it.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !b.enter() {
		// The broker is stopping: nothing of the request runs.
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"unavailable"}`)
		return
	}
	defer b.active.Done()
	// Only a granted turn has the proxy route, and only CONNECT and
	// absolute-form requests reach it; without a grant they meet the strict
	// route checks below like any other request, and are refused.
	if b.egress != nil && egress.IsProxyRequest(r) {
		b.egress.ServeHTTP(w, r)
		return
	}
	// A session broker's proxy route runs under the exec's live grant
	// only, and its host binds and revokes grants (grant.go).
	if b.grants != nil {
		if egress.IsProxyRequest(r) {
			b.grants.serveProxy(w, r)
			return
		}
		if b.grants.serveControl(w, r) {
			return
		}
	}
	if b.serveRunEnv(w, r) {
		return
	}
	// A rich channel broker's own routes: pull, control, compactor,
	// attachments, the model route (pkg/broker/richroute).
	if b.rich != nil && b.rich.Serve(w, r) {
		return
	}
	start := time.Now()
	var (
		rt     route
		answer []byte
		err    error
	)
	if b.pol.EgressOnly || b.pol.Grants != nil {
		// A code run's broker, or a session's: the proxy route is all
		// there is. Past the refusal budget the refusals are counted, not
		// logged (a session's broker lives for hours).
		err = refused("unknown route", envelope.ErrNotFound)
		if b.refusals.Load() >= MaxRefusals {
			err = refused("refusal budget spent", envelope.ErrRefusalLimit)
		}
	} else {
		rt, answer, err = b.handle(r)
	}
	code := http.StatusOK
	if err != nil {
		var public string
		code, public = status(err)
		if code >= 400 && code < 500 && !errors.Is(err, envelope.ErrRefusalLimit) && !errors.Is(err, envelope.ErrClientGone) {
			b.refusal()
		}
		answer, _ = json.Marshal(map[string]string{"error": public})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if err != nil {
		// A refused request may leave body bytes unread: do not reuse the connection.
		h.Set("Connection", "close")
	}
	w.WriteHeader(code)
	_, _ = w.Write(answer)
	attrs := []any{"route", rt.label(), "status", code, "latency_ms", time.Since(start).Milliseconds()}
	switch {
	case errors.Is(err, envelope.ErrRefusalLimit):
		// No line per request: a guest past its budget could otherwise
		// loop cheap requests into the journal (journald's work is not the
		// broker's to spend). Serve logs the count once.
		b.unread.Add(1)
		return
	case errors.Is(err, envelope.ErrClientGone):
		b.log.Warn("call abandoned by the client", append(attrs, "reason", err.Error())...)
		return
	case err != nil:
		b.log.Warn("call refused", append(attrs, "reason", err.Error())...)
		return
	}
	b.log.Info("call", attrs...)
}

// MaxRefusals is a turn's budget of refused requests (4xx: malformed,
// unknown, unauthorized, too large, concurrent, over the call limit). The
// worker builds every request itself and calls one at a time, so it never
// comes close; a guest that spends the budget is not the worker, and the
// broker answers every later request of the turn before reading its body.
const MaxRefusals = 16

// MaxRequestTokens is the JSON token budget of a request body of at most
// maxBytes: one token per 4 bytes (65,536 for the default 256 KiB). The
// worker's densest requests (tool schemas, short tool-call messages) stay
// under one token per 4 bytes; a token-dense body ("[],[],...") has 2 in 3.
func MaxRequestTokens(maxBytes int64) int { return int(max(maxBytes/4, 1024)) }

func (b *Broker) callsLeft() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pol.Limits.MaxCalls - b.calls
}

// refusal counts one refused request; the one that spends the budget logs it.
func (b *Broker) refusal() {
	if b.refusals.Add(1) == MaxRefusals {
		b.log.Warn("refusal budget spent: every further request of this turn is refused unread (counted, logged once at the end)", "refusals", MaxRefusals)
	}
}

func (b *Broker) handle(r *http.Request) (route, []byte, error) {
	if b.refusals.Load() >= MaxRefusals {
		return route{}, nil, refused("refusal budget spent", envelope.ErrRefusalLimit)
	}
	if !b.now().Before(b.pol.Deadline()) {
		return route{}, nil, refused("turn deadline passed", envelope.ErrTurnOver)
	}
	if r.Method != http.MethodPost {
		return route{}, nil, refused("method not allowed", envelope.ErrMethod)
	}
	rt, err := b.parseRoute(r)
	if err != nil {
		return rt, nil, err
	}
	if err := envelope.CheckHeaders(r); err != nil {
		return rt, nil, err
	}
	if b.rich != nil {
		// Tools and MCP tools/call bear credentials: a bound turn only.
		if err := b.rich.Allow(false); err != nil {
			return rt, nil, err
		}
	}
	max := b.pol.Limits.MaxRequestBytes
	if r.ContentLength > max {
		return rt, nil, refused("body over the limit", envelope.ErrTooLarge)
	}
	// Cheap refusals before the body is read or decoded: the call budget,
	// then the one in-flight slot, held from here to the end of the call, so
	// at most one body of a turn is ever being decoded.
	if b.callsLeft() <= 0 {
		return rt, nil, refused("call limit reached", envelope.ErrCallLimit)
	}
	if !b.inFlight.CompareAndSwap(false, true) {
		return rt, nil, refused("another call is in flight", envelope.ErrBusy)
	}
	defer b.inFlight.Store(false)
	// checkHeaders requires Content-Length, checked against max above: one
	// allocation of exactly that size, and a body longer than it declared is
	// never read (the server answers and closes).
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return rt, nil, refused("body unreadable", envelope.ErrRefused)
	}
	if err := strictjson.CountTokens(body, MaxRequestTokens(max)); err != nil {
		return rt, nil, err
	}

	// Validate fully before the call counts.
	var call func(ctx context.Context) ([]byte, []credential.Secret, error)
	switch rt.kind {
	case routeModel:
		up, err := chat.Build(body, chat.Policy{Model: b.pol.Model.Name, MaxTokens: b.pol.Model.MaxTokens})
		if err != nil {
			return rt, nil, err
		}
		call = func(ctx context.Context) ([]byte, []credential.Secret, error) { return b.callModel(ctx, up) }
	case routeTool:
		input, err := strictjson.DecodeObject(body)
		if err != nil {
			return rt, nil, err
		}
		in, _ := encode(input)
		t, _ := b.pol.Tool(rt.name)
		call = func(ctx context.Context) ([]byte, []credential.Secret, error) { return b.callTool(ctx, t, in) }
	case routeMCP:
		s, _ := b.pol.Server(rt.name)
		c, err := rpc.Parse(body, s.Tools)
		if err != nil {
			return rt, nil, err
		}
		call = func(ctx context.Context) ([]byte, []credential.Secret, error) { return b.callMCP(ctx, s, c) }
	}

	b.mu.Lock()
	if b.calls >= b.pol.Limits.MaxCalls {
		b.mu.Unlock()
		return rt, nil, refused("call limit reached", envelope.ErrCallLimit)
	}
	b.calls++
	b.mu.Unlock()

	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(b.pol.Limits.RequestTimeoutMs)*time.Millisecond)
	defer cancel()
	ctx, cancelTurn := context.WithDeadline(ctx, b.pol.Deadline())
	defer cancelTurn()
	ctx, cancelRevoked := b.richCallContext(ctx) // a rich turn's calls end at revoke
	defer cancelRevoked()
	answer, secrets, err := call(ctx)
	if err != nil {
		return rt, nil, b.interrupted(r, err)
	}
	out, err := b.checkAnswer(answer, secrets)
	return rt, out, err
}

// checkAnswer decodes an answer (exactly one JSON object), refuses it when it
// reflects a credential, and re-encodes what was checked within the size bound.
func (b *Broker) checkAnswer(answer []byte, secrets []credential.Secret) ([]byte, error) {
	max := b.pol.Limits.MaxResponseBytes
	if int64(len(answer)) > max {
		return nil, refused("answer over the limit", envelope.ErrUpstream)
	}
	v, err := strictjson.DecodeObject(answer)
	if err != nil {
		return nil, refused("answer is not one JSON object", envelope.ErrUpstream)
	}
	if credential.Reflected(v, b.allSecrets(secrets)...) {
		return nil, refused("answer reflects a credential", envelope.ErrUpstream)
	}
	out, err := encode(v)
	if err != nil || int64(len(out)) > max {
		return nil, refused("answer over the limit", envelope.ErrUpstream)
	}
	return out, nil
}

// allSecrets adds every other credential the policy names (read now, errors
// ignored) to the call's own, so no answer echoes any of them.
func (b *Broker) allSecrets(call []credential.Secret) []credential.Secret {
	names := []string{b.pol.Model.Credential}
	for _, t := range b.pol.Tools {
		names = append(names, t.Credential)
	}
	for _, s := range b.pol.MCP {
		names = append(names, s.Credential)
	}
	seen := map[string]bool{"": true}
	out := append([]credential.Secret(nil), call...)
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if s, err := b.creds.Load(n); err == nil {
			out = append(out, s)
		}
	}
	return out
}

func (b *Broker) loadCredential(name string) (credential.Secret, error) {
	s, err := b.creds.Load(name)
	if err != nil {
		return credential.Secret{}, err // wraps credential.ErrMissing / ErrInvalid
	}
	if s.Empty() {
		return credential.Secret{}, fmt.Errorf("broker: credential %s empty: %w", name, credential.ErrMissing)
	}
	return s, nil
}

// callModel sends the rebuilt body to the fixed model URL with the real
// credential, read now so rotation works.
func (b *Broker) callModel(ctx context.Context, body []byte) ([]byte, []credential.Secret, error) {
	secret, err := b.loadCredential(b.pol.Model.Credential)
	if err != nil {
		return nil, nil, err
	}
	data, err := post(ctx, b.model, b.pol.Model.URL, body, secret, nil, b.pol.Limits.MaxResponseBytes)
	return data, []credential.Secret{secret}, err
}

// post is the one upstream POST: a request built from scratch, fixed headers,
// the bearer inserted last, a 2xx bounded body, and no upstream header or
// error text kept.
func post(ctx context.Context, c *http.Client, url string, body []byte, bearer credential.Secret, extra func(http.Header), max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, refused("upstream request not built", envelope.ErrUpstream)
	}
	req.Header = http.Header{}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "roundtable-sandbox-broker/"+version.Version)
	if extra != nil {
		extra(req.Header)
	}
	if !bearer.Empty() {
		req.Header.Set("Authorization", "Bearer "+bearer.Reveal())
	}
	resp, err := c.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, envelope.ErrRedirect):
			return nil, refused("upstream redirect refused", envelope.ErrUpstream)
		case ctx.Err() != nil || envelope.IsTimeout(err):
			return nil, refused("upstream deadline", envelope.ErrUpstreamTime)
		}
		return nil, refused("upstream unreachable", envelope.ErrUpstream)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("broker: upstream status %d: %w", resp.StatusCode, envelope.ErrUpstream)
	}
	if resp.ContentLength > max {
		return nil, refused("upstream answer over the limit", envelope.ErrUpstream)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		if ctx.Err() != nil || envelope.IsTimeout(err) {
			return nil, refused("upstream deadline", envelope.ErrUpstreamTime)
		}
		return nil, refused("upstream answer unreadable", envelope.ErrUpstream)
	}
	if int64(len(data)) > max {
		return nil, refused("upstream answer over the limit", envelope.ErrUpstream)
	}
	return data, nil
}

// callTool runs one host tool with the policy's identity.
func (b *Broker) callTool(ctx context.Context, t policy.Tool, input []byte) ([]byte, []credential.Secret, error) {
	if t.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	var result json.RawMessage
	var privateTo string
	var secrets []credential.Secret
	switch t.Kind {
	case policy.KindBuiltin:
		result, _ = json.Marshal(hosttool.Clock(b.now()))
	case policy.KindExec:
		out, err := hosttool.Exec(ctx, t.Argv, b.callIdentity().Env(), input, hosttool.MaxOutputBytes)
		if err != nil {
			return nil, nil, err
		}
		if result, privateTo, err = b.toolResult(out); err != nil {
			return nil, nil, err
		}
	case policy.KindHTTP:
		var bearer string
		if t.Credential != "" {
			s, err := b.loadCredential(t.Credential)
			if err != nil {
				return nil, nil, err
			}
			secrets = append(secrets, s)
			bearer = s.Reveal()
		}
		out, err := hosttool.HTTP(ctx, b.tools, t.URL, b.callIdentity(), bearer, input, b.pol.Limits.MaxResponseBytes)
		if err != nil {
			return nil, nil, err
		}
		if result, privateTo, err = b.toolResult(out); err != nil {
			return nil, nil, err
		}
	case policy.KindFetch:
		text, err := b.fetch(ctx, t, input)
		if err != nil {
			return nil, nil, err
		}
		if result, err = encode(text); err != nil {
			return nil, nil, refused("tool result not encodable", envelope.ErrToolFailed)
		}
	default:
		return nil, nil, refused("unknown tool kind", envelope.ErrToolFailed)
	}
	members := map[string]json.RawMessage{"result": result}
	if privateTo != "" {
		if err := b.rich.AdmitPrivate(); err != nil {
			return nil, nil, err
		}
		members["privateTo"], _ = json.Marshal(privateTo)
	}
	answer, err := json.Marshal(members)
	if err != nil {
		return nil, nil, refused("tool result not encodable", envelope.ErrToolFailed)
	}
	return answer, secrets, nil
}

// fetch runs one fetch tool call and logs its host and status (never the
// URL's path or query, never a body).
func (b *Broker) fetch(ctx context.Context, t policy.Tool, input []byte) (string, error) {
	bounds := hosttool.FetchBounds{Timeout: safefetch.DefaultTimeout, MaxBytes: policy.DefaultFetchBytes, MaxTextBytes: policy.DefaultFetchTextBytes}
	if t.TimeoutMs > 0 {
		bounds.Timeout = time.Duration(t.TimeoutMs) * time.Millisecond
	}
	if t.MaxBytes > 0 {
		bounds.MaxBytes = t.MaxBytes
	}
	if t.MaxTextBytes > 0 {
		bounds.MaxTextBytes = t.MaxTextBytes
	}
	text, lg, err := hosttool.Fetch(ctx, b.fetcher, input, bounds)
	attrs := []any{"tool", t.Name, "host", lg.Host, "status", lg.Status}
	if err != nil {
		b.log.Warn("fetch refused", append(attrs, "reason", lg.Reason)...)
		return "", err
	}
	b.log.Info("fetch", append(attrs, "text_bytes", len(text))...)
	return text, nil
}

// callMCP performs one declared tools/call through the MCP upstream.
func (b *Broker) callMCP(ctx context.Context, s policy.MCPServer, c *rpc.Call) ([]byte, []credential.Secret, error) {
	if b.mcp == nil {
		return nil, nil, refused("no MCP client in this build", envelope.ErrUnavailable)
	}
	var secrets []credential.Secret
	var bearer string
	if s.Credential != "" {
		sec, err := b.loadCredential(s.Credential)
		if err != nil {
			return nil, nil, err
		}
		secrets = append(secrets, sec)
		bearer = sec.Reveal()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(b.pol.Limits.UpstreamTimeoutMs)*time.Millisecond)
	defer cancel()
	result, err := b.mcp.CallTool(ctx, s, bearer, c.Tool, c.Arguments)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, refused("mcp deadline", envelope.ErrUpstreamTime)
		}
		return nil, nil, fmt.Errorf("broker: mcp call failed: %w", envelope.ErrUpstream)
	}
	if int64(len(result)) > b.pol.Limits.MaxResponseBytes {
		return nil, nil, refused("mcp result over the limit", envelope.ErrUpstream)
	}
	if t := bytes.TrimLeft(result, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, nil, refused("mcp result is not an object", envelope.ErrUpstream)
	}
	answer, err := json.Marshal(map[string]json.RawMessage{
		"jsonrpc": json.RawMessage(`"2.0"`), "id": c.ID, "result": result,
	})
	if err != nil {
		return nil, nil, refused("mcp result not encodable", envelope.ErrUpstream)
	}
	return answer, secrets, nil
}

// newEgressProxy is the proxy route for an egress grant (a run's or turn's
// for its life, a session exec's for its grant) over the vetted dialer d,
// its credentialed destinations known to it (intercepted, never plain).
func newEgressProxy(d *safefetch.Dialer, g policy.Egress, deadline time.Time, log *slog.Logger) (*egress.Proxy, error) {
	return egress.New(d, g, deadline, log).WithCredentials()
}

// encode re-encodes a checked value without HTML escaping.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
