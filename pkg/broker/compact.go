package broker

// The host compactor of a rich channel broker (DESIGN.md section 13, the
// seed's "Compaction"):
//
//   - POST /compact (only with policy.Rich.Compactor): the body is a
//     sessions.CompactRequest of at most the compactor's maxRequestBytes.
//     The broker runs the operator's compactor, exec (argv, the request on
//     stdin, the answer on stdout, its process group killed at its
//     timeout: hosttool.Exec) or http (a POST of the request to its fixed
//     URL through an upstream client that refuses redirects), and answers a
//     sessions.CompactAnswer: the Compaction with details.engine set to
//     the operator's engine, or a fallback reason for the worker's own
//     summary (undefined, error, shape, timeout, too-large, budget, busy,
//     no-time, reflected). Its time is the operator's timeout (default the
//     smaller of 120 s and a third of the turn) and never more than half
//     of what the turn has left, so the worker's own summary keeps time.
//     A turn asks at most sessions.MaxHostCompactions times; while a
//     compactor still runs, a new request falls back (busy).
//   - POST /compact/report: the worker's report of a compaction (its own
//     or the host's) for the broker's log; sessions.MaxReports a turn.
//
// Log lines carry the trigger, engine, token numbers and the fallback
// reason, never a summary, message or file name.

