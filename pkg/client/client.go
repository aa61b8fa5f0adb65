// Package client is the Go client of the sandbox-host API on its Unix socket
// (/run/roundtable-sandbox/host.sock), the one a chat frontend imports.
// Guarantee: every non-2xx answer becomes an *Error carrying the HTTP status
// and the host's reason; channel keys are path-escaped, never interpreted;
// no call waits without bound: each has a connect timeout and an overall
// deadline (long for turns, short for everything else), and a call cut by
// that deadline fails with ErrTimeout.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// DefaultSocket is the installed API socket.
const DefaultSocket = "/run/roundtable-sandbox/host.sock"

// maxResponseBytes bounds what the client reads of one answer.
const maxResponseBytes = 1 << 20

// Default bounds. A turn waits at most 600 s for its slot
// (queue.maxWaitSeconds' upper bound; the host then answers 429) and runs at
// most 600 s (turnDeadlineSeconds' upper bound) plus the host's cleanup, so
// DefaultTurnTimeout waits a little longer than both together.
// Every other call is answered at once by a running host.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultTimeout        = 10 * time.Second
	DefaultTurnTimeout    = 21 * time.Minute
	// DefaultRunTimeout bounds following one code run: at most an hour
	// awaiting approval (runs.approvalTimeoutSeconds) plus an hour running
	// (timeoutSeconds) plus cleanup.
	DefaultRunTimeout = 2*time.Hour + 5*time.Minute
)

// Options bounds the client's calls; a zero field takes its default. A
// caller's ctx with an earlier deadline still wins.
type Options struct {
	ConnectTimeout time.Duration // connecting to the socket
	Timeout        time.Duration // whole call: status, channels, mode, fresh, cancel, turns, health
	TurnTimeout    time.Duration // whole call: RunTurn (queueing and running the turn)
	RunTimeout     time.Duration // whole call: RunEvents (following a code run to its end)
}

func (o Options) withDefaults() Options {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.TurnTimeout <= 0 {
		o.TurnTimeout = DefaultTurnTimeout
	}
	if o.RunTimeout <= 0 {
		o.RunTimeout = DefaultRunTimeout
	}
	return o
}

// ErrTimeout: the host did not answer within the call's deadline (Options).
var ErrTimeout = errors.New("no answer in time")

// timeoutError names the call's deadline and where to look.
type timeoutError struct {
	op    string
	after time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("sandbox-host: %s: no answer within %s (is the host running? systemctl status sandbox-host)", e.op, e.after)
}
func (e *timeoutError) Unwrap() error { return ErrTimeout }

// Error is a refused or failed request.
type Error struct {
	Status int    // HTTP status
	Reason string // the host's reason, e.g. "queue full"
}

func (e *Error) Error() string { return fmt.Sprintf("sandbox-host: %d: %s", e.Status, e.Reason) }

// Is matches errors by status: errors.Is(err, client.ErrQueueFull).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == "" && t.Status == e.Status
}

// Status sentinels for errors.Is.
var (
	ErrBadRequest   = &Error{Status: http.StatusBadRequest}
	ErrForbidden    = &Error{Status: http.StatusForbidden}
	ErrModeOff      = &Error{Status: http.StatusConflict} // also a cancelled turn
	ErrTooLarge     = &Error{Status: http.StatusRequestEntityTooLarge}
	ErrQueueFull    = &Error{Status: http.StatusTooManyRequests}
	ErrTurnFailed   = &Error{Status: http.StatusInternalServerError}
	ErrShuttingDown = &Error{Status: http.StatusServiceUnavailable}
	ErrDeadline     = &Error{Status: http.StatusGatewayTimeout}
)

// Client talks to one host socket.
type Client struct {
	hc   *http.Client
	opts Options
}

// New returns a client of the socket at socketPath ("" = DefaultSocket)
// with the default bounds.
func New(socketPath string) *Client { return NewWithOptions(socketPath, Options{}) }

// NewWithOptions returns a client of the socket at socketPath ("" =
// DefaultSocket) with the given bounds.
func NewWithOptions(socketPath string, o Options) *Client {
	if socketPath == "" {
		socketPath = DefaultSocket
	}
	o = o.withDefaults()
	d := net.Dialer{Timeout: o.ConnectTimeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns:    8,
		IdleConnTimeout: 60 * time.Second,
	}
	// The deadline is per call (do), not http.Client.Timeout: turns and
	// status calls need different bounds.
	return &Client{hc: &http.Client{Transport: tr}, opts: o}
}

// escapeSegment escapes a channel key as one path segment; "." is escaped
// too so no layer treats "." or ".." as a path step.
func escapeSegment(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ".", "%2E")
}

// do performs one call within limit (a turn's or a status call's bound).
func (c *Client) do(ctx context.Context, limit time.Duration, method string, segs []string, body, out any) error {
	return c.doBounded(ctx, limit, maxResponseBytes, method, segs, body, out)
}

