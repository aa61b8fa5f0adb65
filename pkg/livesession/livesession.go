// Package livesession is the session kind (DESIGN.md section 18): a
// toolbox container that lives across execs. Its PID 1 is the session
// supervisor (`sandbox-worker session`, package sessionsup); the host keeps
// the container's attach stream open for the session's life, writes
// sessionwire requests on its stdin and reads sessionwire events from its
// stdout through one multiplexer per session, which hands each frame to
// the request it names (several execs and a file transfer may run at
// once). Lifetime: created by a client and owned by its uid (an admin sees
// all); an idle session is paused (docker pause: the cgroup freezer, no
// CPU, memory kept) and the next request resumes it; an explicit pause and
// resume too; its TTL and an explicit close remove it; a host stop ends
// every session (the attach stream, the only way in, ends with the host
// process anyway: StdinOnce closes the supervisor's stdin, which ends it);
// the reaper removes what a crashed host left once the deadline label
// (the TTL) has passed.
//
// Admission: a session never takes a slot of the global concurrency that
// turns and runs queue for (pkg/admission), nor a run slot's guest uid: it
// is counted against bounds of its own, sessions.maxLive on the box,
// sessions.maxPerClient per client uid and sessions.maxMemoryMb for the
// memory limits of all sessions together, and a create past any of them
// is refused at once with 429 naming the key. The host's Admit counts a
// session as work from its creation until its removal, so a host stop
// waits for its cleanup.
//
// Guarantee: a session is removed (container killed and force-removed,
// guest slot and memory given back) exactly once, whatever ends it
// (close, TTL, a broken stream, host stop), and only its owner or an
// admin reaches it (another client's session answers exactly as one that
// does not exist); an exec's output reaches its client bounded by
// sessions.maxOutputBytes per stream (the supervisor cuts it and the
// result says so); a file transfer holds at most sessions.maxFileBytes in
// the host, one at a time per session; the supervisor's stream is hostile
// input (sessionwire's decoder bounds it; a stream that breaks the
// protocol ends the session) and its error texts never reach a client:
// each error code maps to a fixed message. Network (network.go): only a
// session created with network has a broker, holding only the credentials
// named at create; an exec has network only after an admin approved that
// exec, from a grant bound before it starts until a revoke before its
// client sees its end, one such exec at a time.
package livesession

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Errors the host maps to a status (Registration.Statuses).
var (
	ErrDisabled = errors.New("sessions are disabled on this host (sessions.enabled)")
	ErrNotFound = errors.New("no such session")
	ErrState    = errors.New("the session is not in a state that allows this")
	// ErrBusy: a bound of sessions is reached (a *busy names the key).
	ErrBusy = errors.New("too many sessions")
	// ErrInvalid: the request is refused as written (its text says why).
	ErrInvalid = errors.New("invalid session request")
	// ErrFileNotFound: a file operation's path names nothing.
	ErrFileNotFound = errors.New("no such file or directory in the session")
	// ErrTooLarge: a file (or tar) over sessions.maxFileBytes, or a
	// session out of space.
	ErrTooLarge = errors.New("over the session's size bound")
	// ErrEnded: the session ended while the request ran.
	ErrEnded = errors.New("the session ended")
	// ErrSupervisor: the session's supervisor failed the request.
	ErrSupervisor = errors.New("the session could not carry out the request; the host log has details")
)

// busy is an ErrBusy naming the key, retried after retry.
type busy struct {
	msg   string
	retry time.Duration
}

func (e *busy) Error() string             { return e.msg }
func (e *busy) Unwrap() error             { return ErrBusy }
func (e *busy) RetryAfter() time.Duration { return e.retry }
func busyf(f string, a ...any) error      { return &busy{msg: fmt.Sprintf(f, a...), retry: busyRetry} }
func invalidf(f string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(f, a...))
}
func refused(err error, reason string) error { return &reasonError{err, reason} }

// busyRetry is a refused create's Retry-After: a session frees its room
// only when closed, idle pauses keep it.
const busyRetry = 30 * time.Second

type reasonError struct {
	kind   error
	reason string
}

func (e *reasonError) Error() string { return e.reason }
func (e *reasonError) Unwrap() error { return e.kind }

