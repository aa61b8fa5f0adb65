package host

// Rich channels (DESIGN.md section 13): a channel in mode rich runs its
// turns on a long-lived channel session: one container of the worker image
// running `sandbox-worker rich` (the seed's limits, a turn's confinement,
// the channel workspace read-write at /workspace and the session's broker
// directory read-only at /run/broker) and one channel broker
// (sandbox-broker@<session id>, the per-turn template with a 32-hex session
// id and a rich policy). Both start when the channel's turn needs them and
// stop after rich.idleSeconds without turns, on channel off or another
// mode or profile, on fresh start, when the session's lifetime cannot hold
// the next turn, after any failed turn, and at host stop.
//
// The host hands each turn over the broker's control route (a connection
// only the host's uid may use, policy.RouteControlTurn); the broker binds
// the turn's identity for exactly as long as that request lasts. A session
// is listed in GET /v1/turns (its id, its lifetime as the deadline) from
// before anything of it is written until everything of it is removed, so
// sandbox-reaper keeps a live session's objects and removes a dead
// host's; its deadline label and policy deadline are the lifetime, which
// the broker unit's RuntimeMaxSec=1260s outlasts.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// RichSessionLifetime bounds one channel session: its broker policy's
// deadline and its container's deadline label. It stays under the broker
// unit's RuntimeMaxSec=1260s; a turn that would not end within what is left
// of it starts a new session (the conversation continues from the
// workspace's session files).
const RichSessionLifetime = 1200 * time.Second

// Bounds of a rich session.
const (
	// richMaxStdout: the rich worker writes nothing to stdout (its logs go
	// to stderr, forwarded to journald); more than this kills it.
	richMaxStdout = 64 << 10
	// richStatusPoll is the start gate's poll interval.
	richStatusPoll = 50 * time.Millisecond
	// richTurnMargin: a session must outlive a new turn's deadline by this.
	richTurnMargin = 5 * time.Second
)

// ErrRichUnavailable: the channel is in mode rich but rich channels are
// disabled or its profile is not configured (any more).
var ErrRichUnavailable = errors.New("rich channel unavailable: rich.enabled is off or the channel's profile is not configured")

// errWorkerExited: the session's container exited during a turn.
var errWorkerExited = errors.New("rich worker exited mid-turn")

// ErrRichWorkerIncompatible: the channel's worker lacks the capabilities
// (privateTo, readerRecords) a private tool exchange or its retained
// private history needs; the turn fails and the log names the image.
var ErrRichWorkerIncompatible = errors.New("rich worker lacks the privateTo and readerRecords capabilities")

// Session states shown in channel status.
const (
	RichStarting = "starting"
	RichReady    = "ready"
	RichBusy     = "busy"
	RichStopping = "stopping"
)

// RichControl is the host's side of a rich channel broker's control path
// (richcontrol.go speaks HTTP on the session's broker socket).
type RichControl interface {
	// Status asks whether the worker announced itself and polls.
	Status(ctx context.Context, socket string) (policy.ControlStatus, error)
	// Turn binds b, hands its turn to the worker and returns the worker's
	// reply packet; the broker revokes the bind when this returns.
	Turn(ctx context.Context, socket string, b policy.Bind) (*richproto.Result, error)
}

// richSession is one channel session.
type richSession struct {
	id, channel, tag, profile string
	container, containerID    string
	dir, policyPath, socket   string
	workspace                 string
	guest                     int
	started, deadline         time.Time

	// The following are guarded by richSessions.mu.
	state    string
	busy     bool
	retire   string // stop when the running turn settles (mode or profile changed)
	broken   bool
	turns    int
	lastUsed time.Time
	idle     *time.Timer

	cancelRun context.CancelFunc // ends the container's Run (kills it)
	exited    chan struct{}      // closed when Run returned
	stopOnce  sync.Once
	stopErr   error
	stopped   chan struct{}

	madeDir, madePolicy, unitTried, createTried bool
}

func (s *richSession) hasExited() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// richSessions holds the live sessions by channel and those being
// removed (still listed for the reaper).
type richSessions struct {
	mu        sync.Mutex
	byChannel map[string]*richSession
	removing  map[string]*richSession
}

