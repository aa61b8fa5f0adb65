package host

import (
	"context"

	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// Code runs (DESIGN.md section 12) are the coderun kind; the host admits
// them, gives them a queue slot, lists them and answers their API.

// ErrRunsDisabled is coderun.ErrRunsDisabled.
var ErrRunsDisabled = coderun.ErrRunsDisabled

// ErrorDockerWentAway is a run's error when the Docker daemon stopped
// answering during the run (coderun.ErrorDockerWentAway).
const ErrorDockerWentAway = coderun.ErrorDockerWentAway

// StartRun admits a run for owner (the caller's uid) and drives it in the
// background; the answer is its status at once.
func (h *Host) StartRun(p runs.Params, owner int) (runs.Status, error) {
	return h.coderun.Start(p, owner)
}

// kindHost is what the host offers every kind: admission under its lock,
// a queue slot, its stop, guest uids. No kind sees Host.
type kindHost struct{ h *Host }

func (k kindHost) Admit(create func() error) (func(), error) {
	h := k.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return nil, ErrShuttingDown
	}
	if err := create(); err != nil {
		return nil, err
	}
	h.turns.Add(1)
	return h.turns.Done, nil
}

func (k kindHost) Slot(ctx context.Context, key string) (func(), error) {
	return k.h.queue.acquire(ctx, key)
}

func (k kindHost) Stopped() context.Context { return k.h.stopCtx }

func (k kindHost) ChannelOn(channel string) error {
	if k.h.state.Mode(channel) != ModeOn {
		return ErrModeOff
	}
	return nil
}

func (k kindHost) GuestFor(channel, workspace string) (int, error) {
	return k.h.guestFor(channel, workspace)
}

func (k kindHost) Accepting() bool { return k.h.accepting() }

func (k kindHost) Waiting(channel string) int { return k.h.queue.waitingFor(channel) }

func (k kindHost) Queued() int { w, _ := k.h.queue.totals(); return w }

func (k kindHost) SpareSlot(ctx context.Context) (func(), error) { return k.h.queue.spare(ctx) }

func (k kindHost) GuestUID(key string) (int, error) {
	return k.h.state.GuestUID(key, k.h.cfg.Guests, -1)
}

// RunStatus is one run's status (any owner: callers check access).
func (h *Host) RunStatus(id string) (runs.Status, error) {
	r, err := h.runs.Get(id)
	if err != nil {
		return runs.Status{}, err
	}
	return r.Status(), nil
}

// ApproveRun approves network for a run awaiting it, as uid (an admin:
// callers check the role).
func (h *Host) ApproveRun(id string, uid int) error {
	r, err := h.runs.Get(id)
	if err != nil {
		return err
	}
	return r.Approve(uid)
}

// CancelRun cancels a run (callers check access).
func (h *Host) CancelRun(id string) error {
	r, err := h.runs.Get(id)
	if err != nil {
		return err
	}
	return r.Cancel()
}
