package richroute

// The rich channel's model route (DESIGN.md section 13): POST
// /anthropic/v1/messages and /anthropic/v1/messages/count_tokens, each
// optionally with the exact query "?beta=true", and nothing else of the
// provider's API. Only a rich policy has it, and only inside a bound turn.
// The request is rebuilt by pkg/anthropic (Rebuild) with the profile's
// model and output limit and the bound turn's thinking ceiling; the
// headers are built from scratch with the real credential as the provider
// expects it (x-api-key, or a bearer for OAuth); a streamed answer passes
// through anthropic.FilterStream event by event with backpressure. Four
// calls may be in flight (a fifth is refused: 429); the turn's call budget
// is policy.Rich.MaxCalls. Silence (no request-body read, no upstream
// chunk, no write taken by the worker) for AnthropicSilence ends a call;
// the bound turn's deadline and its revocation end everything. Errors
// have the provider's shape ({"type":"error","error":{type, message}})
// with the broker's own generic message, never the upstream's.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// Routes of the model route (RequestURI, byte for byte).
const (
	RouteAnthropicMessages = "/anthropic/v1/messages"
	RouteAnthropicCount    = "/anthropic/v1/messages/count_tokens"
	anthropicBetaQuery     = "?beta=true"
)

// AnthropicSlots is the seed's four in-flight credential-bearing model calls.
const AnthropicSlots = 4

// AnthropicSilence is the seed's silence limit.
const AnthropicSilence = anthropic.DefaultSilence

// AnthropicBetas are the anthropic-beta values a worker may ask for; any
// other is refused. They change streaming and thinking shapes only (the
// filter knows both), never tools, media or account features.
var AnthropicBetas = map[string]bool{
	"interleaved-thinking-2025-05-14":        true,
	"fine-grained-tool-streaming-2025-05-14": true,
}

// OAuthBeta is the beta the provider requires with an OAuth bearer.
const OAuthBeta = "oauth-2025-04-20"

// anthropicHeaders may appear at most once each on the model route.
var anthropicHeaders = map[string]bool{
	"Authorization": true, "X-Api-Key": true, "Content-Type": true, "Content-Length": true,
	"Accept": true, "Accept-Encoding": true, "User-Agent": true, "Anthropic-Version": true, "Anthropic-Beta": true,
}

// anthropicState is the model route's state on a rich broker.
type anthropicState struct {
	slots   atomic.Int32
	silence time.Duration
	client  *http.Client

	mu         sync.Mutex
	matched    *credential.Matcher // the last calls' secrets, prepared
	matchedFor []string
}

func newAnthropicState(silence time.Duration) *anthropicState {
	if silence <= 0 {
		silence = AnthropicSilence
	}
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  silence,
		MaxResponseHeaderBytes: 64 << 10,
		DisableCompression:     true,
		MaxIdleConns:           AnthropicSlots,
		IdleConnTimeout:        30 * time.Second,
	}
	// No client Timeout: a stream is bounded by silence and the turn's
	// deadline, not by a total time.
	return &anthropicState{silence: silence, client: &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return envelope.ErrRedirect },
	}}
}

// upstreamStatus is an upstream's non-2xx status, answered generically.
type upstreamStatus struct{ code int }

func (u *upstreamStatus) Error() string { return "broker: upstream answered an error status" }
func (u *upstreamStatus) Unwrap() error { return envelope.ErrUpstream }

