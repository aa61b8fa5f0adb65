package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
)

// Turn phases (sandbox.Phase*), under the names the host's callers use.
const (
	PhasePrepare   = sandbox.PhasePrepare
	PhaseUnitStart = sandbox.PhaseUnitStart
	PhaseCreate    = sandbox.PhaseCreate
	PhaseStdinGate = sandbox.PhaseStdinGate
	PhaseRun       = sandbox.PhaseRun
	PhaseRemove    = sandbox.PhaseRemove
	PhaseUnitStop  = sandbox.PhaseUnitStop
	PhaseFiles     = sandbox.PhaseFiles
)

// TurnInput is an admitted request.
type TurnInput struct {
	Channel     string
	SpeakerID   string
	SpeakerName string
	PrincipalID string
	Text        string
	// Attachments are a rich turn's files (the API refuses them on a
	// sealed channel).
	Attachments []richproto.Attachment
	// OnReply, when set, receives the reply of a run that succeeded, in
	// RunTurn's goroutine, before cleanup starts; RunTurn returns only after
	// cleanup, so the caller keeps the channel's queue slot (and the host
	// its turn count) until then. Failed runs (deadline, cancel, worker
	// failure) never call it: their callers answer after cleanup, as before.
	// Trade-off: once OnReply ran, a cleanup failure can no longer change
	// that answer; RunTurn still logs it with what to inspect, counts it in
	// sandbox_cleanup_failures_total and returns ErrCleanup.
	OnReply func(reply *protocol.Reply, turnID string)
	// OnFiles, when set, receives a rich turn's reply files (bytes the
	// broker and the host validated; never a path) just before OnReply.
	OnFiles func(files []richproto.File)
}

// RunTurn runs one admitted turn of a channel in sandbox mode to the end
// (the caller holds the channel's queue slot). ctx is the caller's: its
// end cancels the turn.
func (h *Host) RunTurn(ctx context.Context, in TurnInput) (*protocol.Reply, string, error) {
	return h.runTurn(ctx, ModeOn, in)
}

// RunRichTurn runs one admitted turn of a rich channel (the caller holds
// the channel's queue slot).
func (h *Host) RunRichTurn(ctx context.Context, in TurnInput) (*protocol.Reply, string, error) {
	return h.runTurn(ctx, ModeRich, in)
}

// runTurn runs one admitted turn of a channel in mode on the kind that
// runs that mode's turns: the host admits it (the channel's one running
// turn, listed and cancellable, fresh start), the kind runs it to the end
// of its cleanup, and the host classifies, counts and answers it.
func (h *Host) runTurn(ctx context.Context, mode string, in TurnInput) (*protocol.Reply, string, error) {
	start := h.opts.Now()
	tk, ok := h.turnKinds[mode]
	if !ok {
		return nil, "", ErrModeOff
	}
	profile := h.state.Profile(in.Channel)
	timeout, err := tk.TurnTimeout(profile)
	if err != nil {
		return nil, "", err
	}
	t := &kind.Turn{
		ID: h.opts.NewTurnID(), Channel: in.Channel, Profile: profile,
		Speaker:   protocol.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		Principal: in.PrincipalID, Text: in.Text, Attachments: in.Attachments,
		Deadline: start.Add(timeout),
	}
	ctx, adm, end, err := h.admitTurn(ctx, t.Channel, t.ID, t.Deadline)
	if err != nil {
		return nil, "", err
	}
	defer end()
	t.Reset = adm.reset
	t.Rebind = func(id string) {
		h.mu.Lock()
		adm.active.id = id
		h.mu.Unlock()
	}
	if in.OnReply != nil {
		t.Answer = func(reply *protocol.Reply, id string) {
			h.mu.Lock()
			adm.active.replied = true
			h.mu.Unlock()
			in.OnReply(reply, id)
		}
	}
	o := tk.RunChannelTurn(ctx, t)
	if o.Release != nil {
		defer o.Release() // the files' bytes, once the answer is written
	}
	result, err := resultOf(ctx, o.Reply, o.RunErr, o.CleanupErr)
	if o.RunErr != nil {
		// Details stay here; the caller gets a generic reason.
		o.Log.Warn(o.Failed, append([]any{"result", result, "err", o.RunErr}, o.FailedAttrs...)...)
	}
	h.settleFresh(t.Channel, adm, err == nil && o.Reply.OK)
	took := h.countTurn(result, start)
	if o.Count != nil {
		o.Count(result)
	}
	if o.Phases != nil {
		attrs := append([]slog.Attr{slog.String("result", result), slog.Int64("total_us", took.Microseconds())}, o.Phases...)
		o.Log.LogAttrs(context.Background(), slog.LevelDebug, "turn phases", attrs...)
	}
	if err != nil {
		return nil, o.ID, err
	}
	o.Log.Info("turn done", append([]any{"result", result, "duration_ms", took.Milliseconds()}, o.Done...)...)
	if !o.Answered {
		if in.OnFiles != nil && len(o.Files) > 0 {
			in.OnFiles(o.Files)
		}
		if in.OnReply != nil {
			in.OnReply(o.Reply, o.ID)
		}
	}
	return o.Reply, o.ID, nil
}