// RichStatus is a rich channel's session as channel status shows it.
type RichStatus struct {
	Session      string `json:"session,omitempty"`
	Container    string `json:"container,omitempty"`
	State        string `json:"state"` // none, starting, ready, busy, stopping
	StartedUnix  int64  `json:"startedUnix,omitempty"`
	IdleStopUnix int64  `json:"idleStopUnix,omitempty"`
	Turns        int    `json:"turns,omitempty"`
}

func (h *Host) richStatus(channel string) *RichStatus {
	h.rich.mu.Lock()
	defer h.rich.mu.Unlock()
	s := h.rich.byChannel[channel]
	if s == nil {
		for _, r := range h.rich.removing {
			if r.channel == channel {
				return &RichStatus{Session: r.id, Container: r.container, State: RichStopping}
			}
		}
		return &RichStatus{State: "none"}
	}
	st := &RichStatus{Session: s.id, Container: s.container, State: s.state, StartedUnix: s.started.Unix(), Turns: s.turns}
	if s.state == RichReady && !s.busy {
		st.IdleStopUnix = h.idleStopAt(s).Unix()
	}
	return st
}

// idleStopAt: rich.idleSeconds after the last turn, or before the
// session's lifetime ends.
func (h *Host) idleStopAt(s *richSession) time.Time {
	last := s.lastUsed
	if last.IsZero() {
		last = s.started
	}
	idle := h.cfg.RichIdle()
	if h.opts.RichIdle > 0 {
		idle = h.opts.RichIdle
	}
	return minTime(last.Add(idle), s.deadline.Add(-richTurnMargin))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// richListed are the sessions for GET /v1/turns.
func (h *Host) richListed() []ActiveTurn {
	h.rich.mu.Lock()
	defer h.rich.mu.Unlock()
	out := make([]ActiveTurn, 0, len(h.rich.byChannel)+len(h.rich.removing))
	add := func(s *richSession) {
		out = append(out, ActiveTurn{ID: s.id, ChannelTag: s.tag, DeadlineUnix: s.deadline.Unix(), DeadlineUnixMs: s.deadline.UnixMilli(), Rich: true})
	}
	for _, s := range h.rich.byChannel {
		add(s)
	}
	for _, s := range h.rich.removing {
		add(s)
	}
	return out
}

// RunRichTurn runs one admitted turn of a rich channel (the caller holds
// the channel's queue slot): it takes the channel's session (starting one
// when there is none or it cannot serve), hands the turn over the control
// route and returns the worker's reply. A failed turn stops the session, so
// the next turn starts with a new broker and a new container.
func (h *Host) RunRichTurn(ctx context.Context, in TurnInput) (*protocol.Reply, string, error) {
	start := h.opts.Now()
	prof, ok := h.cfg.Profile(h.state.Profile(in.Channel))
	if !ok || !h.cfg.Rich.Enabled {
		return nil, "", ErrRichUnavailable
	}
	id := h.opts.NewTurnID()
	tag := ids.ChannelTag(in.Channel)
	deadline := start.Add(h.cfg.RichTurnTimeout())
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, deadline, errCauseDeadline)
	defer cancelDeadline()

	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return nil, "", ErrShuttingDown
	}
	if _, busy := h.active[in.Channel]; busy {
		h.mu.Unlock()
		return nil, "", fmt.Errorf("channel already has a running turn: %w", ErrTurnFailed)
	}
	active := &activeTurn{id: id, channel: in.Channel, deadline: deadline, cancel: cancel}
	h.active[in.Channel] = active
	freshGen, reset := h.fresh[in.Channel]
	h.turns.Add(1)
	h.mu.Unlock()
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer func() {
		stopWatch()
		h.mu.Lock()
		delete(h.active, in.Channel)
		h.mu.Unlock()
		h.turns.Done()
	}()
	log := h.log.With("turn", id, "channel", tag, "profile", prof.Name)

	var reply *protocol.Reply
	var files []richproto.File
	s, warm, runErr := h.richSessionFor(ctx, in.Channel, prof, deadline, reset)
	if runErr == nil {
		bind := h.richBind(id, in, prof, deadline, reset)
		// A worker that dies mid-turn (its memory limit, say) fails the
		// turn now instead of at its deadline.
		callCtx, cancelCall := context.WithCancelCause(ctx)
		go func() {
			select {
			case <-s.exited:
				cancelCall(errWorkerExited)
			case <-callCtx.Done():
			}
		}()
		var res *richproto.Result
		res, runErr = h.richControl.Turn(callCtx, s.socket, bind)
		if runErr != nil && errors.Is(context.Cause(callCtx), errWorkerExited) && ctx.Err() == nil {
			runErr = errWorkerExited
		}
		if errors.Is(runErr, ErrRichWorkerIncompatible) {
			// The seed: name the exact configured image; the same tag is
			// no proof of a rebuild.
			runErr = fmt.Errorf("%w: rebuild the worker image %q with this release's sandbox-worker", runErr, h.cfg.Image)
		}
		cancelCall(nil)
		if runErr == nil && res.TurnID != id {
			runErr = errors.New("reply packet of another turn")
		}
		if runErr == nil {
			reply = &protocol.Reply{OK: res.OK, Text: res.Text}
			if !res.OK && richproto.ValidCause(res.Cause) {
				reply.Cause = res.Cause
			}
			if len(res.Files) > 0 && res.OK {
				// Validated by the broker and again by the control client
				// (richproto bounds); delivered as bytes, never a path.
				files = res.Files
				log.Info("reply files", "files", len(res.Files), "bytes", filesBytes(res.Files))
			}
		}
		h.richRelease(s, runErr == nil)
	}
	var cleanupErr error
	if runErr != nil && s != nil {
		// The session may hold the lost turn (a worker still on it, a broker
		// gone): the next turn starts from nothing.
		cleanupErr = h.richStop(s, "turn failed")
	}
	result, err := resultOf(ctx, reply, runErr, cleanupErr)
	if runErr != nil {
		log.Warn("rich turn failed", "result", result, "err", runErr)
	}
	if err == nil && reply.OK && reset {
		h.mu.Lock()
		if h.fresh[in.Channel] == freshGen {
			delete(h.fresh, in.Channel)
		}
		h.mu.Unlock()
	}
	took := time.Since(start)
	h.metrics.turns.WithLabelValues(result).Inc()
	h.metrics.duration.Observe(took.Seconds())
	h.metrics.richTurns.WithLabelValues(result, strconv.FormatBool(warm)).Inc()
	if err != nil {
		return nil, id, err
	}
	log.Info("turn done", "result", result, "duration_ms", took.Milliseconds(), "rich", true, "warm", warm)
	if in.OnFiles != nil && len(files) > 0 {
		in.OnFiles(files)
	}
	if in.OnReply != nil {
		in.OnReply(reply, id)
	}
	return reply, id, nil
}