// anthropicAnswer maps an error to the status, error type and message the
// worker sees.
func (b *Routes) anthropicAnswer(err error) (int, string, string) {
	var us *upstreamStatus
	switch {
	case errors.As(err, &us):
		switch {
		case us.code == http.StatusBadRequest:
			return 400, "invalid_request_error", "upstream refused the request"
		case us.code == http.StatusRequestEntityTooLarge:
			return 413, "request_too_large", "request too large"
		case us.code == http.StatusTooManyRequests:
			return 429, "rate_limit_error", "upstream rate limited"
		case us.code == 529 || us.code == http.StatusServiceUnavailable:
			return 529, "overloaded_error", "upstream overloaded"
		case us.code == http.StatusGatewayTimeout:
			return 504, "timeout_error", "upstream timed out"
		}
		return 502, "api_error", "upstream failed"
	case errors.Is(err, anthropic.ErrInvalid):
		return 400, "invalid_request_error", "request refused"
	case errors.Is(err, anthropic.ErrTooLarge):
		return 413, "request_too_large", "request too large"
	case errors.Is(err, anthropic.ErrSilence):
		return 504, "timeout_error", "upstream timed out"
	case errors.Is(err, anthropic.ErrReflected), errors.Is(err, anthropic.ErrStream), errors.Is(err, anthropic.ErrUpstreamError):
		return 502, "api_error", "upstream failed"
	}
	code, public := b.host.Status(err)
	typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
		405: "invalid_request_error", 411: "invalid_request_error", 413: "request_too_large", 415: "invalid_request_error",
		429: "rate_limit_error", 504: "timeout_error"}[code]
	if typ == "" {
		typ = "api_error"
	}
	return code, typ, public
}

// anthropicCall is one call as logged.
type anthropicCall struct {
	route           string
	stream          bool
	bytesIn         int64
	bytesOut        int64
	upstreamBytes   int64
	events          int
	streamedStarted bool   // the 200 and some events went out: the error is in the stream
	upstreamStatus  int    // the upstream's HTTP status, 0 before an answer
	requestID       string // the upstream's request-id header, when well-formed (for the provider's support)
}

// serveAnthropic answers /anthropic/...; false for any other request.
func (b *Routes) serveAnthropic(w http.ResponseWriter, r *http.Request) bool {
	if !strings.HasPrefix(r.RequestURI, "/anthropic/") && r.RequestURI != "/anthropic" {
		return false
	}
	start := time.Now()
	c := &anthropicCall{route: "/anthropic"}
	err := b.anthropicCall(w, r, c)
	code := http.StatusOK
	if err != nil && !c.streamedStarted {
		var typ, msg string
		code, typ, msg = b.anthropicAnswer(err)
		var us *upstreamStatus
		if code >= 400 && code < 500 && !errors.Is(err, envelope.ErrRefusalLimit) && !errors.Is(err, envelope.ErrClientGone) && !errors.As(err, &us) {
			b.host.Refusal() // the guest's refusals, not the upstream's
		}
		body, _ := anthropic.Encode(anthropic.ErrorBody{Type: "error", Error: anthropic.APIError{Type: typ, Message: msg}})
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Connection", "close")
		w.WriteHeader(code)
		n, _ := w.Write(body)
		c.bytesOut = int64(n)
	} else if err != nil {
		code, _, _ = b.anthropicAnswer(err)
	}
	attrs := []any{"route", c.route, "status", code, "latency_ms", time.Since(start).Milliseconds(),
		"stream", c.stream, "bytes_in", c.bytesIn, "bytes_out", c.bytesOut, "upstream_bytes", c.upstreamBytes, "events", c.events}
	if c.upstreamStatus != 0 {
		attrs = append(attrs, "upstream_status", c.upstreamStatus)
	}
	if c.requestID != "" {
		attrs = append(attrs, "upstream_request_id", c.requestID)
	}
	switch {
	case errors.Is(err, envelope.ErrRefusalLimit):
		b.host.Unread()
	case err != nil:
		b.log.Warn("model call failed", append(attrs, "reason", err.Error())...)
	default:
		b.log.Info("model call", attrs...)
	}
	return true
}

