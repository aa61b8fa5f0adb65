package rich

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
	"regexp"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// Pull is the worker's side of the pull protocol.
type Pull interface {
	// Ready announces the worker (POST /worker/ready).
	Ready(ctx context.Context, r richproto.Ready) error
	// Next long polls for a turn (POST /worker/next): nil, nil when the
	// poll ended without one (204, or the poll's own deadline).
	Next(ctx context.Context) (*richproto.Turn, error)
	// Result sends the admitted turn's reply packet (POST /worker/result).
	Result(ctx context.Context, r richproto.Result) error
}

// Model is the model route: one streamed Messages call, assembled.
type Model interface {
	Messages(ctx context.Context, req *Request) (*Response, error)
}

// Tools posts one host-tool or MCP call (JSON body) to a broker route
// (/tools/<name>, /mcp/<server>) and answers the 200 body.
type Tools interface {
	Call(ctx context.Context, route string, body any) (json.RawMessage, error)
}

// Compactor is the broker's /compact: the host-side compactor. An answer
// without a compaction (a fallback reason), or an error, makes the worker
// write its own summary.
type Compactor interface {
	Compact(ctx context.Context, req *CompactRequest) (*CompactAnswer, error)
}

var (
	// ErrBroker is the category of a failed broker call (transport, size, JSON).
	ErrBroker = errors.New("broker call failed")
	// ErrRefused is the category of a non-2xx broker answer.
	ErrRefused = errors.New("broker refused")
)

// StatusError is a broker answer of an unexpected status (its body unread).
type StatusError struct{ Status int }

func (e *StatusError) Error() string { return fmt.Sprintf("broker answered status %d", e.Status) }

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *StatusError) Unwrap() error { return ErrRefused }

// Transport bounds.
const (
	// MaxTurnBytes bounds a /worker/next answer: a turn's text, tool specs
	// and framing (the largest valid turn is far below).
	MaxTurnBytes = 4 << 20
	// MaxToolAnswerBytes bounds a /tools or /mcp answer (the broker's 1 MiB
	// plus its framing).
	MaxToolAnswerBytes = 1<<20 + 64<<10
	// MaxCompactAnswerBytes bounds a /compact answer.
	MaxCompactAnswerBytes = 2 << 20
	// PollTimeout bounds one long poll; the broker answers 204 sooner
	// (after its PollWait, 25 s).
	PollTimeout = 5 * time.Minute
	// CallTimeout bounds a pull-protocol call other than the long poll.
	CallTimeout = 30 * time.Second
)

// Routes.
const (
	RouteMessages = "/anthropic/v1/messages"
	RouteCompact  = "/compact"
	// RouteCompactReport takes a CompactReport for the host's log.
	RouteCompactReport = "/compact/report"
)

var toolRouteRe = regexp.MustCompile(`^/(tools|mcp)/[a-z][a-z0-9_]{0,47}$`)

// Broker is the production transport: HTTP/1.1 over the channel broker's
// Unix socket with the dummy credential. It never uses a proxy, never
// follows a redirect, bounds every answer and logs route, status and
// latency of each call, never a body.
type Broker struct {
	client *http.Client
	log    *slog.Logger
}

// NewBroker returns the transport for socketPath.
func NewBroker(socketPath string, log *slog.Logger) *Broker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socketPath)
		},
		DisableCompression:     true,
		MaxIdleConns:           2,
		MaxConnsPerHost:        2,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: 16 << 10,
	}
	return &Broker{
		client: &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		log: log,
	}
}

// post sends body to route and returns the response (the caller closes
// it) after logging its status and latency.
// A nil body sends none (the broker refuses a body on /worker/next).
func (b *Broker) post(ctx context.Context, route string, body any, accept string) (*http.Response, time.Time, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("encode request: %v: %w", err, ErrBroker)
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+route, reader)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("build request: %w", ErrBroker)
	}
	req.Header = http.Header{
		"Authorization": {"Bearer " + protocol.DummyAPIKey},
		"Accept":        {accept},
		"User-Agent":    {"sandbox-worker"},
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			// (A call ended by its own deadline or a shutdown is the
			// caller's to report.)
			b.log.Warn("broker call failed", "route", route, "latency_ms", time.Since(start).Milliseconds(), "cause", "transport")
		}
		// The url.Error names only http://broker<route>, never a payload.
		return nil, start, fmt.Errorf("%v: %w", err, ErrBroker)
	}
	if route != richproto.RouteNext || resp.StatusCode != http.StatusNoContent {
		// An idle poll (every 25 s) gets no line.
		b.log.Info("broker call", "route", route, "status", resp.StatusCode, "latency_ms", time.Since(start).Milliseconds())
	}
	return resp, start, nil
}