// admitted is a channel's one running turn as admitTurn made it.
type admitted struct {
	active   *activeTurn
	reset    bool   // a fresh start was pending: the turn starts without history
	freshGen uint64 // that fresh start's generation
}

// admitTurn makes turn id, ending at deadline, channel's one running
// turn: listed (GET /v1/turns, the channel's status), cancellable by the
// API, ended with ErrShuttingDown when the host stops and counted so a
// shutdown waits for it. The context it returns is the turn's (it ends at
// the deadline too, with errCauseDeadline); end must be called once the
// turn's cleanup is done. Refused once the host stops, or while the
// channel has a running turn (the queue makes that impossible).
func (h *Host) admitTurn(ctx context.Context, channel, id string, deadline time.Time) (context.Context, *admitted, func(), error) {
	ctx, cancel := context.WithCancelCause(ctx)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, deadline, errCauseDeadline)
	h.mu.Lock()
	_, busy := h.active[channel]
	if stopping := h.stopping; stopping || busy {
		h.mu.Unlock()
		cancelDeadline()
		cancel(nil)
		if stopping {
			return nil, nil, nil, ErrShuttingDown
		}
		return nil, nil, nil, fmt.Errorf("channel already has a running turn: %w", ErrTurnFailed)
	}
	adm := &admitted{active: &activeTurn{id: id, channel: channel, deadline: deadline, cancel: cancel}}
	h.active[channel] = adm.active
	adm.freshGen, adm.reset = h.fresh[channel]
	h.turns.Add(1)
	h.mu.Unlock()
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	return ctx, adm, func() {
		stopWatch()
		h.mu.Lock()
		delete(h.active, channel)
		h.mu.Unlock()
		h.turns.Done()
		cancelDeadline()
		cancel(nil)
	}, nil
}

// settleFresh clears channel's pending fresh start once a turn that
// started fresh succeeded, unless another fresh start was asked meanwhile.
func (h *Host) settleFresh(channel string, adm *admitted, ok bool) {
	if !ok || !adm.reset {
		return
	}
	h.mu.Lock()
	if h.fresh[channel] == adm.freshGen {
		delete(h.fresh, channel)
	}
	h.mu.Unlock()
}

// countTurn counts a finished turn by its result and its duration since
// start, and returns that duration.
func (h *Host) countTurn(result string, start time.Time) time.Duration {
	took := time.Since(start)
	h.metrics.turns.WithLabelValues(result).Inc()
	h.metrics.duration.Observe(took.Seconds())
	return took
}

// resultOf classifies a finished turn: a cleanup failure outranks everything,
// then why the turn's context ended.
func resultOf(ctx context.Context, reply *protocol.Reply, runErr, cleanupErr error) (string, error) {
	if cleanupErr != nil {
		return resultCleanup, cleanupErr
	}
	var held *sandbox.HeldError
	if errors.As(runErr, &held) {
		return resultHeld, held
	}
	if runErr == nil {
		if reply.OK {
			return resultOK, nil
		}
		return resultNotOK, nil
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrDeadline):
		return resultDeadline, ErrDeadline
	case errors.Is(cause, ErrCancelled):
		return resultCancelled, ErrCancelled
	case errors.Is(cause, ErrShuttingDown):
		return resultShutdown, ErrShuttingDown
	case cause != nil:
		return resultGone, ErrClientGone
	}
	if ue, ok := unitctl.AsUnitError(runErr); ok {
		return resultUnitFailed, &UnitFailure{Unit: ue}
	}
	return resultFailed, ErrTurnFailed
}

// TurnDirMode is sandbox.TurnDirMode.
const TurnDirMode = sandbox.TurnDirMode

// RemoveAttempts is sandbox.RemoveAttempts.
const RemoveAttempts = sandbox.RemoveAttempts