// anthropicCall runs one model call; an error before the answer started
// is answered by serveAnthropic, one after it ended the stream already.
func (b *Routes) anthropicCall(w http.ResponseWriter, r *http.Request, c *anthropicCall) error {
	if b.host.RefusalsSpent() {
		return refused("refusal budget spent", envelope.ErrRefusalLimit)
	}
	if !b.now().Before(b.pol.Deadline()) {
		return refused("session over", envelope.ErrTurnOver)
	}
	if r.Method != http.MethodPost {
		return refused("method not allowed", envelope.ErrMethod)
	}
	count := false
	switch r.RequestURI {
	case RouteAnthropicMessages, RouteAnthropicMessages + anthropicBetaQuery:
		c.route = RouteAnthropicMessages
	case RouteAnthropicCount, RouteAnthropicCount + anthropicBetaQuery:
		c.route, count = RouteAnthropicCount, true
	default:
		return refused("unknown route", envelope.ErrNotFound)
	}
	beta := strings.HasSuffix(r.RequestURI, anthropicBetaQuery)
	if r.URL == nil || r.URL.RawPath != "" || r.URL.Path != c.route || (beta && r.URL.RawQuery != "beta=true") || (!beta && (r.URL.RawQuery != "" || r.URL.ForceQuery)) {
		return refused("request target does not match its parsed form", envelope.ErrRefused)
	}
	betas, err := checkAnthropicHeaders(r)
	if err != nil {
		return err
	}
	if err := b.Allow(false); err != nil {
		return err
	}
	bd, ok := b.Bound()
	if !ok {
		return refused("model call outside a bound turn", envelope.ErrUnauthorized)
	}
	if r.ContentLength > anthropic.MaxRequestBytes {
		return refused("body over the limit", envelope.ErrTooLarge)
	}
	if b.host.CallsLeft(b.pol.Rich.MaxCalls) <= 0 {
		return refused("call limit reached", envelope.ErrCallLimit)
	}
	st := b.anth
	if st.slots.Add(1) > AnthropicSlots {
		st.slots.Add(-1)
		return refused("four model calls in flight", envelope.ErrBusy)
	}
	defer st.slots.Add(-1)

	rc := http.NewResponseController(w)
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(&silentReader{r: r.Body, rc: rc, silence: st.silence}, body); err != nil {
		return refused("body unreadable or silent", envelope.ErrRefused)
	}
	// The body is read: no read deadline from here (net/http's background
	// read would cancel the call at it); silence is now the upstream's and
	// the writes', and the turn's deadline bounds the rest.
	_ = rc.SetReadDeadline(time.Time{})
	c.bytesIn = int64(len(body))
	rich := b.pol.Rich
	lim := anthropic.Limits{Model: rich.Model, MaxOutputTokens: rich.MaxOutputTokens, Thinking: bd.Bind.Turn.Thinking}
	var up []byte
	if count {
		up, err = anthropic.RebuildCountTokens(body, lim)
	} else {
		var rb anthropic.Rebuilt
		rb, err = anthropic.Rebuild(body, lim)
		up, c.stream = rb.Body, rb.Stream
	}
	if err != nil {
		return err
	}
	body = nil
	if !b.host.TakeCall(rich.MaxCalls) {
		return refused("call limit reached", envelope.ErrCallLimit)
	}

	ctx, cancel := context.WithDeadline(r.Context(), b.pol.Deadline())
	defer cancel()
	ctx, cancelTurn := context.WithDeadline(ctx, time.UnixMilli(bd.Bind.Turn.DeadlineUnixMs))
	defer cancelTurn()
	ctx, cancelRevoked := b.CallContext(ctx)
	defer cancelRevoked()

	secret, err := b.host.LoadCredential(rich.Credential)
	if err != nil {
		return err
	}
	secrets := b.host.Secrets([]credential.Secret{secret, b.richCompactorSecret()})
	url := strings.TrimSuffix(rich.URL, "/") + strings.TrimPrefix(r.RequestURI, "/anthropic")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(up))
	if err != nil {
		return refused("upstream request not built", envelope.ErrUpstream)
	}
	req.Header = http.Header{}
	req.Header.Set("Content-Type", "application/json")
	if c.stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("Accept-Encoding", "identity")
	req.Header.Set("User-Agent", "roundtable-sandbox-broker/"+version.Version)
	req.Header.Set("Anthropic-Version", anthropic.Version)
	if rich.CredentialKind == policy.CredentialOAuth {
		betas = append(betas, OAuthBeta)
		req.Header.Set("Authorization", "Bearer "+secret.Reveal())
	} else {
		req.Header.Set("X-Api-Key", secret.Reveal())
	}
	if len(betas) > 0 {
		req.Header.Set("Anthropic-Beta", strings.Join(betas, ","))
	}
	resp, err := st.client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, envelope.ErrRedirect):
			return refused("upstream redirect refused", envelope.ErrUpstream)
		case ctx.Err() != nil || envelope.IsTimeout(err):
			return b.host.Interrupted(r, refused("upstream deadline", envelope.ErrUpstreamTime))
		}
		return refused("upstream unreachable", envelope.ErrUpstream)
	}
	defer resp.Body.Close()
	c.upstreamStatus = resp.StatusCode
	if id := resp.Header.Get("Request-Id"); len(id) <= 128 && validID(id) {
		c.requestID = id
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &upstreamStatus{resp.StatusCode}
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if c.stream {
		if mt != "text/event-stream" {
			return refused("upstream answer is not an event stream", envelope.ErrUpstream)
		}
		return b.streamAnswer(ctx, w, rc, resp.Body, secrets, c)
	}
	if mt != "application/json" {
		return refused("upstream answer is not JSON", envelope.ErrUpstream)
	}
	data, err := io.ReadAll(&silentUpstream{r: io.LimitReader(resp.Body, anthropic.MaxResponseBytes+1), body: resp.Body, silence: st.silence})
	c.upstreamBytes = int64(len(data))
	if err != nil {
		return b.host.Interrupted(r, refused("upstream answer unreadable or silent", envelope.ErrUpstreamTime))
	}
	if len(data) > anthropic.MaxResponseBytes {
		return refused("upstream answer over the limit", envelope.ErrUpstream)
	}
	v, err := strictjson.DecodeObject(data)
	if err != nil {
		return refused("upstream answer is not one JSON object", envelope.ErrUpstream)
	}
	if st.matcher(secrets).Reflected(v) {
		return refused("answer reflects a credential", envelope.ErrUpstream)
	}
	out, err := anthropic.Encode(v)
	if err != nil {
		return refused("answer not encodable", envelope.ErrUpstream)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	_ = rc.SetWriteDeadline(time.Now().Add(st.silence))
	w.WriteHeader(http.StatusOK)
	n, _ := w.Write(out)
	c.bytesOut = int64(n)
	return nil
}

// streamAnswer passes the upstream's events through the filter.
func (b *Routes) streamAnswer(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, src io.ReadCloser, secrets []credential.Secret, c *anthropicCall) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	ew := &eventWriter{w: w, rc: rc, silence: b.anth.silence, c: c}
	res, err := anthropic.FilterStream(ctx, ew, src, anthropic.FilterOptions{
		Silence: b.anth.silence, MaxBytes: anthropic.MaxResponseBytes,
		Checker: secretChecker{b.anth.matcher(secrets)},
	})
	c.upstreamBytes, c.events = res.Bytes, res.Events
	c.streamedStarted = ew.started
	if err != nil && errors.Is(err, anthropic.ErrClient) {
		return refused("client stopped reading or went away mid-stream", envelope.ErrClientGone)
	}
	return err
}