// doBounded is do reading at most maxBytes of the answer.
func (c *Client) doBounded(ctx context.Context, limit time.Duration, maxBytes int64, method string, segs []string, body, out any) error {
	raw := "/" + strings.Join(segs, "/")
	op := method + " " + raw
	terr := &timeoutError{op: op, after: limit}
	ctx, cancel := context.WithTimeoutCause(ctx, limit, terr)
	defer cancel()
	err := c.exchange(ctx, method, raw, body, out, maxBytes)
	if err != nil && errors.Is(context.Cause(ctx), ErrTimeout) && !errors.As(err, new(*Error)) {
		return terr
	}
	return err
}

func (c *Client) exchange(ctx context.Context, method, raw string, body, out any, maxBytes int64) error {
	resp, op, err := c.send(ctx, method, raw, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return fmt.Errorf("sandbox-host: %s: read answer: %w", op, err)
	}
	if int64(len(data)) > maxBytes {
		return fmt.Errorf("sandbox-host: %s: answer too large", op)
	}
	if resp.StatusCode/100 != 2 {
		return errorOf(resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("sandbox-host: %s: bad answer: %w", op, err)
	}
	return nil
}

// errorOf is the *Error of a non-2xx answer.
func errorOf(status int, data []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		e.Error = http.StatusText(status)
	}
	return &Error{Status: status, Reason: e.Error}
}

// send performs the request; the caller reads and closes the body.
func (c *Client) send(ctx context.Context, method, raw string, body any) (*http.Response, string, error) {
	op := method + " " + raw
	raw, query, _ := strings.Cut(raw, "?")
	plain := raw
	if u, err := url.PathUnescape(raw); err == nil {
		plain = u
	}
	u := &url.URL{Scheme: "http", Host: "sandbox-host", Path: plain, RawPath: raw, RawQuery: query}
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, op, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, op, err
	}
	req.URL = u // keep the exact escaping
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // drop the URL: the op names the call
		}
		if hostDown(err) {
			return nil, op, fmt.Errorf("sandbox-host: %s: %w (the host is not running or could not start: systemctl status sandbox-host)", op, err)
		}
		return nil, op, fmt.Errorf("sandbox-host: %s: %w", op, err)
	}
	return resp, op, nil
}

// hostDown: the socket is absent or refuses, or the host closed the
// connection without an answer (systemd closing a failed socket does that).
// net/http reports a connection closed before any answer byte, when the
// request may not be retried, as an unexported error with this text.
func hostDown(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

func channelPath(channel string, rest ...string) []string {
	return append([]string{"v1", "channels", escapeSegment(channel)}, rest...)
}

// RunTurn runs one guest message in channel and waits for the reply.
func (c *Client) RunTurn(ctx context.Context, channel string, speaker apiwire.Speaker, text string) (apiwire.Reply, error) {
	return c.RunTurnAttachments(ctx, channel, speaker, text, nil)
}

// Channel returns one channel's status.
func (c *Client) Channel(ctx context.Context, channel string) (apiwire.Channel, error) {
	var ch apiwire.Channel
	err := c.do(ctx, c.opts.Timeout, http.MethodGet, channelPath(channel), nil, &ch)
	return ch, err
}

// Channels lists the known channels.
func (c *Client) Channels(ctx context.Context) ([]apiwire.Channel, error) {
	var out apiwire.ChannelList
	err := c.do(ctx, c.opts.Timeout, http.MethodGet, []string{"v1", "channels"}, nil, &out)
	return out.Channels, err
}

// SetMode switches a channel's sandbox mode ("on" or "off"). Admins only.
func (c *Client) SetMode(ctx context.Context, channel, mode string) (apiwire.Channel, error) {
	var ch apiwire.Channel
	err := c.do(ctx, c.opts.Timeout, http.MethodPut, channelPath(channel, "mode"), apiwire.ModeRequest{Mode: mode}, &ch)
	return ch, err
}

// SetRich puts a channel in mode rich with a configured profile. Admins only.
func (c *Client) SetRich(ctx context.Context, channel, profile string) (apiwire.Channel, error) {
	var ch apiwire.Channel
	err := c.do(ctx, c.opts.Timeout, http.MethodPut, channelPath(channel, "mode"), apiwire.ModeRequest{Mode: "rich", Profile: profile}, &ch)
	return ch, err
}

// Fresh makes the channel's next turn start without history. Admins only.
func (c *Client) Fresh(ctx context.Context, channel string) (apiwire.Channel, error) {
	var ch apiwire.Channel
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, channelPath(channel, "fresh"), nil, &ch)
	return ch, err
}

// Cancel cancels the channel's running turn. Admins only.
func (c *Client) Cancel(ctx context.Context, channel string) (apiwire.Cancel, error) {
	var r apiwire.Cancel
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, channelPath(channel, "cancel"), nil, &r)
	return r, err
}

// Turns lists running turns.
func (c *Client) Turns(ctx context.Context) ([]apiwire.Turn, error) {
	var out apiwire.TurnList
	err := c.do(ctx, c.opts.Timeout, http.MethodGet, []string{"v1", "turns"}, nil, &out)
	return out.Turns, err
}

// Health returns the host's health; a stopping host answers 503 (an *Error).
func (c *Client) Health(ctx context.Context) (apiwire.Health, error) {
	var h apiwire.Health
	err := c.do(ctx, c.opts.Timeout, http.MethodGet, []string{"v1", "health"}, nil, &h)
	return h, err
}
