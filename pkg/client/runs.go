package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// maxRunBytes bounds one run answer or event line: a finished run carries
// its artifacts (at most 256 MiB by the config's own bound, base64) and
// both output streams (at most 16 MiB each, JSON-escaped).
const maxRunBytes = 512 << 20

func runPath(id string, rest ...string) []string {
	return append([]string{"v1", "runs", escapeSegment(id)}, rest...)
}

// StartRun asks for a code run. The answer comes at once: the run is queued,
// running, or awaiting a human's approval (network runs).
func (c *Client) StartRun(ctx context.Context, p runs.Params) (runs.Status, error) {
	var st runs.Status
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, []string{"v1", "runs"}, p, &st)
	return st, err
}

// Credentials lists the egress credentials a run of project ("" = none)
// by the caller may ask for, with the variable each placeholder arrives in.
func (c *Client) Credentials(ctx context.Context, project string) ([]runs.Credential, error) {
	var out runs.CredentialList
	var q string
	if project != "" {
		q = url.Values{"project": {project}}.Encode()
	}
	err := c.call(ctx, c.opts.Timeout, http.MethodGet, []string{"v1", "credentials"}, q, nil, "",
		func(resp *http.Response, op string) error {
			return decodeAnswer(resp, op, maxResponseBytes, &out)
		})
	return out.Credentials, err
}

// Run returns one run, with its output and artifacts once finished.
func (c *Client) Run(ctx context.Context, id string) (runs.Status, error) {
	var st runs.Status
	err := c.doBounded(ctx, c.opts.Timeout, maxRunBytes, http.MethodGet, runPath(id), nil, &st)
	return st, err
}

// Runs lists the runs the caller may see (its own; an admin's: all),
// without output or artifacts.
func (c *Client) Runs(ctx context.Context) ([]runs.Status, error) {
	var out struct {
		Runs []runs.Status `json:"runs"`
	}
	err := c.do(ctx, c.opts.Timeout, http.MethodGet, []string{"v1", "runs"}, nil, &out)
	return out.Runs, err
}

// CancelRun cancels a run (its owner or an admin).
func (c *Client) CancelRun(ctx context.Context, id string) (runs.Status, error) {
	var st runs.Status
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, runPath(id, "cancel"), nil, &st)
	return st, err
}

// ApproveRun approves network for one run awaiting approval (admin only).
func (c *Client) ApproveRun(ctx context.Context, id string) (runs.Status, error) {
	var st runs.Status
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, runPath(id, "approve"), nil, &st)
	return st, err
}

// DenyRun denies network for one run awaiting approval (admin only).
func (c *Client) DenyRun(ctx context.Context, id string) (runs.Status, error) {
	var st runs.Status
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, runPath(id, "deny"), nil, &st)
	return st, err
}

// ErrRunStream: the event stream ended without a result event.
var ErrRunStream = errors.New("run event stream ended early")

// RunEvents follows a run's events from its first (history replayed) until
// its result, calling fn for each in order, and returns the finished run.
// An error from fn stops following (the run goes on). Bounded by
// Options.RunTimeout.
func (c *Client) RunEvents(ctx context.Context, id string, fn func(runs.Event) error) (runs.Status, error) {
	var st runs.Status
	err := follow(ctx, c, http.MethodGet, "/v1/runs/"+escapeSegment(id)+"/events", nil, c.opts.RunTimeout, maxRunBytes, ErrRunStream,
		func(op string, ev runs.Event) (bool, error) {
			if fn != nil {
				if err := fn(ev); err != nil {
					return true, err
				}
			}
			if ev.Type == runs.EventResult && ev.Status != nil {
				st = *ev.Status
				return true, nil
			}
			return false, nil
		})
	return st, err
}

// follow reads an NDJSON event stream (a run's events, a session exec's)
// to the event on which each returns done, bounded by timeout: a stream
// that ends before that is endErr, a line over maxLine or one that does
// not decode fails it, and so does an error each returns.
func follow[E any](ctx context.Context, c *Client, method, raw string, body any, timeout time.Duration, maxLine int, endErr error,
	each func(op string, ev E) (done bool, err error)) error {
	terr := &timeoutError{op: method + " " + raw, after: timeout}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, terr)
	defer cancel()
	resp, op, err := c.send(ctx, method, raw, body)
	if err != nil {
		if errors.Is(context.Cause(ctx), ErrTimeout) {
			return terr
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		return errorOf(resp.StatusCode, data)
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(rd, maxLine)
		if err != nil {
			if errors.Is(context.Cause(ctx), ErrTimeout) {
				return terr
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("sandbox-host: %s: %w", op, endErr)
			}
			return fmt.Errorf("sandbox-host: %s: %w", op, err)
		}
		var ev E
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("sandbox-host: %s: bad event: %w", op, err)
		}
		if done, err := each(op, ev); done || err != nil {
			if done && err == nil {
				drainEnd(resp.Body, rd)
			}
			return err
		}
	}
}

// drainAfterDone bounds reading a stream's end after its final event.
const (
	drainAfterDoneBytes = 64 << 10
	drainAfterDoneWait  = 100 * time.Millisecond
)

// drainEnd reads the rest of a stream whose final event came (the host
// ends it right after: its chunked terminator, often in the same read),
// so the connection goes back to the pool: a body closed before its end
// closes the connection, and the next call pays a new one (the host's
// accept and its peer's credentials and groups). At most
// drainAfterDoneBytes and drainAfterDoneWait: past them the body is
// closed as before.
func drainEnd(body io.Closer, rd io.Reader) {
	t := time.AfterFunc(drainAfterDoneWait, func() { body.Close() })
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(rd, drainAfterDoneBytes))
}

// readLine reads one newline-terminated line of at most max bytes.
func readLine(rd *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := rd.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("event line over %d bytes", max)
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
