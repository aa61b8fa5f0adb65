// Package compactor is the host compactor of a rich channel (DESIGN.md
// section 13, the seed's "Compaction"): given a checked compaction request
// of a bound turn, it decides whether the operator's compactor may run (one
// at a time, sessions.MaxHostCompactions a turn, enough time left), gives it
// the seed's time (the operator's timeout, default the smaller of 120 s and
// a third of the turn, never more than half of what the turn has left),
// checks its answer (shape, engine, no credential reflected) and otherwise
// answers a fallback reason for the worker's own summary. It also counts and
// logs the worker's compaction reports (sessions.MaxReports a turn).
//
// Guarantee: every request ends in a Compaction or a fallback reason; log
// lines carry the trigger, engine, token numbers and the reason, never a
// summary, message or file name. The transport (how the compactor runs:
// exec or http) and the HTTP route are the broker's.
package compactor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

const (
	// MinTime: with less than this to give the compactor, the request
	// falls back at once (no-time).
	MinTime = time.Second
	// grace is how long Compact waits past the compactor's deadline for the
	// runner to return before it answers timeout anyway (the slot stays
	// taken until the runner returns: busy).
	grace = 2 * time.Second
)

// FallbackReflected: the compactor's answer reflects a credential.
const FallbackReflected = "reflected"

// Runner errors that choose a fallback reason; any other error is "error".
var (
	ErrTimeout  = errors.New("compactor timed out")
	ErrTooLarge = errors.New("compactor answer too large")
)

// Turn is what the compactor needs of the bound turn.
type Turn struct {
	ID       string
	Identity policy.Identity
	// Deadline bounds the turn; Length is its whole timeout (the default
	// compactor timeout is a third of it).
	Deadline time.Time
	Length   time.Duration
}

// Runner runs the operator's compactor once: the answer bytes, or an error
// (ErrTimeout, ErrTooLarge or another).
type Runner func(ctx context.Context, input []byte, t Turn) ([]byte, error)

// Compactor is one rich broker's compactor state: the operator's settings,
// the one-at-a-time slot and the current turn's budget.
type Compactor struct {
	cfg       *policy.Compactor // nil: no compactor (reports only)
	run       Runner
	reflected func(v any) bool // whether an answer carries a credential
	log       *slog.Logger
	now       func() time.Time

	running atomic.Bool

	mu     sync.Mutex
	turnID string
	budget *sessions.Budget
}

// New returns the compactor of cfg (nil: none) running through run;
// reflected reports whether a decoded answer carries any credential.
func New(cfg *policy.Compactor, run Runner, reflected func(v any) bool, log *slog.Logger, now func() time.Time) *Compactor {
	if cfg == nil {
		run = nil
	}
	return &Compactor{cfg: cfg, run: run, reflected: reflected, log: log, now: now}
}

// Configured reports whether an operator's compactor can run.
func (c *Compactor) Configured() bool { return c.cfg != nil && c.run != nil }

// Busy reports whether a compactor still runs (its slot is taken).
func (c *Compactor) Busy() bool { return c.running.Load() }

// RequestBytes bounds a compaction request's body.
func (c *Compactor) RequestBytes() int64 { return c.cfg.RequestBytes() }

func (c *Compactor) turnBudget(id string) *sessions.Budget {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget == nil || c.turnID != id {
		c.turnID, c.budget = id, &sessions.Budget{}
	}
	return c.budget
}

func (c *Compactor) engine() string {
	if c.cfg == nil {
		return ""
	}
	return c.cfg.Engine
}

// Call is one request from its arrival: what its log line says.
type Call struct {
	c            *Compactor
	turn         string
	trigger      string
	tokensBefore int
	start        time.Time
	holds        bool // the call holds the one-at-a-time slot
}

// Begin starts a call of turn t (its trigger is unknown until parsed).
func (c *Compactor) Begin(t Turn) *Call {
	return &Call{c: c, turn: t.ID, trigger: "unknown", start: time.Now()}
}

