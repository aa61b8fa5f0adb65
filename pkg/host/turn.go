package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
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

var (
	errCauseDeadline = fmt.Errorf("deadline: %w", ErrDeadline)
	errCauseCancel   = fmt.Errorf("cancel: %w", ErrCancelled)
)

// RunTurn runs one admitted turn to the end (the caller holds the channel's
// queue slot). ctx is the caller's: its end cancels the turn.
func (h *Host) RunTurn(ctx context.Context, in TurnInput) (*protocol.Reply, string, error) {
	start := h.opts.Now()
	t := &sealedturn.Turn{
		Handle:    sandbox.Handle{ID: h.opts.NewTurnID(), Channel: in.Channel, Tag: ids.ChannelTag(in.Channel), Deadline: start.Add(h.cfg.TurnDeadline())},
		Speaker:   protocol.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		Principal: in.PrincipalID, Text: in.Text,
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, t.Deadline, errCauseDeadline)
	defer cancelDeadline()

	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return nil, "", ErrShuttingDown
	}
	if _, busy := h.active[t.Channel]; busy { // the queue makes this impossible
		h.mu.Unlock()
		return nil, "", fmt.Errorf("channel already has a running turn: %w", ErrTurnFailed)
	}
	active := &activeTurn{id: t.ID, channel: t.Channel, deadline: t.Deadline, cancel: cancel}
	h.active[t.Channel] = active
	freshGen, reset := h.fresh[t.Channel]
	t.Reset = reset
	h.turns.Add(1)
	h.mu.Unlock()
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer func() {
		stopWatch()
		h.mu.Lock()
		delete(h.active, t.Channel)
		h.mu.Unlock()
		h.turns.Done()
	}()
	h.sealed.TakeStandby(ctx, t, func(id string) {
		h.mu.Lock()
		t.ID = id
		active.id = id
		h.mu.Unlock()
	})

	log := h.log.With("turn", t.ID, "channel", t.Tag)
	reply, runErr := h.sealed.Execute(ctx, t)
	if runErr == nil && in.OnReply != nil {
		// The turn stays listed (its container and units still exist, the
		// reaper must keep them) but is no longer cancellable.
		h.mu.Lock()
		active.replied = true
		h.mu.Unlock()
		in.OnReply(reply, t.ID)
	}
	cleanupErr := h.sealed.Cleanup(t, log)
	// The channel's next turn should find a standby: prepared while this
	// one ran, or now, in the background, if it never ran.
	h.sealed.Refill(t)

	result, err := resultOf(ctx, reply, runErr, cleanupErr)
	if runErr != nil {
		// Details stay here; the caller gets a generic reason.
		attrs := []any{"result", result, "err", runErr}
		var exit *sealedturn.ExitError
		if errors.As(runErr, &exit) {
			attrs = append(attrs, "exit_code", exit.Status, "worker_cause", exit.Cause)
		}
		log.Warn("turn failed", attrs...)
	}
	if err == nil && reply.OK && t.Reset {
		h.mu.Lock()
		if h.fresh[t.Channel] == freshGen {
			delete(h.fresh, t.Channel)
		}
		h.mu.Unlock()
	}
	took := time.Since(start)
	h.metrics.turns.WithLabelValues(result).Inc()
	h.metrics.duration.Observe(took.Seconds())
	attrs := append([]slog.Attr{slog.String("result", result), slog.Int64("total_us", took.Microseconds())}, t.Phases()...)
	log.LogAttrs(context.Background(), slog.LevelDebug, "turn phases", attrs...)
	if err != nil {
		return nil, t.ID, err
	}
	log.Info("turn done", "result", result, "duration_ms", took.Milliseconds(), "standby", t.Warm())
	return reply, t.ID, nil
}

// resultOf classifies a finished turn: a cleanup failure outranks everything,
// then why the turn's context ended.
func resultOf(ctx context.Context, reply *protocol.Reply, runErr, cleanupErr error) (string, error) {
	if cleanupErr != nil {
		return resultCleanup, cleanupErr
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
	return resultFailed, ErrTurnFailed
}

// TurnDirMode is sandbox.TurnDirMode.
const TurnDirMode = sandbox.TurnDirMode

// guestFor is the channel's guest uid from the state file. The owner of an
// existing workspace is offered for adoption, so a lost state file does not
// hand a channel's files to a new uid.
func (h *Host) guestFor(channel, workspace string) (int, error) {
	owner := -1
	if st, err := os.Lstat(workspace); err == nil && st.IsDir() {
		if o, ok := sandbox.FileOwner(st); ok {
			owner = o
		}
	}
	uid, err := h.state.GuestUID(channel, h.cfg.Guests, owner)
	if err != nil {
		return 0, err
	}
	if uid == h.opts.UID || uid == h.opts.GID || uid <= 0 { // config and state checks make this unreachable
		return 0, fmt.Errorf("guest uid %d is the host's own or root", uid)
	}
	return uid, nil
}

// RemoveAttempts is sandbox.RemoveAttempts.
const RemoveAttempts = sandbox.RemoveAttempts

// Phases of the warm path (sealedturn), as the host's callers name them.
const (
	PhaseStandbyPrepare = sealedturn.PhaseStandbyPrepare
	PhaseStandbyBind    = sealedturn.PhaseStandbyBind
)