// richBind is the turn as the broker binds it: identity from the admitted
// request only; the profile's model, thinking level and tools.
func (h *Host) richBind(id string, in TurnInput, prof config.Profile, deadline time.Time, fresh bool) policy.Bind {
	t := richproto.Turn{
		ID: id, Text: in.Text, Speaker: richproto.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		Thinking: prof.Thinking, DeadlineUnixMs: deadline.UnixMilli(), Fresh: fresh, Model: prof.Model,
		MaxOutputTokens: prof.MaxOutputTokens, // the worker leaves the answer room beside its thinking
		Attachments:     in.Attachments,
	}
	for _, ts := range h.tools {
		for _, name := range prof.Tools {
			if ts.Name == name {
				t.Tools = append(t.Tools, richproto.ToolSpec{Name: ts.Name, Description: ts.Description, Parameters: ts.Parameters})
			}
		}
	}
	for _, ms := range h.mcpSpecs {
		for _, name := range prof.MCP {
			if ms.Server == name {
				spec := richproto.MCPServerSpec{Server: ms.Server}
				for _, ts := range ms.Tools {
					spec.Tools = append(spec.Tools, richproto.ToolSpec{Name: ts.Name, Description: ts.Description, Parameters: ts.Parameters})
				}
				t.MCP = append(t.MCP, spec)
			}
		}
	}
	return policy.Bind{Turn: t, Identity: policy.Identity{
		Channel: in.Channel, ChannelTag: ids.ChannelTag(in.Channel),
		SpeakerID: in.SpeakerID, SpeakerName: in.SpeakerName, PrincipalID: in.PrincipalID,
	}}
}

