package fleet

import (
	"bytes"
	"context"
	"encoding/json"
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
// write that landed; anything else leaves it uncertain (another box's
// take, maybe on top of ours: errWriteUncertain), and the turn is handed
// back with nothing deleted. A reply is
// create-only: a second round refused because the key exists is the
// first one landed (putReply).

// errWriteUncertain: a state write's round went unanswered, a later round
// was refused, and the key now holds another box's state: the unanswered
// round may have landed before it. Never fenced(): what the write named is
// kept, and the turn is handed back.
var errWriteUncertain = errors.New("fleet state write unanswered, then overtaken: it may have landed")

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
// round's; fenced(err) only when another box's write held the key before
// any round of ours could have landed.
func (b *Box) putStateInPlace(key string, st ChannelState, rev uint64, log *slog.Logger) (uint64, error) {
	until := time.Now().Add(b.writeBudget())
	uncertain := false // a round was unanswered: it may have landed
	for {
		ctx, cancel := context.WithTimeout(b.ctx, b.writeRound())
		newRev, err := b.f.putState(ctx, key, st, rev)
		if err != nil && fenced(err) && uncertain {
			// Refused at rev: by our own unanswered round that landed,
			// or by another box's take since.
			var v landing
			newRev, v, err = b.landedState(ctx, key, st, rev)
			if err == nil && v == writeOvertaken {
				cancel()
				return 0, jetstream.ErrKeyRevisionMismatch
			}
			if err == nil && v == writeUnknown {
				// Not ours now does not say ours never landed: the bucket
				// keeps one revision a key, and another box's claim may
				// sit on top of our commit. Uncertain, not fenced: the
				// caller keeps what the write named (its upload) and
				// hands the turn back; the redelivery's take reads what
				// holds.
				cancel()
				return 0, errWriteUncertain
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

// landing is what a refused write's key says of an unanswered round.
type landing int

const (
	// writeLanded: the key holds exactly what this box wrote.
	writeLanded landing = iota
	// writeOvertaken: the key holds another box's claim of the same turn with
	// the turn not committed: that claim's compare-and-swap needed the
	// revision ours needed, so ours never landed (a take of a committed
	// turn never claims it, and a state's LastSeq only grows).
	writeOvertaken
	// writeUnknown: anything else (a later turn's claim, a commit, a repair,
	// the key gone): ours may have landed beneath it.
	writeUnknown
)

// landedState reads the key after a write of st at rev was refused
// following an unanswered round; on landed it returns the entry's
// revision.
func (b *Box) landedState(ctx context.Context, key string, st ChannelState, rev uint64) (uint64, landing, error) {
	want, err := b.f.encodeState(st)
	if err != nil {
		return 0, writeUnknown, err
	}
	e, err := b.f.channels.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, writeUnknown, nil
	}
	if err != nil {
		return 0, writeUnknown, err
	}
	if e.Revision() > rev && bytes.Equal(e.Value(), want) {
		return e.Revision(), writeLanded, nil
	}
	turn, seq := st.ClaimTurn, st.ClaimSeq
	if st.LastSeq > 0 && st.LastTurn != "" && st.ClaimTurn == "" {
		turn, seq = st.LastTurn, st.LastSeq
	}
	var cur ChannelState
	if json.Unmarshal(e.Value(), &cur) == nil && turn != "" && cur.ClaimTurn == turn && cur.ClaimSeq == seq &&
		cur.Owner != b.opts.Name && cur.LastSeq < seq {
		return 0, writeOvertaken, nil
	}
	return 0, writeUnknown, nil
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
