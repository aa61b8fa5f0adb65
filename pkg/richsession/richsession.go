// Package richsession is the rich-channel kind (DESIGN.md section 13): a
// channel in mode rich runs its turns on a long-lived channel session: one
// container of the worker image running `sandbox-worker rich` (the seed's
// limits, a turn's confinement, the channel workspace read-write at
// /workspace and the session's broker directory read-only at /run/broker)
// and one channel broker (sandbox-broker@<session id>, the per-turn
// template with a 32-hex session id and a rich policy). Both start when the
// channel's turn needs them and stop after rich.idleSeconds without turns,
// on channel off or another mode or profile, on fresh start, when the
// session's lifetime cannot hold the next turn, after any failed turn, and
// at host stop. It drives the lifecycle, reaches the host only through its
// narrow Host interface and imports no other kind.
//
// The host hands each turn over the broker's control route (a connection
// only the host's uid may use, policy.RouteControlTurn); the broker binds
// the turn's identity for exactly as long as that request lasts. A session
// is listed in GET /v1/turns (its id, its lifetime as the deadline) from
// before anything of it is written until everything of it is removed, so
// sandbox-reaper keeps a live session's objects and removes a dead
// host's; its deadline label and policy deadline are the lifetime, which
// the broker unit's RuntimeMaxSec=1260s outlasts.
//
// Guarantee: a session serves one turn at a time, only turns of its own
// channel and profile within its lifetime; a failed turn never leaves its
// session to the next one; a session is listed from before anything of it
// exists until after its removal.
package richsession

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Host is what a session needs of the host that made the kind.
type Host interface {
	// GuestFor is the channel's guest uid (the owner of an existing
	// workspace offered for adoption).
	GuestFor(channel, workspace string) (int, error)
}

// Options make a Kind.
type Options struct {
	Config    *config.Config
	Lifecycle *sandbox.Lifecycle
	Host      Host
	Logger    *slog.Logger
	Now       func() time.Time
	NewID     func() string
	// Tools and MCP are the public tool specs; Policy the host's policy
	// template (tools, MCP servers, limits, egress.allow).
	Tools  []protocol.ToolSpec
	MCP    []protocol.MCPServerSpec
	Policy policy.Policy
	// Control reaches the brokers' control routes; HTTPControl when nil.
	Control Control
	// Idle replaces rich.idleSeconds (tests); 0 = the configuration's.
	Idle time.Duration
	// Registry receives the rich session metrics.
	Registry prometheus.Registerer
	// ReplyBudget bounds the reply packet bytes held at once;
	// DefaultReplyBudget when 0. BudgetWait (tests) hears of a packet of
	// n bytes that waits for it.
	ReplyBudget int64
	BudgetWait  func(n int64)
}

// Input is a rich turn as admitted: identity from the request only.
type Input struct {
	Channel, SpeakerID, SpeakerName, PrincipalID, Text string
	Attachments                                        []richproto.Attachment
}

// Outcome is a finished turn: the reply and its files, whether the
// session was already running, the turn's error and the error of a
// session removal after a failed turn. Release gives back the reply
// budget the files hold: call it once the answer is written.
type Outcome struct {
	Reply              *protocol.Reply
	Files              []richproto.File
	Warm               bool
	RunErr, CleanupErr error
	Release            func()
}

// Kind is the host's rich channel sessions.
type Kind struct {
	cfg          *config.Config
	life         *sandbox.Lifecycle
	host         Host
	log          *slog.Logger
	now          func() time.Time
	newID        func() string
	tools        []protocol.ToolSpec
	mcpSpecs     []protocol.MCPServerSpec
	pol          policy.Policy
	control      Control
	idleOverride time.Duration
	replies      *replyBudget

	turns  *prometheus.CounterVec
	starts prometheus.Counter
	stops  *prometheus.CounterVec

	mu        sync.Mutex
	byChannel map[string]*richSession
	removing  map[string]*richSession
}

