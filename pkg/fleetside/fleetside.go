// Package fleetside is a host's side of the fleet (docs/fleet.md)
// apart from the host itself: the executor that runs a turn this box took,
// under the channel's mode as the fleet knows it, with the channel's
// committed workspace restored first when this box's copy is another and
// its new workspace packed after; the bound on the turns this box
// publishes per channel (a local turn's 429s); channel modes written to
// the fleet and this box's state kept the fleet's; the fleet metrics. It
// reaches the host only through its Host interface (admission and the
// turn's run) and the channel's workspace only through Workspaces (the
// kind's own, not through the host).
//
// Guarantee: a turn runs only if the fleet had its channel on when the
// turn was taken; before it runs, this box's workspace is the committed
// snapshot the turn was taken with (restored unless this box's copy is
// known to be it); no pack or restore follows a link (pkg/wsarchive); a
// channel never has more than queue.depth of this box's turns waiting to
// be published; a mode change reaches the fleet before this box's state.
package fleetside

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetconn"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetmetrics"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetworkspace"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/wsarchive"
)

// Connect dials the fleet with the fleet.* keys.
func Connect(_ context.Context, f config.Fleet, log *slog.Logger) (*nats.Conn, error) {
	return fleetconn.Connect(fleetconn.Options{
		URL: f.URL, Name: f.Box, CAFile: f.TLS.CA, CertFile: f.TLS.Cert, KeyFile: f.TLS.Key, NkeySeedFile: f.NkeySeedFile, Logger: log,
	})
}

// Layout is the layout every box agrees on (fleet.partitions, fleet.replicas).
func Layout(f config.Fleet) fleet.Layout {
	return fleet.Layout{Partitions: f.Partitions, Replicas: f.Replicas}
}

// Host is what the fleet side needs of its host.
type Host interface {
	// Accepting is false once the host stops.
	Accepting() bool
	// Slot waits for the channel's queue slot on this box.
	Slot(ctx context.Context, channel string) (release func(), err error)
	// Run runs the turn as a sealed turn here: fleet.ErrElsewhere when
	// the host stops, a *fleet.TurnError for a kind the reply carries.
	Run(ctx context.Context, t fleet.Turn) (ok bool, text string, err error)
}

// Workspaces move a channel's workspace (within Limits) out of and into
// this box: the kind whose turns the fleet runs (the sealed turn), reached
// directly, not through the host.
type Workspaces interface {
	PackWorkspace(channel string, limits wsarchive.Limits) ([]byte, error)
	RestoreWorkspace(channel string, data []byte, limits wsarchive.Limits) error
}

// Limits bound a workspace snapshot (fleet.MaxWorkspaceBytes).
var Limits = wsarchive.Limits{MaxBytes: fleet.MaxWorkspaceBytes, MaxEntries: wsarchive.DefaultLimits.MaxEntries, MaxDepth: wsarchive.DefaultLimits.MaxDepth}

// Options make a Side.
type Options struct {
	Fleet      *fleet.Fleet
	Host       Host
	Workspaces Workspaces
	// Config gives the box (fleet.box, fleet.partitions), the bound of
	// the turns it publishes per channel (queue.depth,
	// queue.maxWaitSeconds) and a turn's deadline; Closed is what a wait
	// ends with when the host stops.
	Config *config.Config
	Closed error
	// State is this box's channel state; ChannelMode tells the host's
	// kinds of a channel's new mode (as a change made here does).
	State       *chanstate.State
	ChannelMode func(channel, mode, profile string)
	Registry    prometheus.Registerer
	Logger      *slog.Logger
	Now         func() time.Time
	NewTurnID   func() string
}

// Side is a host's fleet side.
type Side struct {
	o       Options
	box     string
	queue   *admission.Queue
	copies  fleetworkspace.LocalCopies
	metrics *fleetmetrics.Metrics
}

// New makes the side and registers the fleet metrics.
func New(o Options) *Side {
	return &Side{o: o, box: o.Config.Fleet.Box, queue: admission.New(o.Config.Queue.Depth, 0, o.Closed),
		metrics: fleetmetrics.New(o.Registry, o.Config.Fleet.Partitions)}
}

