package runmcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// Generic tool errors for system failures (the log has the cause).
const (
	msgStartFailed  = "the sandbox host could not start the run"
	msgBusy         = "the sandbox host is busy or stopping; try again later"
	msgForbidden    = "the sandbox host refused this MCP server's user"
	msgLost         = "the sandbox host stopped reporting on the run; it was cancelled"
	msgWaitTooLong  = "no result from the sandbox host in time; the run was cancelled"
	msgCancelled    = "the tool call was cancelled; so was the run"
	msgNotStarted   = "the tool call was cancelled; the run was not started"
	msgApproveError = "the sandbox host could not record the network approval; the run was cancelled before it started"
)

// eventRetries bounds how often a broken event stream is reopened (the
// host replays its history; seen events are skipped).
const eventRetries = 3

// handle serves one tools/call of sandbox_run.
func (s *server) handle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	// Calls end with the server, not only with the client.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.o.Context, cancel)()

	p, err := params(req.Params.Arguments, s.o.Project)
	if err != nil {
		return toolError("sandbox_run refused its arguments: " + err.Error()), nil
	}
	if p.Network {
		if msg := s.approve(ctx, req.Session, p); msg != "" {
			return toolError(msg), nil
		}
	}
	if ctx.Err() != nil {
		return toolError(msgNotStarted), nil
	}
	st, err := s.r.StartRun(ctx, p)
	if err != nil {
		return s.startError(err), nil
	}
	log := s.logf.With("run", st.ID)
	log.Info("run started", "mode", st.Mode, "network", p.Network)
	if p.Network {
		if _, err := s.r.ApproveRun(ctx, st.ID); err != nil {
			s.cancelRun(ctx, st.ID)
			if errors.Is(err, client.ErrForbidden) {
				log.Warn("network approval refused by the host: this user lacks the admin role")
				return toolError(msgNeedAdmin), nil
			}
			log.Error("network approval failed", "err", err)
			return toolError(msgApproveError), nil
		}
		log.Info("network approved through elicitation")
	}

	timeout := p.TimeoutSeconds
	if timeout <= 0 {
		timeout = runs.DefaultTimeoutSeconds
	}
	wait := time.Duration(timeout)*time.Second + s.o.WaitSlack
	waitCtx, stop := context.WithTimeoutCause(ctx, wait, errWaitTooLong)
	defer stop()
	final, err := s.follow(waitCtx, req, st.ID)
	switch {
	case err == nil:
		log.Info("run finished", "result", final.Result, "durationMs", final.DurationMs)
		return result(final), nil
	case ctx.Err() != nil:
		s.cancelRun(ctx, st.ID)
		log.Info("tool call ended before the run; run cancelled")
		return toolError(msgCancelled), nil
	case errors.Is(context.Cause(waitCtx), errWaitTooLong):
		s.cancelRun(ctx, st.ID)
		log.Warn("no result in time; run cancelled", "wait", wait)
		return toolError(msgWaitTooLong), nil
	default:
		s.cancelRun(ctx, st.ID)
		log.Error("event stream failed; run cancelled", "err", err)
		return toolError(msgLost), nil
	}
}

var errWaitTooLong = errors.New("wait bound reached")

// startError turns StartRun's failure into a tool error: the host's reason
// for a refused request (it judges the parameters and says why, as the seed
// does), a generic one otherwise.
func (s *server) startError(err error) *mcp.CallToolResult {
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Status == http.StatusBadRequest:
		// The API spells the parameter timeoutSeconds; the tool does not.
		reason := strings.ReplaceAll(ce.Reason, "timeoutSeconds", "timeout_seconds")
		return toolError("the sandbox host refused the run: " + truncate(reason, 500))
	case errors.Is(err, client.ErrForbidden):
		s.logf.Warn("the host refused this user a run", "err", err)
		return toolError(msgForbidden)
	case errors.Is(err, client.ErrQueueFull), errors.Is(err, client.ErrShuttingDown):
		return toolError(msgBusy)
	default:
		s.logf.Error("starting a run failed", "err", err)
		return toolError(msgStartFailed)
	}
}

