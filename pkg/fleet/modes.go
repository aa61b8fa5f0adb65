package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// Channel modes as the fleet knows them (the host's own names).
const (
	ModeOn   = "on"
	ModeOff  = "off"
	ModeRich = "rich"
)

// ChannelMode is a channel's mode (and a rich channel's profile) in
// ChannelsBucket, under a key of its own (modeKey) beside the channel's
// turn state (channelKey). Not in the state's value: a turn's claim and
// commit write that value by compare-and-swap at the claim's revision, so a
// mode change there would either be overwritten by a commit carrying the
// state it read, or refuse the running turn's commit and make the turn run
// again. Under its own key a mode change and a commit never write the same
// value: neither is lost, no turn's work is dropped for it. The box taking
// a turn reads the mode (Input.Mode), so a turn taken after a change runs
// (or is refused) under the new mode whichever box made it, and a turn
// taken before it ends as it began, as on one box.
//
// A guest uid does not travel: it is a slot of one box's uid range
// (guests.uidBase, guests.uidCount), given per box to that box's channels;
// another box's number may be a third channel's here. Each box maps the
// channel key, which is what travels, to a uid of its own.
type ChannelMode struct {
	Channel string `json:"channel"`
	Mode    string `json:"mode"`
	Profile string `json:"profile,omitempty"`
	// Version counts the channel's mode changes. Each is written by
	// compare-and-swap on the revision its writer read, so two boxes'
	// changes never take the same version and a box applying the values it
	// sees can ignore an older one.
	Version uint64 `json:"version"`
	// By is the box (fleet.box) that wrote it.
	By string `json:"by,omitempty"`
}

func (m ChannelMode) validate(channel string) error {
	if m.Channel != channel {
		return fmt.Errorf("channel mode names another channel: %w", ErrInvalid)
	}
	switch {
	case (m.Mode == ModeOn || m.Mode == ModeOff) && m.Profile == "":
	case m.Mode == ModeRich && profileNameRe.MatchString(m.Profile):
	default:
		return fmt.Errorf("channel mode %q (profile %d bytes): %w", m.Mode, len(m.Profile), ErrInvalid)
	}
	if m.By != "" && !ValidBox(m.By) { // it reaches log lines: a box name only
		return fmt.Errorf("channel mode writer: %w", ErrInvalid)
	}
	return nil
}

// profileNameRe is a rich profile's name as pkg/config allows it
// (ValidProfileName): what another box wrote is checked before it is
// applied or logged.
var profileNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// modeKey is the channel's mode key in ChannelsBucket (as channelKey).
func modeKey(channel string) string {
	sum := sha256.Sum256([]byte(channel))
	return "m." + hex.EncodeToString(sum[:16])
}

// decodeMode reads a mode value written by some box; channel "" takes the
// one the value names (a watch), checking it against the key.
func decodeMode(key string, data []byte, channel string) (ChannelMode, error) {
	var m ChannelMode
	if len(data) > 4<<10 || json.Unmarshal(data, &m) != nil {
		return ChannelMode{}, fmt.Errorf("channel mode: %w", ErrInvalid)
	}
	if channel == "" {
		if ids.ValidChannel(m.Channel) != nil || modeKey(m.Channel) != key {
			return ChannelMode{}, fmt.Errorf("channel mode under another channel's key: %w", ErrInvalid)
		}
		channel = m.Channel
	}
	return m, m.validate(channel)
}

// Mode is the channel's mode as the fleet knows it and its revision: Mode
// "" and revision 0 when no box ever wrote one.
func (f *Fleet) Mode(ctx context.Context, channel string) (ChannelMode, uint64, error) {
	key := modeKey(channel)
	e, err := f.channels.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ChannelMode{Channel: channel}, 0, nil
	}
	if err != nil {
		return ChannelMode{}, 0, err
	}
	m, err := decodeMode(key, e.Value(), channel)
	return m, e.Revision(), err
}

// maxModeWrites bounds SetMode's compare-and-swap attempts (each refused
// one means another box changed the channel's mode meanwhile).
const maxModeWrites = 8

// ErrModeContended: the channel's mode changed under every one of
// SetMode's attempts (another box, or an operator on another box, writing
// it at the same time); nothing of this call was written.
var ErrModeContended = errors.New("the channel's mode changed while it was written")

// modeBackoff is the most a refused mode write waits, times two per
// refusal, before it reads again: a random part of it, so two boxes
// writing in step fall out of step (without it, a box whose read and write
// straddled the other's every time lost all its attempts: seen in
// TestConcurrentModeChangesNeverShareAVersion on a loaded machine).
const modeBackoff = time.Millisecond

// SetMode makes the channel's mode mode (profile for a rich one), written
// by compare-and-swap on the revision read, so a concurrent change is
// never overwritten unseen: the write is retried on the newer value. An
// unchanged mode is not written. It returns the value in force.
func (f *Fleet) SetMode(ctx context.Context, channel, mode, profile, by string) (ChannelMode, error) {
	return f.writeMode(ctx, channel, mode, profile, by, false)
}