// TurnSlack covers the engine's own time around a turn (publication,
// failover to another box, commit).
const TurnSlack = time.Minute

// Ask publishes a turn this box admitted and waits for its committed
// reply, once the channel's queue on this box lets it: its turns are
// published one at a time, at most queue.depth waiting
// (admission.ErrQueueFull) and none longer than queue.maxWaitSeconds
// (admission.ErrBusy), so they wait here, as local turns do, not in the
// stream. It returns the turn's id once it was published.
func (s *Side) Ask(ctx context.Context, channel string, speaker fleet.Speaker, text string) (fleet.Reply, string, error) {
	// The turn may wait behind the channel's earlier turns on its owner
	// box; the client's own deadline bounds that wait.
	deadline := s.o.Now().Add(s.o.Config.TurnDeadline() + TurnSlack)
	t := fleet.Turn{ID: s.o.NewTurnID(), Channel: channel, Speaker: speaker, Text: text, From: s.box, DeadlineUnixMs: deadline.UnixMilli()}
	release, err := s.queue.AcquireWithin(ctx, channel, s.o.Config.QueueWait())
	if err != nil {
		if errors.Is(err, admission.ErrQueueFull) || errors.Is(err, admission.ErrBusy) {
			s.o.Logger.Warn("fleet turn refused before publishing: the channel's queue on this box is full", "channel", ids.ChannelTag(channel), "err", err, "queue_depth", s.o.Config.Queue.Depth)
		}
		return fleet.Reply{}, "", err // never published: no turn id, as a local 429
	}
	defer release()
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(TurnSlack))
	defer cancel()
	rep, sub, err := s.o.Fleet.Ask(ctx, t)
	if sub.Seq != 0 {
		s.metrics.Published()
	}
	return rep, t.ID, err
}

// Event is the box's OnEvent: the metrics.
func (s *Side) Event(e fleet.Event) { s.metrics.Event(e) }

// Execute is the box's executor: the turn runs under the channel's mode
// as the fleet knew it when the turn was taken (not under this box's
// state), on the committed workspace, in the channel's queue slot here.
func (s *Side) Execute(ctx context.Context, in fleet.Input) (fleet.Output, error) {
	h, ch := s.o.Host, in.Turn.Channel
	if !h.Accepting() {
		return fleet.Output{}, fleet.ErrElsewhere
	}
	if in.Mode.Mode != fleet.ModeOn {
		return fleet.Output{}, &fleet.TurnError{Kind: fleet.ErrorModeOff, Err: errors.New("the channel is not on in the fleet")}
	}
	release, err := h.Slot(ctx, ch)
	if errors.Is(err, fleet.ErrElsewhere) {
		return fleet.Output{}, err
	} else if err != nil {
		return fleet.Output{}, fmt.Errorf("admission: %w", err)
	}
	defer release()
	if err := s.restore(ctx, in); err != nil {
		return fleet.Output{}, err
	}
	ok, text, err := h.Run(ctx, in.Turn)
	if err != nil {
		return fleet.Output{}, err
	}
	ws, err := s.o.Workspaces.PackWorkspace(ch, Limits)
	if err != nil {
		s.o.Logger.Error("fleet turn failed: its workspace cannot be committed (reset the channel's workspace if it outgrew the bound)", "channel", ids.ChannelTag(ch), "err", err, "max_bytes", Limits.MaxBytes)
		return fleet.Output{}, err
	}
	s.copies.Set(ch, in.NextSnapshot)
	return fleet.Output{OK: ok, Text: text, Workspace: ws}, nil
}

