package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
)

// maxJobBytes bounds one job answer or event line: a report of at most
// 1,000,000 characters (delegation.maxReportChars' bound), JSON-escaped.
const maxJobBytes = 32 << 20

// DefaultJobIdleTimeout bounds the silence of a finished-jobs stream: the
// host sends a keepalive line every 15 s.
const DefaultJobIdleTimeout = time.Minute

// Delegate asks for a delegated research task in channel; the answer comes
// at once with the job's id (state queued). author is the host-bound
// author, as a turn's speaker.
func (c *Client) Delegate(ctx context.Context, channel, title, task string, author apiwire.Speaker) (delegation.Status, error) {
	var st delegation.Status
	req := delegation.Request{Title: title, Task: task, Author: delegation.Author{ID: author.ID, Name: author.Name, PrincipalID: author.PrincipalID}}
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, channelPath(channel, "delegations"), req, &st)
	return st, err
}

// Job returns one job, with its report or diagnostic once finished.
func (c *Client) Job(ctx context.Context, id string) (delegation.Status, error) {
	var st delegation.Status
	err := c.doBounded(ctx, c.opts.Timeout, maxJobBytes, http.MethodGet, []string{"v1", "jobs", escapeSegment(id)}, nil, &st)
	return st, err
}

// WaitJob polls a job every interval (1 s when 0) until it finished,
// bounded by the job's own deadline plus two minutes (its cleanup), and
// returns it; it never consumes the channel's stream.
func (c *Client) WaitJob(ctx context.Context, id string, interval time.Duration) (delegation.Status, error) {
	if interval <= 0 {
		interval = time.Second
	}
	st, err := c.Job(ctx, id)
	if err != nil {
		return st, err
	}
	limit := time.Until(time.UnixMilli(st.DeadlineUnixMs)) + 2*time.Minute
	terr := &timeoutError{op: "GET /v1/jobs/" + id + " (waiting for its end)", after: limit}
	ctx, cancel := context.WithTimeoutCause(ctx, limit, terr)
	defer cancel()
	for !st.Finished() {
		select {
		case <-ctx.Done():
			return st, context.Cause(ctx)
		case <-time.After(interval):
		}
		if st, err = c.Job(ctx, id); err != nil {
			return st, err
		}
	}
	return st, nil
}

// ErrJobStream: the host ended the finished-jobs stream (it stops).
var ErrJobStream = errors.New("finished-jobs stream ended")

// FollowJobs reads channel's stream of finished jobs: first those finished
// before the call and not yet delivered to the caller's uid, then each as
// it finishes, calling fn for each. It returns fn's error, ctx's, an
// *Error, ErrJobStream when the host ends the stream, or ErrTimeout after
// idle (DefaultJobIdleTimeout when 0) without even a keepalive.
func (c *Client) FollowJobs(ctx context.Context, channel string, idle time.Duration, fn func(delegation.Status) error) error {
	if idle <= 0 {
		idle = DefaultJobIdleTimeout
	}
	raw := "/v1/channels/" + escapeSegment(channel) + "/jobs/events"
	terr := &timeoutError{op: "GET " + raw + " (silent)", after: idle}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(idle, func() { cancel(terr) })
	defer watchdog.Stop()
	resp, op, err := c.send(ctx, http.MethodGet, raw, nil)
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
		line, err := readLine(rd, maxJobBytes)
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return cause
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("sandbox-host: %s: %w", op, ErrJobStream)
			}
			return fmt.Errorf("sandbox-host: %s: %w", op, err)
		}
		watchdog.Reset(idle)
		var ev delegation.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("sandbox-host: %s: bad event: %w", op, err)
		}
		if ev.Type != delegation.EventJob || ev.Job == nil {
			continue
		}
		if err := fn(*ev.Job); err != nil {
			return err
		}
	}
}