// Host is what the kind needs of the host.
type Host interface {
	Admit(create func() error) (done func(), err error)
	Stopped() context.Context
	GuestUID(key string) (int, error)
}

// Options make a Kind.
type Options struct {
	Config    *config.Config
	Lifecycle *sandbox.Lifecycle
	Host      Host
	Logger    *slog.Logger
	Now       func() time.Time
	NewID     func() string
	Registry  prometheus.Registerer
	// SweepEvery is how often idle and expired sessions are looked for
	// (0: a second; negative: never, a test calls Sweep).
	SweepEvery time.Duration
	// ExecGrace is how long past an exec's timeout its result may come
	// (0: DefaultExecGrace).
	ExecGrace time.Duration
}

// Kind is the host's sessions.
type Kind struct {
	cfg   *config.Config
	life  *sandbox.Lifecycle
	host  Host
	log   *slog.Logger
	now   func() time.Time
	newID func() string
	m     metrics
	// execGrace: how long past its timeout an exec's result may come.
	execGrace time.Duration

	mu       sync.Mutex
	sessions map[string]*Session // the standby too (standby.go)
	perOwner map[int]int
	memoryMB int
	slots    []bool // guest uid slots taken
	// The prepared session (standby.go), under mu: standby is the ready
	// one (nil: none), refilling whether one is being prepared, stopped
	// whether the kind stopped (no more are prepared), retryAt when the
	// next preparation may start after a failed one.
	standby    *Session
	refilling  bool
	stopped    bool
	retryAt    time.Time
	standbyRun sync.WaitGroup // preparations in flight

	stopSweep chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup // live sessions, until each one's removal
	unwatch   func() bool

	// approvalTimeout, when set (tests), replaces a network exec's
	// approval timer (network.go).
	approvalTimeout func(time.Duration) <-chan time.Time
}

// New makes the kind from sessions.*.
func New(o Options) *Kind {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewID == nil {
		o.NewID = ids.NewTurnID
	}
	k := &Kind{
		cfg: o.Config, life: o.Lifecycle, host: o.Host, log: o.Logger, now: o.Now, newID: o.NewID,
		sessions: map[string]*Session{}, perOwner: map[int]int{}, slots: make([]bool, o.Config.Sessions.MaxLive),
		stopSweep: make(chan struct{}), execGrace: o.ExecGrace,
	}
	if k.execGrace <= 0 {
		k.execGrace = DefaultExecGrace
	}
	k.m = newMetrics(k)
	if o.Registry != nil {
		k.m.register(o.Registry)
	}
	k.unwatch = context.AfterFunc(o.Host.Stopped(), func() { k.closeAll("host stopping") })
	every := o.SweepEvery
	if every == 0 {
		every = time.Second
	}
	if every > 0 {
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					k.Sweep()
				case <-k.stopSweep:
					return
				}
			}
		}()
	}
	return k
}

// Stop ends every session and waits for their removal (the host stops).
func (k *Kind) Stop() {
	k.stopOnce.Do(func() { close(k.stopSweep) })
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	k.closeAll("host stopping")
	k.standbyRun.Wait()
	k.closeAll("host stopping") // a standby whose preparation ended meanwhile
	k.wg.Wait()
}

func (k *Kind) closeAll(reason string) {
	for _, s := range k.all() {
		s.close(reason)
	}
}

// all is every session, the standby included.
func (k *Kind) all() []*Session {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Session, 0, len(k.sessions))
	for _, s := range k.sessions {
		out = append(out, s)
	}
	return out
}

// clients is every session a client made (the standby is nobody's yet).
func (k *Kind) clients() []*Session {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Session, 0, len(k.sessions))
	for _, s := range k.sessions {
		if !s.standby {
			out = append(out, s)
		}
	}
	return out
}

// Sweep pauses the sessions idle for sessions.idleSeconds and closes those
// past their TTL (the kind calls it every second).
func (k *Kind) Sweep() {
	now := k.now()
	idle := time.Duration(k.cfg.Sessions.IdleSeconds) * time.Second
	k.sweepStandby(now) // standby.go
	for _, s := range k.clients() {
		switch {
		case !now.Before(s.deadline()):
			s.close("ttl")
		case s.idleSince(now) >= idle:
			if err := s.pause("idle"); err != nil && !errors.Is(err, ErrState) {
				s.log.Warn("session idle pause failed", "err", err)
			}
		}
	}
}

