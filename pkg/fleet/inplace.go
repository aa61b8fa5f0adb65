package fleet

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Writes tried again in place when their answer is lost (docs/fleet.md,
// *Failure model*).
//
// A claim, a commit or a reply sent to a leader behind a cut is never
// answered while the route to it still looks alive: the write may have
// landed or not. Handing the turn back then cost the write's whole
// timeout (10 s) plus the redelivery's delay. Instead each round of the
// write is bounded by writeRound and, unanswered, tried again in place
// against whichever leader the cluster has by then, for up to
// writeBudget (the turn heartbeated meanwhile). This keeps the fence: a
// state write is a compare-and-swap at the revision the take read, which
// can land once only, so a second round either lands (the first did not)
// or is refused; a refusal after an unanswered round is then told apart
// by reading the key: the state exactly as this box wrote it is its own
// write that landed, anything else is another box's take. A reply is
// create-only: a second round refused because the key exists is the
// first one landed (putReply).

// writeRound bounds one round of a claim, commit or reply write: half the
// ack wait, at least a second.
func (b *Box) writeRound() time.Duration { return max(b.opts.AckWait/2, time.Second) }

// writeBudget bounds the rounds of one write: twice the ack wait from the
// first round (10 s by default), the last round included (so at most
// writeBudget + writeRound in all).
func (b *Box) writeBudget() time.Duration { return 2 * b.opts.AckWait }

// putStateInPlace writes the channel's state at revision rev (0: create)
// and returns its new revision; a round refused for want of a leader or
// left unanswered is tried again in place (above). The error is the last
// round's; fenced(err) only when another box's write holds the key.
func (b *Box) putStateInPlace(key string, st ChannelState, rev uint64, log *slog.Logger) (uint64, error) {
	until := time.Now().Add(b.writeBudget())
	uncertain := false // a round was unanswered: it may have landed
	for {
		ctx, cancel := context.WithTimeout(b.ctx, b.writeRound())
		newRev, err := b.f.putState(ctx, key, st, rev)
		if err != nil && fenced(err) && uncertain {
			// Refused at rev: by our own unanswered round that landed,
			// or by another box's take since.
			var ours bool
			newRev, ours, err = b.landedState(ctx, key, st, rev)
			if err == nil && !ours {
				cancel()
				return 0, jetstream.ErrKeyRevisionMismatch
			}
			if err == nil {
				log.Info("fleet write whose answer was lost had landed", "key_revision", newRev)
			}
		}
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			return newRev, nil
		}
		if timedOut && b.ctx.Err() == nil {
			uncertain = true
			err = unanswered(err)
		}
		if !b.retryInPlace(until, err) {
			return 0, err
		}
	}
}

// landedState reads the key after a write at rev was refused: ours says
// the stored state is exactly st as this box encodes it (its own write
// that landed; then rev is the entry's revision). Any other value, or a
// key deleted since, is another box's.
func (b *Box) landedState(ctx context.Context, key string, st ChannelState, rev uint64) (uint64, bool, error) {
	want, err := b.f.encodeState(st)
	if err != nil {
		return 0, false, err
	}
	e, err := b.f.channels.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if e.Revision() <= rev || !bytes.Equal(e.Value(), want) {
		return 0, false, nil
	}
	return e.Revision(), true, nil
}

// publishReplyInPlace stores a committed reply, tried again in place
// (above) when a round is refused for want of a leader or unanswered.
func (b *Box) publishReplyInPlace(r Reply, log *slog.Logger) error {
	until := time.Now().Add(b.writeBudget())
	for {
		ctx, cancel := context.WithTimeout(b.ctx, b.writeRound())
		err := b.publishReply(ctx, r, log)
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			return nil
		}
		if timedOut && b.ctx.Err() == nil {
			err = unanswered(err)
		}
		if !b.retryInPlace(until, err) {
			return err
		}
	}
}
