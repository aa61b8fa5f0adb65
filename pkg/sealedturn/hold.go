package sealedturn

import (
	"log/slog"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// A channel whose turn's cleanup failed is held (docs/sealed-turns.md,
// "When the cleanup fails"): the reply may already have left, but the
// turn's container or broker units may still exist, and a channel's next
// turn never starts beside its predecessor's. The hold lasts until a
// retry of that cleanup succeeds: the channel's next turn retries it first
// (each retry bounded as every cleanup is), runs when it succeeds (the
// reaper or an operator removed what the log named; a removal of what is
// gone is a success), and is refused at once with a sandbox.HeldError
// when it fails again, rather than waiting: nothing bounds when an
// operator comes, and a waiting turn would hold its queue slot and its
// client for that long. A host restart clears every hold: its startup
// reap removes what a stopped host left.

// hold records t, whose cleanup failed, as its channel's hold.
func (k *Kind) hold(t *Turn, log *slog.Logger) {
	k.heldMu.Lock()
	k.held[t.Channel] = t
	k.heldMu.Unlock()
	log.Error("channel held: its turn's cleanup failed; the channel's next turn retries it first and is refused while it fails",
		"held_turn", t.ID)
}

// Held reports whether channel is held.
func (k *Kind) Held(channel string) bool {
	k.heldMu.Lock()
	defer k.heldMu.Unlock()
	return k.held[channel] != nil
}

// retryHeld retries the cleanup of channel's held turn, if any: nil when
// the channel is (now) free, a HeldError when the retry failed. The
// channel's queue slot is the caller's, so no other turn of the channel
// runs meanwhile.
func (k *Kind) retryHeld(channel string) error {
	k.heldMu.Lock()
	t := k.held[channel]
	k.heldMu.Unlock()
	if t == nil {
		return nil
	}
	log := k.log.With("turn", t.ID, "channel", ids.ChannelTag(channel))
	if err := k.Cleanup(t, log); err != nil {
		log.Error("channel still held: the retried cleanup failed again; its turn is refused", "err", err)
		return &sandbox.HeldError{Channel: channel, TurnID: t.ID}
	}
	k.heldMu.Lock()
	if k.held[channel] == t {
		delete(k.held, channel)
	}
	k.heldMu.Unlock()
	log.Info("channel no longer held: the retried cleanup succeeded")
	return nil
}