// Listed are the sessions for GET /v1/turns: the reaper keeps what the
// host lists, from before its container is created until after it is
// removed; the deadline is the TTL, the container's deadline label.
//
// A standby not yet taken is marked with its state (standby.go):
// "preparing" until its supervisor is up, then "ready", when a plain
// create takes it without waiting for Docker.
func (k *Kind) Listed() []apiwire.Turn {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]apiwire.Turn, 0, len(k.sessions))
	for _, s := range k.sessions {
		// The label's deadline: a standby's outlasts any session it
		// becomes (standby.go).
		d := s.label
		t := apiwire.Turn{ID: s.id, ChannelTag: s.tag, DeadlineUnix: d.Unix(), DeadlineUnixMs: d.UnixMilli()}
		if s.standby {
			t.Standby = StandbyPreparing
			if k.standby == s {
				t.Standby = StandbyReady
			}
		}
		out = append(out, t)
	}
	return out
}

// A listed standby's states (GET /v1/turns).
const (
	StandbyPreparing = "preparing"
	StandbyReady     = "ready"
)

// Lookup is the session id as caller uid sees it: another client's session
// is ErrNotFound, as one that does not exist; an admin sees all.
func (k *Kind) Lookup(id string, uid int, admin bool) (*Session, error) {
	k.mu.Lock()
	s := k.sessions[id]
	if s != nil && (s.standby || !admin && s.owner != uid) {
		s = nil
	}
	k.mu.Unlock()
	if s == nil {
		if f := k.cfg.Fleet; f.Enabled {
			// A session stays on the box that made it: say which box
			// answered, the same for every id.
			return nil, refused(ErrNotFound, fmt.Sprintf("no such session on box %s (fleet.box); a session is served only by the box that made it", f.Box))
		}
		return nil, ErrNotFound
	}
	return s, nil
}

// List is the sessions caller uid sees.
func (k *Kind) List(uid int, admin bool) []apiwire.Session {
	var mine []*Session
	k.mu.Lock()
	for _, s := range k.sessions {
		if !s.standby && (admin || s.owner == uid) {
			mine = append(mine, s)
		}
	}
	k.mu.Unlock()
	out := []apiwire.Session{}
	for _, s := range mine {
		out = append(out, s.Status())
	}
	return out
}

// reserve takes room for a session of owner with memMB under the kind's
// bounds (the caller holds nothing): its guest slot.
func (k *Kind) reserve(s *Session) error {
	c := k.cfg.Sessions
	k.mu.Lock()
	defer k.mu.Unlock()
	// The client's own bound first: it is what refuses the client even
	// when the box has room (or a standby to give up, standby.go).
	switch {
	case k.stopped && s.standby:
		return busyf("the host is stopping")
	case !s.standby && k.perOwner[s.owner] >= c.MaxPerClient:
		return busyf("this client has %d sessions, its bound (sessions.maxPerClient); close one first", c.MaxPerClient)
	case len(k.sessions) >= c.MaxLive:
		return busyf("%d sessions live on this box, its bound (sessions.maxLive); close one or retry later", c.MaxLive)
	case k.memoryMB+s.memMB > c.MaxMemoryMB:
		return busyf("the sessions' memory would pass %d MiB (sessions.maxMemoryMb); close one or ask for less memory", c.MaxMemoryMB)
	}
	slot := -1
	for i, taken := range k.slots {
		if !taken {
			slot = i
			break
		}
	}
	if slot < 0 { // cannot happen: as many slots as sessions.maxLive
		return busyf("no free session slot (sessions.maxLive)")
	}
	k.slots[slot] = true
	k.wg.Add(1) // until the session's removal (close)
	s.slot = slot
	k.sessions[s.id] = s
	k.perOwner[s.owner]++
	k.memoryMB += s.memMB
	return nil
}

// release gives back what reserve took.
func (k *Kind) release(s *Session) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sessions[s.id] != s {
		return
	}
	delete(k.sessions, s.id)
	k.slots[s.slot] = false
	if k.perOwner[s.owner]--; k.perOwner[s.owner] <= 0 {
		delete(k.perOwner, s.owner)
	}
	k.memoryMB -= s.memMB
}

