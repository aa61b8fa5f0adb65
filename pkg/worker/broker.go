package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Broker is the worker's only way out: one POST of a JSON body to a broker
// route ("/model", "/tools/<name>", "/mcp/<server>"), answering the 200
// response body. Any other status is an error.
type Broker interface {
	Call(ctx context.Context, route string, body any) (json.RawMessage, error)
}

var (
	// ErrBroker is the category of a failed broker call (transport, size, JSON).
	ErrBroker = errors.New("broker call failed")
	// ErrRefused is the category of a non-200 broker answer.
	ErrRefused = errors.New("broker refused")
)

// RefusedError carries the status of a non-200 broker answer (never its body).
type RefusedError struct{ Status int }

func (e *RefusedError) Error() string { return fmt.Sprintf("broker answered status %d", e.Status) }

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Transport bounds.
const (
	// MaxResponseBytes bounds a broker answer: the broker's 1 MiB response
	// bound plus slack for its own JSON framing.
	MaxResponseBytes = 1<<20 + 64<<10
	// DefaultCallTimeout bounds one broker call (the broker's upstream
	// deadline is 60 s); the host's turn deadline bounds the whole turn.
	DefaultCallTimeout = 75 * time.Second
)

var routeRe = regexp.MustCompile(`^/(model|tools/[a-z][a-z0-9_]{0,47}|mcp/[a-z][a-z0-9_]{0,47})$`)

// UnixBroker speaks HTTP/1.1 to the broker over its Unix socket with the
// dummy credential. It never uses a proxy, never follows a redirect and never
// reads more than MaxResponseBytes.
type UnixBroker struct {
	client  *http.Client
	timeout time.Duration
}

// NewUnixBroker returns the production transport for socketPath
// (protocol.BrokerSocketPath in the container). timeout <= 0 means
// DefaultCallTimeout.
func NewUnixBroker(socketPath string, timeout time.Duration) *UnixBroker {
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socketPath)
		},
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		MaxIdleConns:           1,
		MaxConnsPerHost:        1,
		IdleConnTimeout:        30 * time.Second,
		ResponseHeaderTimeout:  timeout,
		MaxResponseHeaderBytes: 16 << 10,
	}
	return &UnixBroker{
		client: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		timeout: timeout,
	}
}

// Call POSTs body as JSON to route.
func (b *UnixBroker) Call(ctx context.Context, route string, body any) (json.RawMessage, error) {
	if !routeRe.MatchString(route) {
		return nil, fmt.Errorf("invalid broker route: %w", ErrBroker)
	}
	data, err := marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode request: %v: %w", err, ErrBroker)
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+route, bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", ErrBroker)
	}
	req.Header = http.Header{
		"Authorization": {"Bearer " + protocol.DummyAPIKey},
		"Content-Type":  {"application/json"},
		"Accept":        {"application/json"},
		"User-Agent":    {"sandbox-worker"},
	}
	resp, err := b.client.Do(req)
	if err != nil {
		// The url.Error names only http://broker<route>, never a payload.
		return nil, fmt.Errorf("%v: %w", err, ErrBroker)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, &RefusedError{Status: resp.StatusCode}
	}
	raw, err := protocol.ReadBounded(resp.Body, MaxResponseBytes)
	if err != nil {
		return nil, fmt.Errorf("read response: %v: %w", err, ErrBroker)
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("response is not JSON: %w", ErrBroker)
	}
	return json.RawMessage(raw), nil
}