// richSessionFor takes the channel's session for a turn ending at
// deadline, stopping one that cannot serve it and starting a new one.
// warm reports a session that was already running.
func (h *Host) richSessionFor(ctx context.Context, channel string, prof config.Profile, deadline time.Time, fresh bool) (*richSession, bool, error) {
	h.rich.mu.Lock()
	s := h.rich.byChannel[channel]
	reason := ""
	if s != nil {
		switch {
		case s.busy:
			reason = "busy" // the queue makes this impossible
		case fresh:
			reason = "fresh start"
		case s.broken:
			reason = "broken"
		case s.hasExited():
			reason = "worker exited"
		case s.profile != prof.Name:
			reason = "profile changed"
		case s.deadline.Before(deadline.Add(richTurnMargin)):
			reason = "session lifetime"
		}
		if reason == "" {
			s.busy = true
			s.state = RichBusy
			if s.idle != nil {
				s.idle.Stop()
			}
			h.rich.mu.Unlock()
			return s, true, nil
		}
	}
	h.rich.mu.Unlock()
	if reason == "busy" {
		return nil, false, fmt.Errorf("rich session busy: %w", ErrTurnFailed)
	}
	if s != nil {
		// A fresh start stops the container before the worker archives
		// the session files (Turn.Fresh), so nothing still writes them.
		if err := h.richStop(s, reason); err != nil {
			return nil, false, err
		}
	}
	s, err := h.richStart(ctx, channel, prof)
	return s, false, err
}

// richRelease ends a turn's hold on its session and arms the idle stop.
func (h *Host) richRelease(s *richSession, ok bool) {
	h.rich.mu.Lock()
	defer h.rich.mu.Unlock()
	s.busy = false
	s.turns++
	s.lastUsed = h.opts.Now()
	if !ok {
		s.broken = true
		return
	}
	if s.retire != "" {
		reason := s.retire
		go func() { _ = h.richStop(s, reason) }()
		return
	}
	s.state = RichReady
	h.armIdleLocked(s)
}

func (h *Host) armIdleLocked(s *richSession) {
	if s.idle != nil {
		s.idle.Stop()
	}
	wait := h.idleStopAt(s).Sub(h.opts.Now())
	s.idle = time.AfterFunc(max(wait, 0), func() {
		// Taken off its channel under the lock that turns take sessions
		// under, so no turn can take it while it is being stopped.
		h.rich.mu.Lock()
		idle := h.rich.byChannel[s.channel] == s && !s.busy
		if idle {
			delete(h.rich.byChannel, s.channel)
			h.rich.removing[s.id] = s
			s.state = RichStopping
		}
		h.rich.mu.Unlock()
		if idle {
			_ = h.richStop(s, "idle")
		}
	})
}