// eventWriter writes and flushes one event, within the silence limit.
type eventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	silence time.Duration
	c       *anthropicCall
	started bool
}

func (e *eventWriter) WriteEvent(frame []byte) error {
	if err := e.rc.SetWriteDeadline(time.Now().Add(e.silence)); err != nil {
		return err
	}
	if !e.started {
		e.started = true
		e.w.WriteHeader(http.StatusOK)
	}
	n, err := e.w.Write(frame)
	e.c.bytesOut += int64(n)
	if err != nil {
		return err
	}
	return e.rc.Flush()
}

// secretChecker is the filter's Checker over the call's secrets.
type secretChecker struct{ m *credential.Matcher }

func (s secretChecker) Value(v any) bool        { return s.m.Reflected(v) }
func (s secretChecker) Text() func(string) bool { return s.m.Stream().Reflects }

// matcher returns a Matcher of secrets, reusing the last one while the
// secrets are the same (they are read for every call, so a rotated
// credential gets a new one).
func (st *anthropicState) matcher(secrets []credential.Secret) *credential.Matcher {
	vals := make([]string, len(secrets))
	for i, s := range secrets {
		vals[i] = s.Reveal()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.matched == nil || !slices.Equal(st.matchedFor, vals) {
		st.matched, st.matchedFor = credential.NewMatcher(secrets...), vals
	}
	return st.matched
}

// silentReader reads the request body, each read within the silence limit.
type silentReader struct {
	r       io.Reader
	rc      *http.ResponseController
	silence time.Duration
}

func (s *silentReader) Read(p []byte) (int, error) {
	_ = s.rc.SetReadDeadline(time.Now().Add(s.silence))
	return s.r.Read(p)
}

// silentUpstream reads an upstream body, closing it after silence without
// a chunk.
type silentUpstream struct {
	r       io.Reader
	body    io.Closer
	silence time.Duration
}

func (s *silentUpstream) Read(p []byte) (int, error) {
	t := time.AfterFunc(s.silence, func() { s.body.Close() })
	defer t.Stop()
	return s.r.Read(p)
}

// checkAnthropicHeaders: the header set of the model route, each once,
// HTTP/1.1, a Content-Length body of JSON, the dummy credential (bearer or
// x-api-key, not both), anthropic-version absent or the broker's, and
// anthropic-beta values from AnthropicBetas only (returned).
func checkAnthropicHeaders(r *http.Request) ([]string, error) {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		return nil, refused("only HTTP/1.1", envelope.ErrRefused)
	}
	for name, values := range r.Header {
		if !anthropicHeaders[name] {
			return nil, refused("header not allowed", envelope.ErrRefused)
		}
		if len(values) != 1 {
			return nil, refused("repeated header", envelope.ErrRefused)
		}
	}
	if len(r.Trailer) != 0 || len(r.TransferEncoding) != 0 {
		return nil, refused("transfer encoding not allowed", envelope.ErrLengthRequired)
	}
	auth, key := r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")
	switch {
	case auth != "" && key != "":
		return nil, refused("two caller credentials", envelope.ErrUnauthorized)
	case auth != "" && auth != envelope.DummyAuthorization, key != "" && key != protocol.DummyAPIKey, auth == "" && key == "":
		return nil, refused("caller credential is not the dummy key", envelope.ErrUnauthorized)
	}
	if v, ok := r.Header["Anthropic-Version"]; ok && v[0] != anthropic.Version {
		return nil, refused("anthropic-version not the broker's", envelope.ErrRefused)
	}
	var betas []string
	if v, ok := r.Header["Anthropic-Beta"]; ok {
		for _, b := range strings.Split(v[0], ",") {
			b = strings.TrimSpace(b)
			if !AnthropicBetas[b] {
				return nil, refused("anthropic-beta not allowed", envelope.ErrRefused)
			}
			betas = append(betas, b)
		}
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, refused("content type must be application/json", envelope.ErrMediaType)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return nil, refused("content type parameter not allowed", envelope.ErrMediaType)
		}
	}
	if r.ContentLength < 0 {
		return nil, refused("Content-Length required", envelope.ErrLengthRequired)
	}
	return betas, nil
}

// validID: a request id as the provider writes them (req_...), nothing else.
func validID(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// richCompactorSecret is the compactor's credential when it has one (read
// now, errors ignored), so no answer echoes it either.
func (b *Routes) richCompactorSecret() credential.Secret {
	if cp := b.pol.Rich.Compactor; cp != nil && cp.Credential != "" {
		if s, err := b.creds.Load(cp.Credential); err == nil {
			return s
		}
	}
	return credential.Secret{}
}