// New makes the kind.
func New(o Options) *Kind {
	k := &Kind{cfg: o.Config, life: o.Lifecycle, host: o.Host, log: o.Logger, now: o.Now, newID: o.NewID,
		tools: o.Tools, mcpSpecs: o.MCP, pol: o.Policy, control: o.Control, idleOverride: o.Idle,
		byChannel: map[string]*richSession{}, removing: map[string]*richSession{},
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_rich_turns_total", Help: "Turns of rich channels, by result and whether the channel's session was already running (warm).",
		}, []string{"result", "warm"}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_rich_session_starts_total", Help: "Rich channel sessions (container and broker) started.",
		}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_rich_session_stops_total", Help: "Rich channel sessions stopped, by reason (idle, channel off, fresh start, turn failed, host stop, ...).",
		}, []string{"reason"}),
	}
	if k.control == nil {
		k.control = HTTPControl{}
	}
	if o.ReplyBudget == 0 {
		o.ReplyBudget = DefaultReplyBudget
	}
	k.replies = newReplyBudget(o.ReplyBudget, o.Logger, o.BudgetWait)
	o.Registry.MustRegister(k.turns, k.starts, k.stops, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sandbox_rich_sessions", Help: "Rich channel sessions running now (one container and one broker each).",
	}, k.sessionCount))
	return k
}

// CountTurn counts a finished rich turn by its result and warmth.
func (k *Kind) CountTurn(result string, warm bool) {
	k.turns.WithLabelValues(result, strconv.FormatBool(warm)).Inc()
}

// SessionLifetime bounds one channel session: its broker policy's
// deadline and its container's deadline label. It stays under the broker
// unit's RuntimeMaxSec=1260s; a turn that would not end within what is left
// of it starts a new session (the conversation continues from the
// workspace's session files).
const SessionLifetime = 1200 * time.Second

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

// disabled or its profile is not configured (any more).
// errWorkerExited: the session's container exited during a turn.
var errWorkerExited = errors.New("rich worker exited mid-turn")

// ErrWorkerIncompatible: the channel's worker lacks the capabilities
// (privateTo, readerRecords) a private tool exchange or its retained
// private history needs; the turn fails and the log names the image.
var ErrWorkerIncompatible = errors.New("rich worker lacks the privateTo and readerRecords capabilities")

// Session states shown in channel status.
const (
	StateStarting = "starting"
	StateReady    = "ready"
	StateBusy     = "busy"
	StateStopping = "stopping"
)

// Control is the host's side of a rich channel broker's control path
// (HTTPControl speaks HTTP on the session's broker socket).
type Control interface {
	// Status asks whether the worker announced itself and polls.
	Status(ctx context.Context, socket string) (policy.ControlStatus, error)
	// Turn binds b, hands its turn to the worker and returns the worker's
	// reply packet; the broker revokes the bind when this returns. Before
	// it reads a packet's body it calls reserve (when not nil) with the
	// packet's length, and fails with reserve's error.
	Turn(ctx context.Context, socket string, b policy.Bind, reserve ReserveFunc) (*richproto.Result, error)
}

// ReserveFunc takes n bytes of the host's reply budget for a packet about
// to be read, waiting while other packets hold it, until ctx ends. An
// alias, so a Control needs no name of this package (pkg/sandboxtest's
// fake, shared with the host's tests).
type ReserveFunc = func(ctx context.Context, n int64) error

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

// Status is a rich channel's session as channel status shows it.
type Status = kind.SessionStatus

func (k *Kind) Status(channel string) *Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.byChannel[channel]
	if s == nil {
		for _, r := range k.removing {
			if r.channel == channel {
				return &apiwire.RichSession{Session: r.id, Container: r.container, State: StateStopping}
			}
		}
		return &apiwire.RichSession{State: "none"}
	}
	st := &apiwire.RichSession{Session: s.id, Container: s.container, State: s.state, StartedUnix: s.started.Unix(), Turns: s.turns}
	if s.state == StateReady && !s.busy {
		st.IdleStopUnix = k.idleStopAt(s).Unix()
	}
	return st
}

// idleStopAt: rich.idleSeconds after the last turn, or before the
// session's lifetime ends.
func (k *Kind) idleStopAt(s *richSession) time.Time {
	last := s.lastUsed
	if last.IsZero() {
		last = s.started
	}
	idle := k.cfg.RichIdle()
	if k.idleOverride > 0 {
		idle = k.idleOverride
	}
	return minTime(last.Add(idle), s.deadline.Add(-richTurnMargin))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Listed are the sessions for GET /v1/turns.
func (k *Kind) Listed() []apiwire.Turn {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]apiwire.Turn, 0, len(k.byChannel)+len(k.removing))
	add := func(s *richSession) {
		out = append(out, apiwire.Turn{ID: s.id, ChannelTag: s.tag, DeadlineUnix: s.deadline.Unix(), DeadlineUnixMs: s.deadline.UnixMilli(), Rich: true})
	}
	for _, s := range k.byChannel {
		add(s)
	}
	for _, s := range k.removing {
		add(s)
	}
	return out
}