func drain(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// readJSON reads a 200 answer of at most max bytes.
func readJSON(resp *http.Response, max int64) (json.RawMessage, error) {
	defer resp.Body.Close()
	raw, err := protocol.ReadBounded(resp.Body, max)
	if err != nil {
		return nil, fmt.Errorf("read answer: %v: %w", err, ErrBroker)
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("answer is not JSON: %w", ErrBroker)
	}
	return raw, nil
}

// Ready implements Pull.
func (b *Broker) Ready(ctx context.Context, r richproto.Ready) error {
	return b.call(ctx, richproto.RouteReady, r)
}

// call posts body to route within CallTimeout; any 2xx is success.
func (b *Broker) call(ctx context.Context, route string, body any) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, _, err := b.post(ctx, route, body, "application/json")
	if err != nil {
		return err
	}
	drain(resp)
	if resp.StatusCode/100 != 2 {
		return &StatusError{Status: resp.StatusCode}
	}
	return nil
}

// Next implements Pull.
func (b *Broker) Next(ctx context.Context) (*richproto.Turn, error) {
	ctx, cancel := context.WithTimeout(ctx, PollTimeout)
	defer cancel()
	resp, _, err := b.post(ctx, richproto.RouteNext, nil, "application/json")
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, nil // the poll's own deadline: poll again
		}
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		drain(resp)
		return nil, nil
	case http.StatusOK:
	default:
		drain(resp)
		return nil, &StatusError{Status: resp.StatusCode}
	}
	raw, err := readJSON(resp, MaxTurnBytes)
	if err != nil {
		return nil, err
	}
	var t richproto.Turn
	if err := protocol.DecodeStrict(raw, &t); err != nil {
		return nil, fmt.Errorf("turn: %w", ErrBroker)
	}
	return &t, nil
}

// Result implements Pull.
func (b *Broker) Result(ctx context.Context, r richproto.Result) error {
	return b.call(ctx, richproto.RouteResult, r)
}

// Messages implements Model: the request goes with stream true and the
// answer is read as server-sent events as they arrive (ReadStream).
func (b *Broker) Messages(ctx context.Context, req *Request) (*Response, error) {
	r := *req
	r.Stream = true
	resp, _, err := b.post(ctx, RouteMessages, &r, "text/event-stream")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		drain(resp)
		return nil, &StatusError{Status: resp.StatusCode}
	}
	defer resp.Body.Close()
	out, err := ReadStream(resp.Body)
	if err != nil && !errors.Is(err, ErrStream) && !errors.Is(err, ErrModelError) {
		// A read failure (broker gone, deadline) breaks the stream too.
		err = fmt.Errorf("read stream: %v: %w", err, ErrStream)
	}
	return out, err
}

// Call implements Tools.
func (b *Broker) Call(ctx context.Context, route string, body any) (json.RawMessage, error) {
	if !toolRouteRe.MatchString(route) {
		return nil, fmt.Errorf("invalid tool route: %w", ErrBroker)
	}
	resp, _, err := b.post(ctx, route, body, "application/json")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		drain(resp)
		return nil, &StatusError{Status: resp.StatusCode}
	}
	return readJSON(resp, MaxToolAnswerBytes)
}

// Compact implements Compactor.
func (b *Broker) Compact(ctx context.Context, req *CompactRequest) (*CompactAnswer, error) {
	resp, _, err := b.post(ctx, RouteCompact, req, "application/json")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		drain(resp)
		return nil, &StatusError{Status: resp.StatusCode}
	}
	raw, err := readJSON(resp, MaxCompactAnswerBytes)
	if err != nil {
		return nil, err
	}
	var a CompactAnswer
	if json.Unmarshal(raw, &a) != nil {
		return nil, fmt.Errorf("compaction answer: %w", ErrBroker)
	}
	return &a, nil
}

// Report implements Reporter.
func (b *Broker) Report(ctx context.Context, r *CompactReport) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, _, err := b.post(ctx, RouteCompactReport, r, "application/json")
	if err != nil {
		return err
	}
	drain(resp)
	if resp.StatusCode/100 != 2 {
		return &StatusError{Status: resp.StatusCode}
	}
	return nil
}
