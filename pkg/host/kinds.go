package host

import (
	"context"
	"fmt"
	"os"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

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
	return k.h.queue.Acquire(ctx, key)
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

func (k kindHost) Waiting(channel string) int { return k.h.queue.WaitingFor(channel) }

func (k kindHost) Queued() int { w, _ := k.h.queue.Totals(); return w }

func (k kindHost) SpareSlot(ctx context.Context) (func(), error) {
	return admission.SpareStart(ctx, k.h.queue, k.h.starts)
}

func (k kindHost) StartSlot(ctx context.Context) (func(), error) { return k.h.starts.Start(ctx) }

func (k kindHost) GuestUID(key string) (int, error) {
	return k.h.state.GuestUID(key, k.h.cfg.Guests, -1)
}

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