import (
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

	"github.com/roundtable-sandbox/sandbox/pkg/broker/hosttool"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// Routes of the compactor.
const (
	RouteCompact       = "/compact"
	RouteCompactReport = "/compact/report"
)

// Bounds of the compactor routes.
const (
	// MaxReportBytes bounds a report body.
	MaxReportBytes = 4 << 10
	// MinCompactorTime: with less than this to give the compactor, the
	// request falls back at once (no-time).
	MinCompactorTime = time.Second
	// compactorGrace is how long the route waits past the compactor's
	// deadline for the runner to return before it answers timeout anyway
	// (the runner's slot stays taken until it does: busy).
	compactorGrace = 2 * time.Second
)

// FallbackReflected: the compactor's answer reflects a credential.
const FallbackReflected = "reflected"

// CompactTurn is what the compactor routes need of the bound turn.
type CompactTurn struct {
	ID       string
	Identity policy.Identity
	// Deadline bounds the turn; Length is its whole timeout (the default
	// compactor timeout is a third of it).
	Deadline time.Time
	Length   time.Duration
}

// compactRunner runs the operator's compactor once: the answer bytes, or
// an error of hosttool's categories or ErrUpstream/ErrUpstreamTime.
type compactRunner func(ctx context.Context, input []byte, t CompactTurn) ([]byte, error)

// compactor is a rich broker's compactor state: the operator's settings,
// the one-at-a-time slot and the current turn's budget.
type compactor struct {
	cfg     *policy.Compactor // nil: no compactor (reports only)
	run     compactRunner
	secrets func() []credential.Secret // every credential an answer must not reflect
	log     *slog.Logger
	now     func() time.Time

	running atomic.Bool

	mu     sync.Mutex
	turnID string
	budget *sessions.Budget
}

// newCompactor builds the compactor of a rich policy. creds loads the http
// compactor's bearer (read per call, so rotation works); secrets lists
// every credential an answer must not reflect.
func newCompactor(cfg *policy.Compactor, creds Credentials, secrets func() []credential.Secret, log *slog.Logger, now func() time.Time) *compactor {
	c := &compactor{cfg: cfg, secrets: secrets, log: log, now: now}
	if cfg == nil {
		return c
	}
	switch cfg.Kind {
	case policy.CompactorExec:
		argv := cfg.Argv
		c.run = func(ctx context.Context, input []byte, t CompactTurn) ([]byte, error) {
			env := []string{"PATH=" + hosttool.ExecPath, "SANDBOX_TURN_ID=" + t.ID, "SANDBOX_CHANNEL=" + t.Identity.Channel}
			return hosttool.Exec(ctx, argv, env, input, sessions.MaxAnswerBytes)
		}
	case policy.CompactorHTTP:
		client := newUpstreamClient(policy.MaxCompactorTimeoutSeconds * time.Second)
		c.run = func(ctx context.Context, input []byte, t CompactTurn) ([]byte, error) {
			bearer := ""
			if cfg.Credential != "" {
				s, err := creds.Load(cfg.Credential)
				if err != nil || s.Empty() {
					return nil, fmt.Errorf("broker: compactor credential unavailable: %w", hosttool.ErrFailed)
				}
				bearer = s.Reveal()
			}
			id := hosttool.Identity{TurnID: t.ID, Identity: t.Identity}
			return hosttool.HTTP(ctx, client, cfg.URL, id, bearer, input, sessions.MaxAnswerBytes)
		}
	}
	return c
}

// turnBudget is the budget of turn id, new when the turn changes.
func (c *compactor) turnBudget(id string) *sessions.Budget {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget == nil || c.turnID != id {
		c.turnID, c.budget = id, &sessions.Budget{}
	}
	return c.budget
}

// compactLog is one compaction line's attributes: names and numbers only.
type compactLog struct {
	turn, trigger, reason string
	tokensBefore          int
	tokensAfter           *int
	start                 time.Time
}

func (c *compactor) logFallback(l compactLog) {
	attrs := []any{"turn", l.turn, "trigger", l.trigger, "engine", c.engine(), "tokens_before", l.tokensBefore,
		"reason", l.reason, "latency_ms", time.Since(l.start).Milliseconds()}
	c.log.Warn("compaction falls back to the worker's summary", attrs...)
}

func (c *compactor) engine() string {
	if c.cfg == nil {
		return ""
	}
	return c.cfg.Engine
}

func fallback(reason string) (int, []byte, error) {
	out, _ := json.Marshal(sessions.CompactAnswer{Fallback: reason})
	return http.StatusOK, out, nil
}

// compact serves POST /compact for the bound turn t; ctx ends with the
// request or the turn's revoke.
func (c *compactor) compact(ctx context.Context, r *http.Request, t CompactTurn) (int, []byte, error) {
	if c.cfg == nil || c.run == nil {
		return 0, nil, refused("no compactor configured", ErrNotFound)
	}
	if err := checkHeaders(r); err != nil {
		return 0, nil, err
	}
	l := compactLog{turn: t.ID, trigger: "unknown", start: time.Now()}
	fall := func(reason string) (int, []byte, error) {
		l.reason = reason
		c.logFallback(l)
		return fallback(reason)
	}
	// Refusals that need no body come first: the body is not read.
	if r.ContentLength > c.cfg.RequestBytes() {
		return fall(sessions.FallbackTooLarge)
	}
	if !c.running.CompareAndSwap(false, true) {
		return fall(sessions.FallbackBusy)
	}
	handedOff := false
	defer func() {
		if !handedOff {
			c.running.Store(false)
		}
	}()
	body, err := readExact(r, c.cfg.RequestBytes())
	if err != nil {
		return 0, nil, err
	}
	req, err := sessions.ParseCompactRequest(body)
	if err != nil {
		return 0, nil, refused("compact request out of shape", ErrRefused)
	}
	l.trigger, l.tokensBefore = req.Reason, req.TokensBefore
	timeout := c.cfg.Timeout(t.Length)
	if half := t.Deadline.Sub(c.now()) / 2; half < timeout {
		timeout = half
	}
	if timeout < MinCompactorTime {
		return fall(sessions.FallbackNoTime)
	}
	if !c.turnBudget(t.ID).TakeRequest() {
		return fall(sessions.FallbackBudget)
	}
	// Re-encoded from what was checked: the compactor never sees bytes the
	// parse did not accept.
	input, err := json.Marshal(req)
	if err != nil {
		return 0, nil, refused("compact request not encodable", ErrRefused)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	handedOff = true
	go func() {
		defer c.running.Store(false)
		defer cancel()
		out, err := c.run(rctx, input, t)
		done <- result{out, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-rctx.Done():
		select {
		case res = <-done:
		case <-time.After(compactorGrace):
			// It ignores its signal: answer now, keep the slot taken.
			return fall(sessions.FallbackTimeout)
		}
	}
	if res.err != nil {
		switch {
		case errors.Is(res.err, hosttool.ErrTimeout), errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			return fall(sessions.FallbackTimeout)
		case errors.Is(res.err, hosttool.ErrTooLarge):
			return fall(sessions.FallbackShape)
		}
		return fall(sessions.FallbackError)
	}
	comp, err := sessions.ParseCompaction(res.out, req)
	switch {
	case err != nil:
		return fall(sessions.FallbackShape)
	case comp == nil:
		return fall(sessions.FallbackUndefined)
	}
	var v any
	if json.Unmarshal(res.out, &v) != nil || credential.Reflected(v, c.secrets()...) {
		return fall(FallbackReflected)
	}
	if comp.Details == nil {
		comp.Details = map[string]json.RawMessage{}
	}
	engine, _ := json.Marshal(c.cfg.Engine)
	comp.Details["engine"] = engine
	out, err := json.Marshal(sessions.CompactAnswer{Compaction: comp})
	if err != nil {
		return fall(sessions.FallbackShape)
	}
	l.tokensAfter = comp.EstimatedTokensAfter
	attrs := []any{"turn", l.turn, "trigger", l.trigger, "engine", c.cfg.Engine, "tokens_before", l.tokensBefore,
		"latency_ms", time.Since(l.start).Milliseconds()}
	if l.tokensAfter != nil {
		attrs = append(attrs, "tokens_after_estimate", *l.tokensAfter)
	}
	c.log.Info("compaction by the host compactor", attrs...)
	return http.StatusOK, out, nil
}

// readExact reads a body of exactly its Content-Length, at most max bytes.
func readExact(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, refused("body over the limit", ErrTooLarge)
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, refused("body unreadable", ErrRefused)
	}
	return body, nil
}

// report serves POST /compact/report: one log line per report, at most
// sessions.MaxReports a turn.
func (c *compactor) report(r *http.Request, t CompactTurn) (int, []byte, error) {
	if err := checkHeaders(r); err != nil {
		return 0, nil, err
	}
	body, err := readExact(r, MaxReportBytes)
	if err != nil {
		return 0, nil, err
	}
	rep, err := sessions.ParseReport(body)
	if err != nil {
		return 0, nil, refused("compaction report out of shape", ErrRefused)
	}
	if !c.turnBudget(t.ID).TakeReport() {
		return 0, nil, refused(fmt.Sprintf("more than %d compaction reports this turn", sessions.MaxReports), ErrCallLimit)
	}
	attrs := []any{"turn", t.ID, "trigger", rep.Trigger, "engine", rep.Engine, "tokens_before", rep.TokensBefore,
		"tokens_after", rep.TokensAfter, "context_after", rep.ContextAfter, "next_compaction_at", rep.NextCompactionAt}
	if rep.Fallback != "" {
		attrs = append(attrs, "fallback", rep.Fallback)
	}
	if rep.Event == sessions.EventFailed {
		c.log.Warn("compaction failed (worker report)", attrs...)
	} else {
		c.log.Info("conversation compacted (worker report)", attrs...)
	}
	return http.StatusOK, []byte(`{}`), nil
}

// compactState is the rich broker's compactor state, made on first use.
func (b *Broker) compactState() *compactor {
	s := b.rich
	s.compactOnce.Do(func() {
		var cfg *policy.Compactor
		if b.pol.Rich != nil {
			cfg = b.pol.Rich.Compactor
		}
		secrets := func() []credential.Secret {
			out := b.allSecrets(nil)
			for _, n := range []string{b.pol.Rich.Credential, compactorCredential(cfg)} {
				if n == "" {
					continue
				}
				if sec, err := b.creds.Load(n); err == nil {
					out = append(out, sec)
				}
			}
			return out
		}
		s.compact = newCompactor(cfg, b.creds, secrets, b.log.With("route", RouteCompact), b.now)
	})
	return s.compact
}

func compactorCredential(c *policy.Compactor) string {
	if c == nil {
		return ""
	}
	return c.Credential
}

// compactTurn is the bound turn of a compactor route, refused outside one.
func (b *Broker) compactTurn() (CompactTurn, context.Context, error) {
	bd, ok := b.richBound()
	if !ok {
		return CompactTurn{}, nil, refused("compaction outside a bound turn", ErrUnauthorized)
	}
	deadline := time.UnixMilli(bd.Bind.Turn.DeadlineUnixMs)
	return CompactTurn{ID: bd.Bind.Turn.ID, Identity: bd.Bind.Identity, Deadline: deadline, Length: deadline.Sub(bd.At)}, bd.Ctx, nil
}

// serveCompact is POST /compact of a rich broker (serveRich).
func (b *Broker) serveCompact(_ http.ResponseWriter, r *http.Request) (int, []byte, error) {
	c := b.compactState()
	if c.cfg == nil {
		return 0, nil, refused("no compactor configured", ErrNotFound)
	}
	t, turnCtx, err := b.compactTurn()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(turnCtx, cancel) // the compactor ends with the turn's revoke
	defer stop()
	return c.compact(ctx, r, t)
}

// serveCompactReport is POST /compact/report of a rich broker (serveRich).
func (b *Broker) serveCompactReport(_ http.ResponseWriter, r *http.Request) (int, []byte, error) {
	t, _, err := b.compactTurn()
	if err != nil {
		return 0, nil, err
	}
	return b.compactState().report(r, t)
}
