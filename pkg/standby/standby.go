// Package standby keeps the warm path's standbys: per sandbox channel at most
// one turn prepared ahead of its request (a container created and started,
// its worker blocked on stdin, its broker units started), which the next
// turn of that channel binds instead of waiting for Docker.
//
// Guarantee: a standby is handed out at most once, only to the channel it
// was prepared for, only while the key (a fingerprint of everything that
// shaped it) still matches, before its expiry, and only after a liveness
// check at bind time; every standby prepared and not handed out is discarded
// exactly once (channel switched off, key changed, expired, found dead, pool
// closed). Take never waits for a preparation: a channel without a ready
// standby takes the cold path. The standbys across channels never exceed
// Options.Max, preparing ones included. Every standby's turn id is listed by
// Turns from before it is prepared until its discard has finished (or, when
// handed out, until the caller releases the lease), so a reaper that keeps
// what the host lists never removes a live standby.
package standby

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Warm is one prepared standby (the host's container, units and files).
type Warm interface {
	// Alive checks, at bind time, that the standby can still serve: its
	// container is still running.
	Alive(ctx context.Context) error
	// Discard removes everything of the standby. The pool calls it at
	// most once, and never for a standby it handed out.
	Discard(reason string)
}

// PrepareFunc prepares a standby of channel, shaped as key says (the key
// given to Refill), under the turn id the pool chose, expiring at expiry.
// It must honour ctx and, when it fails, leave nothing behind (or leave it
// to the reaper under the listed turn id).
type PrepareFunc func(ctx context.Context, channel, key, turnID string, expiry time.Time) (Warm, error)

// Discard and miss reasons (metric labels).
const (
	ReasonChannelOff = "channel_off" // the channel left sandbox mode
	ReasonChanged    = "changed"     // the key no longer matches
	ReasonExpired    = "expired"     // maximum age reached
	ReasonDead       = "dead"        // its container died while waiting
	ReasonStopped    = "stopped"     // the pool closed (host stop)
	ReasonNone       = "none"        // miss: no standby for the channel
	ReasonPreparing  = "preparing"   // miss: still being prepared
	ReasonDisabled   = "disabled"    // miss: standbys are off
)

// Events reported to Options.Event.
const (
	EventHit           = "hit"            // Take handed a standby out
	EventMiss          = "miss"           // Take found none usable (reason)
	EventDiscard       = "discard"        // a standby was discarded (reason)
	EventPrepared      = "prepared"       // a standby became ready
	EventPrepareFailed = "prepare_failed" // a preparation failed
	EventCapped        = "capped"         // Refill skipped: Max reached
)

// States reported by State.
const (
	StateNone      = "none"
	StatePreparing = "preparing"
	StateReady     = "ready"
)

// Options configure a Pool.
type Options struct {
	// Max caps standbys across channels (preparing included); 0 = none.
	Max int
	// MaxAge is a standby's life from the start of its preparation.
	MaxAge time.Duration
	// BindMargin: a standby this close to its expiry is not handed out
	// (the binding must finish before its broker gives up). Default 2 s.
	BindMargin time.Duration
	// Parallel bounds concurrent preparations (default 2), so refills
	// after a burst of turns do not crowd Docker.
	Parallel int
	// AliveTimeout bounds Warm.Alive at bind time (default 2 s).
	AliveTimeout time.Duration
	Prepare      PrepareFunc
	NewTurnID    func() string
	Now          func() time.Time
	// Renew replaces a standby that reached its maximum age with a fresh
	// one for the same channel and key (run shapes an operator declared
	// stay warm); without it the channel goes cold until its next Refill.
	Renew bool
	// Event, when set, counts what happens (metrics).
	Event func(event, reason string)
	Log   *slog.Logger
}

// Lease is a standby handed out by Take. Release must be called once the
// caller lists the turn itself (the pool lists it until then).
type Lease struct {
	Warm    Warm
	TurnID  string
	Expiry  time.Time
	release func()
}

// Release stops the pool listing the lease's turn id. Idempotent.
func (l *Lease) Release() { l.release() }

// Listed is one turn id the pool answers for (see Turns).
type Listed struct {
	TurnID, Channel, State string
	Expiry                 time.Time
}

// Status is one channel's standby.
type Status struct {
	State  string
	TurnID string
	Expiry time.Time
}

type entry struct {
	channel, key, turnID string
	expiry               time.Time
	warm                 Warm // nil while preparing
	timer                *time.Timer
	dropReason           string // set when dropped while preparing
}

// Pool is the standbys of one host.
type Pool struct {
	o     Options
	ctx   context.Context
	stop  context.CancelFunc
	slots chan struct{}

	mu       sync.Mutex
	closed   bool
	entries  map[string]*entry  // by channel: preparing or ready
	inFlight map[string]*Listed // by turn id: being discarded or leased out
	wg       sync.WaitGroup
}

// ErrClosed: the pool no longer prepares or hands out standbys.
var ErrClosed = errors.New("standby pool closed")

// New makes a pool. Prepare and NewTurnID are required.
func New(o Options) *Pool {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BindMargin == 0 {
		o.BindMargin = 2 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	if o.AliveTimeout == 0 {
		o.AliveTimeout = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Event == nil {
		o.Event = func(string, string) {}
	}
	p := &Pool{o: o, slots: make(chan struct{}, o.Parallel), entries: map[string]*entry{}, inFlight: map[string]*Listed{}}
	p.ctx, p.stop = context.WithCancel(context.Background())
	return p
}

// Refill starts preparing a standby for channel in the background, unless
// the channel has one (ready or preparing), the cap is reached or the pool
// is closed. key is the fingerprint the standby is prepared under.
func (p *Pool) Refill(channel, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked(channel, key)
}

func (p *Pool) refillLocked(channel, key string) {
	if p.closed || p.o.Max <= 0 || p.entries[channel] != nil {
		return
	}
	if len(p.entries) >= p.o.Max {
		p.o.Event(EventCapped, "")
		return
	}
	e := &entry{channel: channel, key: key, turnID: p.o.NewTurnID(), expiry: p.o.Now().Add(p.o.MaxAge)}
	p.entries[channel] = e
	p.wg.Add(1)
	go p.prepare(e)
}

func (p *Pool) prepare(e *entry) {
	defer p.wg.Done()
	var warm Warm
	var err error
	select {
	case p.slots <- struct{}{}:
		ctx, cancel := context.WithDeadline(p.ctx, e.expiry)
		warm, err = p.o.Prepare(ctx, e.channel, e.key, e.turnID, e.expiry)
		cancel()
		<-p.slots
	case <-p.ctx.Done():
		err = ErrClosed
	}
	p.mu.Lock()
	current := p.entries[e.channel] == e
	if err != nil {
		if current {
			delete(p.entries, e.channel)
		}
		delete(p.inFlight, e.turnID) // listed there when dropped meanwhile
		p.mu.Unlock()
		if !errors.Is(err, ErrClosed) {
			p.o.Event(EventPrepareFailed, "")
			p.o.Log.Warn("standby preparation failed; the next turn (or run) it was for takes the cold path",
				"turn", e.turnID, "err", err)
		}
		return
	}
	if !current || p.closed {
		// Dropped while preparing (channel off, closed): never ready.
		reason := e.dropReason
		if p.closed && reason == "" {
			reason = ReasonStopped
		}
		if current {
			delete(p.entries, e.channel)
		}
		p.discardLocked(e.channel, e.turnID, e.expiry, warm, reason)
		p.mu.Unlock()
		return
	}
	e.warm = warm
	e.timer = time.AfterFunc(e.expiry.Sub(p.o.Now()), func() { p.expire(e) })
	p.mu.Unlock()
	p.o.Event(EventPrepared, "")
}

func (p *Pool) expire(e *entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries[e.channel] != e {
		return // taken or dropped meanwhile
	}
	delete(p.entries, e.channel)
	p.discardLocked(e.channel, e.turnID, e.expiry, e.warm, ReasonExpired)
	if p.o.Renew {
		p.refillLocked(e.channel, e.key)
	}
}

// discardLocked discards warm in the background; its turn id stays listed
// until Discard returned. Called with p.mu held.
func (p *Pool) discardLocked(channel, turnID string, expiry time.Time, warm Warm, reason string) {
	p.inFlight[turnID] = &Listed{TurnID: turnID, Channel: channel, State: "discarding", Expiry: expiry}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		warm.Discard(reason)
		p.o.Event(EventDiscard, reason)
		p.o.Log.Info("standby discarded", "turn", turnID, "reason", reason)
		p.mu.Lock()
		delete(p.inFlight, turnID)
		p.mu.Unlock()
	}()
}

// Take hands out channel's ready standby when its key matches, it is not
// near its expiry and it is alive; the standby leaves the pool either way
// (a standby that fails a check is discarded). It never waits for a
// preparation. The second result is the miss reason when the lease is nil.
func (p *Pool) Take(ctx context.Context, channel, key string) (*Lease, string) {
	p.mu.Lock()
	e := p.entries[channel]
	switch {
	case p.closed || p.o.Max <= 0:
		p.mu.Unlock()
		p.o.Event(EventMiss, ReasonDisabled)
		return nil, ReasonDisabled
	case e == nil:
		p.mu.Unlock()
		p.o.Event(EventMiss, ReasonNone)
		return nil, ReasonNone
	case e.warm == nil:
		p.mu.Unlock()
		p.o.Event(EventMiss, ReasonPreparing)
		return nil, ReasonPreparing
	}
	delete(p.entries, channel)
	e.timer.Stop()
	reason := ""
	switch {
	case e.key != key:
		reason = ReasonChanged
	case !p.o.Now().Add(p.o.BindMargin).Before(e.expiry):
		reason = ReasonExpired
	}
	if reason != "" {
		p.discardLocked(channel, e.turnID, e.expiry, e.warm, reason)
		p.mu.Unlock()
		p.o.Event(EventMiss, reason)
		return nil, reason
	}
	listed := &Listed{TurnID: e.turnID, Channel: channel, State: "binding", Expiry: e.expiry}
	p.inFlight[e.turnID] = listed
	p.mu.Unlock()

	actx, cancel := context.WithTimeout(ctx, p.o.AliveTimeout)
	err := e.warm.Alive(actx)
	cancel()
	if err != nil {
		p.o.Log.Warn("standby found dead at bind time; the turn (or run) takes the cold path", "turn", e.turnID, "err", err)
		p.mu.Lock()
		p.discardLocked(channel, e.turnID, e.expiry, e.warm, ReasonDead)
		p.mu.Unlock()
		p.o.Event(EventMiss, ReasonDead)
		return nil, ReasonDead
	}
	p.o.Event(EventHit, "")
	var once sync.Once
	return &Lease{Warm: e.warm, TurnID: e.turnID, Expiry: e.expiry, release: func() {
		once.Do(func() {
			p.mu.Lock()
			if p.inFlight[e.turnID] == listed {
				delete(p.inFlight, e.turnID)
			}
			p.mu.Unlock()
		})
	}}, ""
}

// Drop discards channel's standby (ready or preparing) for reason.
func (p *Pool) Drop(channel, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[channel]
	if e == nil {
		return
	}
	delete(p.entries, channel)
	if e.warm == nil {
		p.dropPreparingLocked(e, reason)
		return
	}
	e.timer.Stop()
	p.discardLocked(channel, e.turnID, e.expiry, e.warm, reason)
}

// dropPreparingLocked marks a standby still being prepared for discard
// when its preparation ends; its turn id stays listed until then.
func (p *Pool) dropPreparingLocked(e *entry, reason string) {
	e.dropReason = reason
	p.inFlight[e.turnID] = &Listed{TurnID: e.turnID, Channel: e.channel, State: StatePreparing, Expiry: e.expiry}
}

// Close stops preparing, discards every standby (ReasonStopped) and waits
// until every preparation and discard has finished. Take and Refill do
// nothing afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.stop()
		for ch, e := range p.entries {
			delete(p.entries, ch)
			if e.warm == nil {
				p.dropPreparingLocked(e, ReasonStopped)
				continue
			}
			e.timer.Stop()
			p.discardLocked(ch, e.turnID, e.expiry, e.warm, ReasonStopped)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// State is channel's standby now.
func (p *Pool) State(channel string) Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[channel]
	switch {
	case e == nil:
		return Status{State: StateNone}
	case e.warm == nil:
		return Status{State: StatePreparing, TurnID: e.turnID, Expiry: e.expiry}
	}
	return Status{State: StateReady, TurnID: e.turnID, Expiry: e.expiry}
}

// Turns lists every turn id the pool answers for: standbys preparing or
// ready, being discarded, or handed out and not yet released; by turn id.
func (p *Pool) Turns() []Listed {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Listed, 0, len(p.entries)+len(p.inFlight))
	for _, e := range p.entries {
		state := StateReady
		if e.warm == nil {
			state = StatePreparing
		}
		out = append(out, Listed{TurnID: e.turnID, Channel: e.channel, State: state, Expiry: e.expiry})
	}
	for _, l := range p.inFlight {
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TurnID < out[j].TurnID })
	return out
}

// Counts is how many standbys are ready and preparing.
func (p *Pool) Counts() (ready, preparing int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.entries {
		if e.warm == nil {
			preparing++
		} else {
			ready++
		}
	}
	return ready, preparing
}