// cancelRun cancels a run on the host with a fresh, short deadline: the
// call's own context may be the thing that ended.
func (s *server) cancelRun(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.CancelTimeout)
	defer cancel()
	if _, err := s.r.CancelRun(cctx, id); err != nil {
		s.logf.Error("cancelling a run failed", "run", id, "err", err)
	}
}

// follow streams a run's events until its result, reporting progress when
// the call carries a progress token.
func (s *server) follow(ctx context.Context, req *mcp.CallToolRequest, id string) (runs.Status, error) {
	pr := &progress{s: s, ss: req.Session, token: req.Params.GetProgressToken()}
	var seen int64
	var lastErr error
	for attempt := 0; attempt <= eventRetries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return runs.Status{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
		}
		final, err := s.r.RunEvents(ctx, id, func(ev runs.Event) error {
			if ev.Seq != 0 && ev.Seq <= seen {
				return nil // replayed
			}
			seen = max(seen, ev.Seq)
			pr.event(ctx, ev)
			return nil
		})
		if err == nil && final.State == runs.StateFinished {
			return final, nil
		}
		if ctx.Err() != nil {
			return runs.Status{}, ctx.Err()
		}
		if ce := new(client.Error); errors.As(err, &ce) && ce.Status/100 == 4 {
			return runs.Status{}, err // not found, forbidden ...: reopening cannot help
		}
		if err == nil {
			err = errors.New("event stream ended before the result")
		}
		lastErr = err
	}
	return runs.Status{}, lastErr
}

// Bounds of a progress message: the latest output line.
const maxProgressMessage = 200

// progress sends rate-limited notifications/progress for one call.
type progress struct {
	s     *server
	ss    *mcp.ServerSession
	token any
	last  time.Time
	n     float64
	line  string
	state string
	sent  string // the message of the last notification sent
}

func (p *progress) event(ctx context.Context, ev runs.Event) {
	if p.token == nil || p.ss == nil {
		return
	}
	switch ev.Type {
	case runs.EventOutput:
		if l := lastLine(ev.Data); l != "" {
			p.line = l
		}
	case runs.EventState:
		p.state = ev.State
	case runs.EventResult:
		// The last output line always reaches the client, whatever the
		// rate limit held back.
		if msg := p.message(); msg != "" && msg != p.sent {
			p.send(ctx, msg)
		}
		return
	default:
		return
	}
	now := time.Now()
	if !p.last.IsZero() && now.Sub(p.last) < p.s.o.ProgressInterval {
		return
	}
	p.last = now
	p.send(ctx, p.message())
}

// message is what a notification says now: the latest output line, else the state.
func (p *progress) message() string {
	if p.line != "" {
		return p.line
	}
	return p.state
}

func (p *progress) send(ctx context.Context, msg string) {
	p.n++
	p.sent = msg
	if err := p.ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: p.token,
		Progress:      p.n,
		Message:       msg,
	}); err != nil && ctx.Err() == nil {
		p.s.logf.Debug("progress notification failed", "err", err)
	}
}

// lastLine is the last non-blank line of an output chunk as printable
// text, bounded.
func lastLine(data []byte) string {
	data = bytes.TrimRightFunc(data, unicode.IsSpace)
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[i+1:]
	}
	if len(data) > 4*maxProgressMessage {
		data = data[len(data)-4*maxProgressMessage:]
	}
	s := strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			if r == '\t' {
				return ' '
			}
			return -1
		}
		return r
	}, strings.ToValidUTF8(string(data), ""))
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > maxProgressMessage {
		r := []rune(s)
		s = "…" + string(r[len(r)-maxProgressMessage:])
	}
	return s
}

// toolError is a tool result the model sees as a failure.
func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// describeExit is "exit code N" or what stands for it.
func describeExit(st runs.Status) string {
	if st.ExitCode == nil {
		return "exit code: none"
	}
	return fmt.Sprintf("exit code: %d", *st.ExitCode)
}