// Create makes a session for owner (the caller's uid): its container
// created, started and attached; the answer is its status.
func (k *Kind) Create(ctx context.Context, p apiwire.SessionCreate, owner int) (apiwire.Session, error) {
	c := k.cfg.Sessions
	if !c.Enabled {
		return apiwire.Session{}, ErrDisabled
	}
	sc, ok := k.life.Containers().(sandbox.SessionContainers)
	if !ok {
		return apiwire.Session{}, refused(ErrDisabled, "sessions need a container driver that can attach and pause; this host's cannot")
	}
	mem := c.MemoryMB
	if p.MemoryMb != 0 {
		if p.MemoryMb < c.WorkMB+c.TmpfsMB+c.OutputMB+64 || p.MemoryMb > c.MemoryMB {
			return apiwire.Session{}, invalidf("memoryMb must be %d to %d (sessions.memoryMb)", c.WorkMB+c.TmpfsMB+c.OutputMB+64, c.MemoryMB)
		}
		mem = p.MemoryMb
	}
	ttl := time.Duration(c.TTLSeconds) * time.Second
	if p.TTLSeconds != 0 {
		if p.TTLSeconds < 60 || p.TTLSeconds > c.TTLSeconds {
			return apiwire.Session{}, invalidf("ttlSeconds must be 60 to %d (sessions.ttlSeconds)", c.TTLSeconds)
		}
		ttl = time.Duration(p.TTLSeconds) * time.Second
	}
	if err := k.checkNetworkCreate(p, owner); err != nil {
		return apiwire.Session{}, err
	}
	workspace := ""
	if p.Project != "" {
		path, ok := k.cfg.Runs.ProjectPath(p.Project)
		if !ok {
			return apiwire.Session{}, invalidf("project %q is not declared (runs.projects)", p.Project)
		}
		workspace = path
	}
	if st, err := k.takeStandby(p, owner, ttl); st != nil || err != nil { // standby.go
		if err != nil {
			k.m.refused.Inc()
			k.log.Info("session refused", "owner_uid", owner, "reason", err.Error())
			return apiwire.Session{}, err
		}
		return st.Status(), nil
	}
	id := k.newID()
	now := k.now()
	s := &Session{
		k: k, id: id, tag: ids.SessionName(id), owner: owner, project: p.Project, memMB: mem,
		created: now, expires: now.Add(ttl), label: now.Add(ttl), state: apiwire.SessionStarting, lastUsed: now,
		pending: map[string]*pending{}, ended: make(chan struct{}), removed: make(chan struct{}), started: make(chan struct{}),
	}
	s.log = k.log.With("session", id)
	if p.Network {
		s.net = &netState{creds: slices.Clone(p.Credentials)}
	}
	var done func()
	done, err := k.host.Admit(func() error { return k.reserve(s) })
	if errors.Is(err, ErrBusy) && k.displaceStandby(owner) { // standby.go
		done, err = k.host.Admit(func() error { return k.reserve(s) })
	}
	if err != nil {
		if errors.Is(err, ErrBusy) {
			k.m.refused.Inc()
			k.log.Info("session refused", "owner_uid", owner, "reason", err.Error())
		}
		return apiwire.Session{}, err
	}
	s.done = done
	k.m.created.Inc()
	k.log.Info("session admitted", "session", id, "owner_uid", owner, "project", p.Project, "memory_mb", mem, "ttl_s", int(ttl.Seconds()),
		"network", p.Network, "credentials", p.Credentials)
	err = s.start(ctx, sc, workspace)
	close(s.started)
	if err != nil {
		s.close("start failed")
		if errors.Is(err, sandbox.ErrShuttingDown) || ctx.Err() != nil {
			return apiwire.Session{}, err
		}
		s.log.Error("session start failed", "err", err)
		return apiwire.Session{}, refused(ErrSupervisor, "the session could not be started; the host log has details")
	}
	k.refill() // standby.go: a displaced standby comes back when there is room
	return s.Status(), nil
}

// toolboxWorker is the supervisor's binary in the toolbox image.
var toolboxWorker = layout.ToolboxWorker