// restore makes the channel's workspace here the committed snapshot when
// this box does not know it is (another box committed since, or this host
// restarted). The turn is about to change it: until its own snapshot is
// packed it is no snapshot. A store that fails returns the turn for
// another delivery; a snapshot its checks refuse fails the turn.
func (s *Side) restore(ctx context.Context, in fleet.Input) error {
	ch := in.Turn.Channel
	current := in.Snapshot == "" || s.copies.Is(ch, in.Snapshot)
	s.copies.Forget(ch)
	if current {
		return nil
	}
	data, err := in.Restore(ctx)
	if err == nil {
		err = s.o.Workspaces.RestoreWorkspace(ch, data, Limits)
	}
	if err != nil {
		s.metrics.Restored("failed")
		s.o.Logger.Error("fleet workspace snapshot not restored", "channel", ids.ChannelTag(ch), "snapshot", in.Snapshot, "bytes", len(data), "err", err)
		if errors.Is(err, wsarchive.ErrInvalid) || errors.Is(err, wsarchive.ErrTooLarge) {
			return err
		}
		return fmt.Errorf("%w: %w", fleet.ErrElsewhere, err)
	}
	s.metrics.Restored("ok")
	return nil
}

// ErrModeWrite is what a mode change the fleet did not take answers.
var ErrModeWrite = errors.New("fleet state write failed")

// ErrModeContended is what a mode change answers when another box changed
// the channel's mode under each of its attempts: nothing was written, and
// the caller may try again (the host answers 409).
var ErrModeContended = errors.New("the channel's mode was being changed elsewhere: nothing changed, try again")

const opTimeout = 10 * time.Second

// SetMode writes a mode change to the fleet (the host writes its own
// state after it): the fleet's value is the channel's and every box's
// state follows it (Follow), this one's too. A nil Side (a box alone)
// writes nothing.
func (s *Side) SetMode(ctx context.Context, channel, mode, profile string) error {
	if s == nil { // not in fleet mode
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := s.o.Fleet.SetMode(ctx, channel, mode, profile, s.box); err != nil {
		if errors.Is(err, fleet.ErrModeContended) {
			s.o.Logger.Warn("channel mode not changed: other boxes changed it under every attempt", "channel", ids.ChannelTag(channel), "err", err)
			return ErrModeContended
		}
		s.o.Logger.Error("channel mode not changed: the fleet (NATS JetStream) failed", "channel", ids.ChannelTag(channel), "err", err)
		return ErrModeWrite
	}
	return nil
}

// Follow brings this box's channels into the fleet (start bounds that),
// then keeps this box's state the fleet's until ctx ends.
func (s *Side) Follow(start, ctx context.Context) error {
	if !hasCap(unix.CAP_DAC_READ_SEARCH) {
		s.o.Logger.Warn("sandbox-host lacks CAP_DAC_READ_SEARCH: in fleet mode it cannot read a guest's workspace after a turn, so sealed turns fail; the fleet drop-in grants it (docs/fleet.md)")
	}
	local := localModes{s}
	if err := s.o.Fleet.SeedModes(start, local, s.box); err != nil {
		return err
	}
	go func() {
		for ctx.Err() == nil {
			if err := s.o.Fleet.FollowModes(ctx, local, s.o.Logger); err != nil {
				s.o.Logger.Error("fleet channel modes not followed: the watch failed; retrying", "err", err)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
			}
		}
	}()
	return nil
}

// localModes is this box's state as fleet.LocalModes.
type localModes struct{ s *Side }

func (l localModes) Channels() []string       { return l.s.o.State.Channels() }
func (l localModes) Mode(ch string) string    { return l.s.o.State.Mode(ch) }
func (l localModes) Profile(ch string) string { return l.s.o.State.Profile(ch) }
func (l localModes) Apply(m fleet.ChannelMode) error {
	var err error
	if m.Mode == fleet.ModeRich {
		err = l.s.o.State.SetRich(m.Channel, m.Profile)
	} else {
		err = l.s.o.State.SetMode(m.Channel, m.Mode)
	}
	if err == nil && l.s.o.ChannelMode != nil {
		l.s.o.ChannelMode(m.Channel, m.Mode, m.Profile)
	}
	return err
}

// OnQueued makes f hear each turn that starts waiting for its channel's
// slot before publishing (admission.Queue.OnQueued): for tests.
func (s *Side) OnQueued(f func(channel string)) { s.queue.OnQueued(f) }

// hasCap reports whether capability c is in this process's effective set
// (/proc/self/status CapEff); unknown counts as present (no false alarm).
func hasCap(c int) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err != nil || mask&(1<<uint(c)) != 0
		}
	}
	return true
}