// Fallback logs the call's fallback and returns the answer that says it.
func (k *Call) Fallback(reason string) []byte {
	k.c.log.Warn("compaction falls back to the worker's summary", "turn", k.turn, "trigger", k.trigger, "engine", k.c.engine(),
		"tokens_before", k.tokensBefore, "reason", reason, "latency_ms", time.Since(k.start).Milliseconds())
	out, _ := json.Marshal(sessions.CompactAnswer{Fallback: reason})
	return out
}

// Acquire takes the one-at-a-time slot; false: another compactor still runs.
func (k *Call) Acquire() bool {
	k.holds = k.c.running.CompareAndSwap(false, true)
	return k.holds
}

// Release gives the slot back unless Compact handed it to its runner.
func (k *Call) Release() {
	if k.holds {
		k.c.running.Store(false)
		k.holds = false
	}
}

// ErrEncode: a parsed request could not be encoded again.
var ErrEncode = errors.New("compact request not encodable")

// Compact runs the compactor for req (parsed and checked) of turn t within
// ctx (which ends with the request or the turn's revoke) and returns the
// answer: a Compaction with details.engine set, or a fallback reason. The
// call must hold the slot (Acquire).
func (k *Call) Compact(ctx context.Context, req *sessions.CompactRequest, t Turn) ([]byte, error) {
	c := k.c
	k.trigger, k.tokensBefore = req.Reason, req.TokensBefore
	timeout := c.cfg.Timeout(t.Length)
	if half := t.Deadline.Sub(c.now()) / 2; half < timeout {
		timeout = half
	}
	if timeout < MinTime {
		return k.Fallback(sessions.FallbackNoTime), nil
	}
	if !c.turnBudget(t.ID).TakeRequest() {
		return k.Fallback(sessions.FallbackBudget), nil
	}
	// Re-encoded from what was checked: the compactor never sees bytes the
	// parse did not accept.
	input, err := json.Marshal(req)
	if err != nil {
		return nil, ErrEncode
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	k.holds = false // the runner's goroutine releases the slot
	go func() {
		out, err := c.run(rctx, input, t)
		cancel()
		// Free before the answer is handed over: the worker's next request
		// follows the answer and must not find this call still running.
		c.running.Store(false)
		done <- result{out, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-rctx.Done():
		select {
		case res = <-done:
		case <-time.After(grace):
			// It ignores its signal: answer now, keep the slot taken.
			return k.Fallback(sessions.FallbackTimeout), nil
		}
	}
	if res.err != nil {
		switch {
		case errors.Is(res.err, ErrTimeout), errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
			return k.Fallback(sessions.FallbackTimeout), nil
		case errors.Is(res.err, ErrTooLarge):
			return k.Fallback(sessions.FallbackShape), nil
		}
		return k.Fallback(sessions.FallbackError), nil
	}
	comp, err := sessions.ParseCompaction(res.out, req)
	switch {
	case err != nil:
		return k.Fallback(sessions.FallbackShape), nil
	case comp == nil:
		return k.Fallback(sessions.FallbackUndefined), nil
	}
	var v any
	if json.Unmarshal(res.out, &v) != nil || c.reflected(v) {
		return k.Fallback(FallbackReflected), nil
	}
	if comp.Details == nil {
		comp.Details = map[string]json.RawMessage{}
	}
	engine, _ := json.Marshal(c.cfg.Engine)
	comp.Details["engine"] = engine
	out, err := json.Marshal(sessions.CompactAnswer{Compaction: comp})
	if err != nil {
		return k.Fallback(sessions.FallbackShape), nil
	}
	attrs := []any{"turn", k.turn, "trigger", k.trigger, "engine", c.cfg.Engine, "tokens_before", k.tokensBefore,
		"latency_ms", time.Since(k.start).Milliseconds()}
	if comp.EstimatedTokensAfter != nil {
		attrs = append(attrs, "tokens_after_estimate", *comp.EstimatedTokensAfter)
	}
	c.log.Info("compaction by the host compactor", attrs...)
	return out, nil
}

// Report counts and logs one worker report of turn t; false: the turn's
// sessions.MaxReports are spent (nothing logged).
func (c *Compactor) Report(rep *sessions.Report, t Turn) bool {
	if !c.turnBudget(t.ID).TakeReport() {
		return false
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
	return true
}