// Turn runs one turn (id, ending at deadline) on the channel's session:
// it takes the session (starting one when there is none or it cannot
// serve), hands the turn over the control route and returns the worker's
// reply. A failed turn stops the session, so the next turn starts with a
// new broker and a new container; its removal's error is CleanupErr.
func (k *Kind) Turn(ctx context.Context, id string, in Input, prof config.Profile, deadline time.Time, reset bool, log *slog.Logger) Outcome {
	var reply *protocol.Reply
	var files []richproto.File
	// held: the reply budget this turn's packet took; its files' bytes are
	// kept until the answer is written (Release), the rest given back as
	// soon as the packet is decoded.
	var held int64
	reserve := func(ctx context.Context, n int64) error {
		if err := k.replies.acquire(ctx, n); err != nil {
			return err
		}
		held += n
		return nil
	}
	s, warm, runErr := k.sessionFor(ctx, in.Channel, prof, deadline, reset)
	if runErr == nil {
		bind := k.bind(id, in, prof, deadline, reset)
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
		res, runErr = k.control.Turn(callCtx, s.socket, bind, reserve)
		if runErr != nil && errors.Is(context.Cause(callCtx), errWorkerExited) && ctx.Err() == nil {
			runErr = errWorkerExited
		}
		if errors.Is(runErr, ErrWorkerIncompatible) {
			// The seed: name the exact configured image; the same tag is
			// no proof of a rebuild.
			runErr = fmt.Errorf("%w: rebuild the worker image %q with this release's sandbox-worker", runErr, k.cfg.Image)
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
		if keep := int64(filesBytes(files)); keep < held {
			k.replies.release(held - keep)
			held = keep
		}
		k.release(s, runErr == nil)
	}
	var cleanupErr error
	if runErr != nil && s != nil {
		// The session may hold the lost turn (a worker still on it, a broker
		// gone): the next turn starts from nothing.
		cleanupErr = k.stop(s, "turn failed")
	}
	return Outcome{Reply: reply, Files: files, Warm: warm, RunErr: runErr, CleanupErr: cleanupErr,
		Release: func() { k.replies.release(held) }}
}

// bind is the turn as the broker binds it: identity from the admitted
// request only; the profile's model, thinking level and tools.
func (k *Kind) bind(id string, in Input, prof config.Profile, deadline time.Time, fresh bool) policy.Bind {
	t := richproto.Turn{
		ID: id, Text: in.Text, Speaker: richproto.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		Thinking: prof.Thinking, DeadlineUnixMs: deadline.UnixMilli(), Fresh: fresh, Model: prof.Model,
		MaxOutputTokens: prof.MaxOutputTokens, // the worker leaves the answer room beside its thinking
		Attachments:     in.Attachments,
	}
	for _, ts := range k.tools {
		for _, name := range prof.Tools {
			if ts.Name == name {
				t.Tools = append(t.Tools, richproto.ToolSpec{Name: ts.Name, Description: ts.Description, Parameters: ts.Parameters})
			}
		}
	}
	for _, ms := range k.mcpSpecs {
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

// sessionFor takes the channel's session for a turn ending at
// deadline, stopping one that cannot serve it and starting a new one.
// warm reports a session that was already running.
func (k *Kind) sessionFor(ctx context.Context, channel string, prof config.Profile, deadline time.Time, fresh bool) (*richSession, bool, error) {
	k.mu.Lock()
	s := k.byChannel[channel]
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
			s.state = StateBusy
			if s.idle != nil {
				s.idle.Stop()
			}
			k.mu.Unlock()
			return s, true, nil
		}
	}
	k.mu.Unlock()
	if reason == "busy" {
		return nil, false, errors.New("rich session busy")
	}
	if s != nil {
		// A fresh start stops the container before the worker archives
		// the session files (Turn.Fresh), so nothing still writes them.
		if err := k.stop(s, reason); err != nil {
			return nil, false, err
		}
	}
	s, err := k.start(ctx, channel, prof)
	return s, false, err
}

// release ends a turn's hold on its session and arms the idle stop.
func (k *Kind) release(s *richSession, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s.busy = false
	s.turns++
	s.lastUsed = k.now()
	if !ok {
		s.broken = true
		return
	}
	if s.retire != "" {
		reason := s.retire
		go func() { _ = k.stop(s, reason) }()
		return
	}
	s.state = StateReady
	k.armIdleLocked(s)
}

func (k *Kind) armIdleLocked(s *richSession) {
	if s.idle != nil {
		s.idle.Stop()
	}
	wait := k.idleStopAt(s).Sub(k.now())
	s.idle = time.AfterFunc(max(wait, 0), func() {
		// Taken off its channel under the lock that turns take sessions
		// under, so no turn can take it while it is being stopped.
		k.mu.Lock()
		idle := k.byChannel[s.channel] == s && !s.busy
		if idle {
			delete(k.byChannel, s.channel)
			k.removing[s.id] = s
			s.state = StateStopping
		}
		k.mu.Unlock()
		if idle {
			_ = k.stop(s, "idle")
		}
	})
}

// start makes a session: listed first, then the policy, the broker
// socket unit, the container; it returns once the worker announced itself
// and polls, or fails (removing everything) after rich.startTimeoutSeconds.
func (k *Kind) start(ctx context.Context, channel string, prof config.Profile) (*richSession, error) {
	c := k.cfg
	now := k.now()
	s := &richSession{
		id: k.newID(), channel: channel, tag: ids.ChannelTag(channel), profile: prof.Name,
		started: now, deadline: now.Add(SessionLifetime), state: StateStarting, busy: true,
		stopped: make(chan struct{}),
	}
	h := sandbox.Handle{ID: s.id, Channel: channel}
	var err error
	if s.socket, err = h.NameChannel(c.RunRoot, c.WorkspaceRoot, c.PolicyDir); err != nil {
		return nil, err
	}
	s.container, s.workspace, s.dir, s.policyPath = h.Container, h.Workspace, h.Dir, h.Policy
	if s.guest, err = k.host.GuestFor(channel, s.workspace); err != nil {
		return nil, fmt.Errorf("guest uid: %w", err)
	}
	if err := k.life.EnsureWorkspace(s.workspace, s.guest, s.tag); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	pol, err := k.policy(s, prof).Marshal()
	if err != nil {
		return nil, fmt.Errorf("rich policy: %w", err)
	}
	// Listed before anything of it is written (the reaper's contract).
	k.mu.Lock()
	if k.byChannel[channel] != nil {
		k.mu.Unlock()
		return nil, errors.New("channel already has a rich session")
	}
	k.byChannel[channel] = s
	k.mu.Unlock()
	k.starts.Inc()
	log := k.log.With("session", s.id, "channel", s.tag, "profile", prof.Name)

	fail := func(err error) (*richSession, error) {
		if serr := k.stop(s, "start failed"); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	t := &sandbox.Handle{ID: s.id, Dir: s.dir, Policy: s.policyPath}
	if err := k.life.MakeTurnDir(t); err != nil {
		s.madeDir = t.MadeDir
		return fail(err)
	}
	s.madeDir = true
	s.madePolicy = true
	if err := k.life.WritePolicyFile(t, pol); err != nil {
		return fail(err)
	}
	s.unitTried = true
	if err := k.life.Units().StartBroker(ctx, s.id); err != nil {
		return fail(fmt.Errorf("broker units: %w", err))
	}
	spec := sandbox.ContainerSpec{
		Name: s.container, Image: c.Image, UID: s.guest, GID: s.guest,
		WorkspaceDir: s.workspace, TurnDir: s.dir,
		MemoryMB: c.Rich.MemoryMB, CPUs: c.Rich.CPUs, Pids: c.Rich.Pids, TmpfsMB: c.Rich.TmpfsMB,
		Runtime: c.Runtime, LogTag: ids.LogTag(channel), Rich: true, SkillsDir: c.SkillsDir(prof),
		Labels: sandbox.Labels(c.Installation, s.id, s.tag, s.deadline),
	}
	s.createTried = true
	if s.containerID, err = k.life.Containers().Create(ctx, spec); err != nil {
		return fail(fmt.Errorf("container create: %w", err))
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	s.cancelRun = cancelRun
	s.exited = make(chan struct{})
	go func() {
		defer close(s.exited)
		sink := k.life.WorkerLogs().Turn(s.tag, s.id, s.container)
		res, err := k.life.Containers().Run(runCtx, s.containerID, nil, richMaxStdout, nil, sink)
		k.life.CloseSink(&sandbox.Handle{ID: s.id, Tag: s.tag}, sink)
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
		st, err := k.control.Status(gate, s.socket)
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

// policy is the session's broker policy: the channel without a
// speaker (bound per turn), the lifetime as its deadline, the profile's
// tools and MCP servers, the rich section.
func (k *Kind) policy(s *richSession, prof config.Profile) *policy.Policy {
	p := policy.Policy{Version: policy.Version, TurnID: s.id,
		Identity:       policy.Identity{Channel: s.channel, ChannelTag: s.tag},
		DeadlineUnixMs: s.deadline.UnixMilli(), Limits: k.pol.Limits}
	p.Limits.MaxCalls = k.cfg.Rich.MaxCalls
	// The broker fetches attachments through the operator's egress.allow.
	p.EgressAllow = append([]string(nil), k.pol.EgressAllow...)
	for _, t := range k.pol.Tools {
		for _, name := range prof.Tools {
			if t.Name == name {
				p.Tools = append(p.Tools, t)
			}
		}
	}
	for _, m := range k.pol.MCP {
		for _, name := range prof.MCP {
			if m.Name == name {
				p.MCP = append(p.MCP, m)
			}
		}
	}
	r := k.cfg.RichPolicy(prof, s.channel)
	p.Rich = &r
	return &p
}

// stop removes a session once (later calls wait for the first): it is
// taken off its channel, the container killed and removed, the broker units
// stopped, the directory and policy file removed; it stays listed until
// all of that is done.
func (k *Kind) stop(s *richSession, reason string) error {
	s.stopOnce.Do(func() {
		defer close(s.stopped)
		k.mu.Lock()
		if k.byChannel[s.channel] == s {
			delete(k.byChannel, s.channel)
		}
		k.removing[s.id] = s
		s.state = StateStopping
		if s.idle != nil {
			s.idle.Stop()
		}
		turns := s.turns
		k.mu.Unlock()
		log := k.log.With("session", s.id, "channel", s.tag)
		t := &sandbox.Handle{ID: s.id, Container: s.container, ContainerID: s.containerID, Dir: s.dir, Policy: s.policyPath,
			MadeDir: s.madeDir, MadePolicy: s.madePolicy, UnitTried: s.unitTried, CreateTried: s.createTried, Quiet: true}
		if s.cancelRun != nil {
			s.cancelRun()
		}
		s.stopErr = k.life.Cleanup(t, log)
		if s.exited != nil {
			select {
			case <-s.exited:
			case <-time.After(k.life.RemoveTimeout()):
				log.Warn("rich container's run did not end after removal")
			}
		}
		k.mu.Lock()
		delete(k.removing, s.id)
		k.mu.Unlock()
		k.stops.WithLabelValues(reason).Inc()
		log.Info("rich session stopped", "reason", reason, "turns", turns,
			"lived_ms", k.now().Sub(s.started).Milliseconds(), "cleanup_ok", s.stopErr == nil)
	})
	<-s.stopped
	return s.stopErr
}

// StopChannel stops the channel's session, if any (channel off,
// another mode or profile).
func (k *Kind) StopChannel(channel, reason string) {
	k.mu.Lock()
	s := k.byChannel[channel]
	k.mu.Unlock()
	if s != nil {
		_ = k.stop(s, reason)
	}
}

// StopIdle stops the channel's session when it is not running a turn
// and the channel's mode or profile no longer matches it; a busy session is
// stopped by its channel's next turn (profile changed) or stays until its
// turn settles and idles out.
func (k *Kind) StopIdle(channel, mode, profile string, rich bool) {
	k.mu.Lock()
	s := k.byChannel[channel]
	if s == nil || (rich && s.profile == profile) {
		k.mu.Unlock()
		return
	}
	reason := "channel " + mode
	if rich {
		reason = "profile changed"
	}
	if s.busy {
		s.retire = reason // stopped as its turn settles
		k.mu.Unlock()
		return
	}
	delete(k.byChannel, channel) // no turn takes it from here
	k.removing[s.id] = s
	s.state = StateStopping
	k.mu.Unlock()
	_ = k.stop(s, reason)
}

// StopAll stops every session (host stop), in parallel.
func (k *Kind) StopAll(reason string) {
	k.mu.Lock()
	all := make([]*richSession, 0, len(k.byChannel))
	for _, s := range k.byChannel {
		all = append(all, s)
	}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() { defer wg.Done(); _ = k.stop(s, reason) }()
	}
	wg.Wait()
}

// sessionCount is the number of live sessions (metrics).
func (k *Kind) sessionCount() float64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return float64(len(k.byChannel))
}

// LogConfig reports the rich setup once at start.
func (k *Kind) LogConfig() {
	if k.cfg.Rich.Enabled {
		k.log.Info("rich channels enabled", "profiles", len(k.cfg.Profiles), "idle_s", k.cfg.Rich.IdleSeconds,
			"session_lifetime_s", int(SessionLifetime.Seconds()))
	}
}

func filesBytes(files []richproto.File) int {
	n := 0
	for _, f := range files {
		n += len(f.Data)
	}
	return n
}