// richStart makes a session: listed first, then the policy, the broker
// socket unit, the container; it returns once the worker announced itself
// and polls, or fails (removing everything) after rich.startTimeoutSeconds.
func (h *Host) richStart(ctx context.Context, channel string, prof config.Profile) (*richSession, error) {
	c := h.cfg
	now := h.opts.Now()
	s := &richSession{
		id: h.opts.NewTurnID(), channel: channel, tag: ids.ChannelTag(channel), profile: prof.Name,
		started: now, deadline: now.Add(RichSessionLifetime), state: RichStarting, busy: true,
		stopped: make(chan struct{}),
	}
	var err error
	if s.container, err = ids.ContainerName(channel, s.id); err != nil {
		return nil, err
	}
	if s.workspace, err = layout.WorkspaceDir(c.WorkspaceRoot, channel); err != nil {
		return nil, err
	}
	if s.dir, err = layout.TurnDir(c.RunRoot, s.id); err != nil {
		return nil, err
	}
	if s.policyPath, err = layout.PolicyFile(c.PolicyDir, s.id); err != nil {
		return nil, err
	}
	if s.socket, err = layout.BrokerSocket(c.RunRoot, s.id); err != nil {
		return nil, err
	}
	if len(s.socket) > layout.MaxSocketPath {
		return nil, fmt.Errorf("broker socket path is %d characters, over %d", len(s.socket), layout.MaxSocketPath)
	}
	if s.guest, err = h.guestFor(channel, s.workspace); err != nil {
		return nil, fmt.Errorf("guest uid: %w", err)
	}
	if err := h.ensureWorkspace(s.workspace, s.guest, s.tag); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	pol, err := h.richPolicy(s, prof).Marshal()
	if err != nil {
		return nil, fmt.Errorf("rich policy: %w", err)
	}
	// Listed before anything of it is written (the reaper's contract).
	h.rich.mu.Lock()
	if h.rich.byChannel[channel] != nil {
		h.rich.mu.Unlock()
		return nil, fmt.Errorf("channel already has a rich session: %w", ErrTurnFailed)
	}
	h.rich.byChannel[channel] = s
	h.rich.mu.Unlock()
	h.metrics.richStarts.Inc()
	log := h.log.With("session", s.id, "channel", s.tag, "profile", prof.Name)

	fail := func(err error) (*richSession, error) {
		if serr := h.richStop(s, "start failed"); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	t := &turn{Handle: sandbox.Handle{ID: s.id, Dir: s.dir, Policy: s.policyPath}}
	if err := h.makeTurnDir(t); err != nil {
		s.madeDir = t.MadeDir
		return fail(err)
	}
	s.madeDir = true
	s.madePolicy = true
	if err := h.writePolicyFile(t, pol); err != nil {
		return fail(err)
	}
	s.unitTried = true
	if err := h.opts.Units.StartBroker(ctx, s.id); err != nil {
		return fail(fmt.Errorf("broker units: %w", err))
	}
	spec := ContainerSpec{
		Name: s.container, Image: c.Image, UID: s.guest, GID: s.guest,
		WorkspaceDir: s.workspace, TurnDir: s.dir,
		MemoryMB: c.Rich.MemoryMB, CPUs: c.Rich.CPUs, Pids: c.Rich.Pids, TmpfsMB: c.Rich.TmpfsMB,
		Runtime: c.Runtime, LogTag: ids.LogTag(channel), Rich: true, SkillsDir: c.SkillsDir(prof),
		Labels: map[string]string{
			layout.LabelInstallation: c.Installation,
			layout.LabelTurn:         s.id,
			layout.LabelChannel:      s.tag,
			layout.LabelDeadline:     strconv.FormatInt(s.deadline.Unix(), 10),
		},
	}
	s.createTried = true
	if s.containerID, err = h.opts.Containers.Create(ctx, spec); err != nil {
		return fail(fmt.Errorf("container create: %w", err))
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	s.cancelRun = cancelRun
	s.exited = make(chan struct{})
	go func() {
		defer close(s.exited)
		sink := h.opts.WorkerLogs.Turn(s.tag, s.id, s.container)
		res, err := h.opts.Containers.Run(runCtx, s.containerID, nil, richMaxStdout, nil, sink)
		h.life.CloseSink(&sandbox.Handle{ID: s.id, Tag: s.tag}, sink)
		if runCtx.Err() == nil {
			log.Warn("rich worker exited", "exit_code", res.ExitCode, "stdout_over_bound", res.Truncated,
				"stderr_over_bound", res.StderrRefused, "err", err)
		}
	}()

	// The start gate: the worker announced itself and waits in its poll.
	gate, cancelGate := context.WithTimeout(ctx, c.RichStartTimeout())
	defer cancelGate()
	tick := time.NewTicker(richStatusPoll)
	defer tick.Stop()
	for {
		st, err := h.richControl.Status(gate, s.socket)
		if err == nil && st.Ready && st.Polling {
			break
		}
		select {
		case <-gate.Done():
			if ctx.Err() != nil {
				return fail(context.Cause(ctx))
			}
			return fail(fmt.Errorf("rich worker not ready within rich.startTimeoutSeconds (%v; last status error: %v)", c.RichStartTimeout(), err))
		case <-s.exited:
			return fail(errors.New("rich worker exited before it was ready"))
		case <-tick.C:
		}
	}
	log.Info("rich session started", "container", s.container, "took_ms", time.Since(now).Milliseconds())
	return s, nil
}

// richPolicy is the session's broker policy: the channel without a
// speaker (bound per turn), the lifetime as its deadline, the profile's
// tools and MCP servers, the rich section.
func (h *Host) richPolicy(s *richSession, prof config.Profile) *policy.Policy {
	p := policy.Policy{Version: policy.Version, TurnID: s.id,
		Identity:       policy.Identity{Channel: s.channel, ChannelTag: s.tag},
		DeadlineUnixMs: s.deadline.UnixMilli(), Limits: h.pol.Limits}
	p.Limits.MaxCalls = h.cfg.Rich.MaxCalls
	// The broker fetches attachments through the operator's egress.allow.
	p.EgressAllow = append([]string(nil), h.pol.EgressAllow...)
	for _, t := range h.pol.Tools {
		for _, name := range prof.Tools {
			if t.Name == name {
				p.Tools = append(p.Tools, t)
			}
		}
	}
	for _, m := range h.pol.MCP {
		for _, name := range prof.MCP {
			if m.Name == name {
				p.MCP = append(p.MCP, m)
			}
		}
	}
	r := h.cfg.RichPolicy(prof, s.channel)
	p.Rich = &r
	return &p
}

// richStop removes a session once (later calls wait for the first): it is
// taken off its channel, the container killed and removed, the broker units
// stopped, the directory and policy file removed; it stays listed until
// all of that is done.
func (h *Host) richStop(s *richSession, reason string) error {
	s.stopOnce.Do(func() {
		defer close(s.stopped)
		h.rich.mu.Lock()
		if h.rich.byChannel[s.channel] == s {
			delete(h.rich.byChannel, s.channel)
		}
		h.rich.removing[s.id] = s
		s.state = RichStopping
		if s.idle != nil {
			s.idle.Stop()
		}
		turns := s.turns
		h.rich.mu.Unlock()
		log := h.log.With("session", s.id, "channel", s.tag)
		t := &turn{Handle: sandbox.Handle{ID: s.id, Container: s.container, ContainerID: s.containerID, Dir: s.dir, Policy: s.policyPath,
			MadeDir: s.madeDir, MadePolicy: s.madePolicy, UnitTried: s.unitTried, CreateTried: s.createTried, Quiet: true}}
		if s.cancelRun != nil {
			s.cancelRun()
		}
		s.stopErr = h.cleanup(t, log)
		if s.exited != nil {
			select {
			case <-s.exited:
			case <-time.After(h.opts.RemoveTimeout):
				log.Warn("rich container's run did not end after removal")
			}
		}
		h.rich.mu.Lock()
		delete(h.rich.removing, s.id)
		h.rich.mu.Unlock()
		h.metrics.richStops.WithLabelValues(reason).Inc()
		log.Info("rich session stopped", "reason", reason, "turns", turns,
			"lived_ms", h.opts.Now().Sub(s.started).Milliseconds(), "cleanup_ok", s.stopErr == nil)
	})
	<-s.stopped
	return s.stopErr
}

// richStopChannel stops the channel's session, if any (channel off,
// another mode or profile).
func (h *Host) richStopChannel(channel, reason string) {
	h.rich.mu.Lock()
	s := h.rich.byChannel[channel]
	h.rich.mu.Unlock()
	if s != nil {
		_ = h.richStop(s, reason)
	}
}

// richStopIdle stops the channel's session when it is not running a turn
// and the channel's mode or profile no longer matches it; a busy session is
// stopped by its channel's next turn (profile changed) or stays until its
// turn settles and idles out.
func (h *Host) richStopIdle(channel, mode, profile string) {
	h.rich.mu.Lock()
	s := h.rich.byChannel[channel]
	if s == nil || (mode == ModeRich && s.profile == profile) {
		h.rich.mu.Unlock()
		return
	}
	reason := "channel " + mode
	if mode == ModeRich {
		reason = "profile changed"
	}
	if s.busy {
		s.retire = reason // stopped as its turn settles
		h.rich.mu.Unlock()
		return
	}
	delete(h.rich.byChannel, channel) // no turn takes it from here
	h.rich.removing[s.id] = s
	s.state = RichStopping
	h.rich.mu.Unlock()
	_ = h.richStop(s, reason)
}

// richStopAll stops every session (host stop), in parallel.
func (h *Host) richStopAll(reason string) {
	h.rich.mu.Lock()
	all := make([]*richSession, 0, len(h.rich.byChannel))
	for _, s := range h.rich.byChannel {
		all = append(all, s)
	}
	h.rich.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); _ = h.richStop(s, reason) }()
	}
	wg.Wait()
}

// richSessionCount is the number of live sessions (metrics).
func (h *Host) richSessionCount() float64 {
	h.rich.mu.Lock()
	defer h.rich.mu.Unlock()
	return float64(len(h.rich.byChannel))
}

// logRichConfig reports the rich setup once at start.
func (h *Host) logRichConfig() {
	if h.cfg.Rich.Enabled {
		h.log.Info("rich channels enabled", "profiles", len(h.cfg.Profiles), "idle_s", h.cfg.Rich.IdleSeconds,
			"session_lifetime_s", int(RichSessionLifetime.Seconds()))
	}
}

func filesBytes(files []richproto.File) int {
	n := 0
	for _, f := range files {
		n += len(f.Data)
	}
	return n
}