// SeedMode writes the channel's mode only when the fleet has none (a box
// joining brings in the channels it knows; a value already there wins).
// It returns the value in force.
func (f *Fleet) SeedMode(ctx context.Context, channel, mode, profile, by string) (ChannelMode, error) {
	return f.writeMode(ctx, channel, mode, profile, by, true)
}

func (f *Fleet) writeMode(ctx context.Context, channel, mode, profile, by string, seed bool) (ChannelMode, error) {
	if err := ids.ValidChannel(channel); err != nil {
		return ChannelMode{}, err
	}
	want := ChannelMode{Channel: channel, Mode: mode, Profile: profile, By: by}
	if err := want.validate(channel); err != nil {
		return ChannelMode{}, err
	}
	key := modeKey(channel)
	for i := 0; i < maxModeWrites; i++ {
		cur, rev, err := f.Mode(ctx, channel)
		if err != nil && !errors.Is(err, ErrInvalid) { // an invalid value is overwritten
			return ChannelMode{}, err
		}
		if rev != 0 && err == nil && (seed || cur.Mode == mode && cur.Profile == profile) {
			return cur, nil
		}
		want.Version = cur.Version + 1
		data, err := json.Marshal(want)
		if err != nil {
			return ChannelMode{}, err
		}
		if f.beforeModeWrite != nil {
			f.beforeModeWrite()
		}
		if rev == 0 {
			_, err = f.channels.Create(ctx, key, data)
		} else {
			_, err = f.channels.Update(ctx, key, data, rev)
		}
		if err == nil {
			return want, nil
		}
		if !fenced(err) {
			return ChannelMode{}, fmt.Errorf("write channel mode: %w", err)
		}
		if i == maxModeWrites-1 {
			break
		}
		wait := time.NewTimer(rand.N(modeBackoff << i))
		select {
		case <-ctx.Done():
			wait.Stop()
			return ChannelMode{}, ctx.Err()
		case <-wait.C:
		}
	}
	return ChannelMode{}, fmt.Errorf("%w: %d attempts refused, try again", ErrModeContended, maxModeWrites)
}

// WatchModes calls apply with every channel's mode the fleet holds, then
// with each change, in the bucket's order, until ctx ends. A value that
// fails its checks (only a box could have written it) goes to bad and is
// not applied.
func (f *Fleet) WatchModes(ctx context.Context, apply func(ChannelMode), bad func(error)) error {
	w, err := f.channels.Watch(ctx, "m.*")
	if err != nil {
		return fmt.Errorf("watch channel modes: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil { // the watch closes with ctx too
					return nil
				}
				return fmt.Errorf("channel mode watch closed")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // nil marks the end of the current values
			}
			m, err := decodeMode(e.Key(), e.Value(), "")
			if err != nil {
				bad(err)
				continue
			}
			apply(m)
		case <-ctx.Done():
			return nil
		}
	}
}

// LocalModes is a box's own channel state, which FollowModes keeps equal
// to the fleet's.
type LocalModes interface {
	// Channels lists the channels the box knows.
	Channels() []string
	Mode(channel string) string
	Profile(channel string) string
	// Apply makes the local state the fleet's value (and lets go of what
	// the box kept for the channel's old mode).
	Apply(m ChannelMode) error
}

// SeedModes brings the box's channels into the fleet (SeedMode: a value
// the fleet holds already wins); a box calls it as it joins, before
// FollowModes.
func (f *Fleet) SeedModes(ctx context.Context, local LocalModes, box string) error {
	for _, ch := range local.Channels() {
		sctx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err := f.SeedMode(sctx, ch, local.Mode(ch), local.Profile(ch), box)
		cancel()
		if err != nil {
			return fmt.Errorf("bring channel modes into the fleet: %w", err)
		}
	}
	return nil
}

// FollowModes applies every mode the fleet holds, then each change, to
// local until ctx ends (nil) or the watch fails: the box admits and lists
// channels as the fleet knows them.
func (f *Fleet) FollowModes(ctx context.Context, local LocalModes, log *slog.Logger) error {
	return f.WatchModes(ctx, func(m ChannelMode) {
		if local.Mode(m.Channel) == m.Mode && local.Profile(m.Channel) == m.Profile {
			return
		}
		if err := local.Apply(m); err != nil {
			log.Error("fleet channel mode not applied on this box: its state refused it", "channel", ids.ChannelTag(m.Channel), "mode", m.Mode, "by", m.By, "err", err)
			return
		}
		log.Info("channel mode changed by the fleet", "channel", ids.ChannelTag(m.Channel), "mode", m.Mode, "profile", m.Profile, "by", m.By, "version", m.Version)
	}, func(err error) {
		log.Warn("fleet channel mode ignored: a box wrote an invalid value", "err", err)
	})
}
