package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Repairing a channel's fleet state (docs/fleet.md, *Repairing a
// channel*): what `sandbox-host fleet channel show|drop-snapshot|reset`
// does. Each write is a compare-and-swap on the revision read, so a repair
// never overwrites a commit or a claim made meanwhile (run it again), and
// a box whose turn is under way is fenced by it as by another box's claim.

// ChannelView is a channel's state as stored: its raw value and revision,
// and the decoded state or why it does not decode.
type ChannelView struct {
	Channel  string
	Key      string
	Revision uint64 // 0: no state (the channel never ran a turn)
	Raw      []byte
	State    *ChannelState
	// Invalid says why Raw does not decode ("" when it does).
	Invalid string
}

// ShowChannel reads the channel's state as stored.
func (f *Fleet) ShowChannel(ctx context.Context, channel string) (ChannelView, error) {
	v := ChannelView{Channel: channel, Key: channelKey(channel)}
	e, err := f.channels.Get(ctx, v.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return v, nil
	}
	if err != nil {
		return v, fmt.Errorf("channel %s's state: %w", channel, err)
	}
	v.Revision, v.Raw = e.Revision(), e.Value()
	st, err := decodeState(v.Raw)
	if err == nil && st.Channel != channel {
		err = fmt.Errorf("state names channel %q: %w", st.Channel, ErrInvalid)
	}
	if err != nil {
		v.Invalid = err.Error()
		return v, nil
	}
	v.State = &st
	return v, nil
}

// DropSnapshot removes the channel's committed workspace snapshot (one a
// hostile or broken box committed, one no box can restore): the state
// keeps its generation and last turn, names no snapshot, and the next turn
// on each box starts from that box's own copy. The object is deleted. It
// refuses a state that does not decode (reset it).
func (f *Fleet) DropSnapshot(ctx context.Context, channel string) (ChannelState, error) {
	v, err := f.ShowChannel(ctx, channel)
	if err != nil {
		return ChannelState{}, err
	}
	if v.Revision == 0 {
		return ChannelState{}, fmt.Errorf("channel %s has no fleet state: %w", channel, ErrInvalid)
	}
	if v.State == nil {
		return ChannelState{}, fmt.Errorf("channel %s's state does not decode (%s): reset it with a generation: %w", channel, v.Invalid, ErrInvalid)
	}
	st := *v.State
	name := st.Workspace
	if st.inline() {
		name = "" // in the state: no object
	}
	st.Workspace, st.WorkspaceData = "", nil
	// A claim under way is fenced: its commit expects the revision read.
	st.Owner, st.ClaimTurn, st.ClaimSeq, st.ClaimRuns = "", "", 0, 0
	if _, err := f.putState(ctx, v.Key, st, v.Revision); err != nil {
		return ChannelState{}, fmt.Errorf("channel %s: %w (written meanwhile: run it again)", channel, err)
	}
	if name != "" {
		if err := f.ws.Delete(ctx, name); err != nil {
			// Unreferenced now: the sweep removes it (pkg/fleetworkspace).
			return st, fmt.Errorf("snapshot %s dropped from the state but not deleted (the sweep removes it): %w", name, err)
		}
	}
	return st, nil
}

// ResetChannel replaces the channel's state, decodable or not, with a
// fresh one at generation: no snapshot, no last turn, no claim. Over a
// state that decodes, generation must not be below its own (a reply
// committed at a generation must stay the only one there). Turns already
// committed keep their replies: a redelivery is answered from them.
func (f *Fleet) ResetChannel(ctx context.Context, channel string, generation uint64) (ChannelState, error) {
	v, err := f.ShowChannel(ctx, channel)
	if err != nil {
		return ChannelState{}, err
	}
	if v.State != nil && generation < v.State.Generation {
		return ChannelState{}, fmt.Errorf("--generation %d is below the channel's %d: replies of that generation exist: %w", generation, v.State.Generation, ErrInvalid)
	}
	st := ChannelState{Channel: channel, Generation: generation}
	if _, err := f.putState(ctx, v.Key, st, v.Revision); err != nil {
		return ChannelState{}, fmt.Errorf("channel %s: %w (written meanwhile: run it again)", channel, err)
	}
	return st, nil
}
