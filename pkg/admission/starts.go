package admission

import (
	"context"
	"slices"
	"sync"
)

// Starts bounds how many starts run at once: a cold turn's broker units,
// container create and start, up to its worker's stdin, and a standby's
// preparation. The global cap (Queue) bounds what runs, and most of a
// running turn's life is waiting on its model; a start is CPU-bound work in
// systemd, D-Bus, dockerd, containerd and runc, and on two cores sixteen of
// them at once thrash (measured, issue 25). So a burst admits many turns
// but starts them a few at a time. Turns' starts are granted in arrival
// order; a spare start (a standby's preparation) only when no turn's start
// waits, and never the last free slot (unless the limit is 1), so a turn
// arriving during a preparation finds one.
type Starts struct {
	mu        sync.Mutex
	limit     int
	held      int // turns' and spares' starts holding a slot
	spareHeld int
	turns     []*startWaiter // arrival order
	spares    []*startWaiter // arrival order
	closed    bool
	closedErr error
	// queued, when set (tests), hears each start that waits: StartQueued
	// for a turn's, SpareQueued for a spare's.
	queued func(kind string)
}

// StartQueued is what Starts' queued hook is told for a turn's start.
const StartQueued = "(start)"

type startWaiter struct {
	ready   chan struct{}
	granted bool
	spare   bool
}

// NewStarts bounds starts to limit at once (at least 1). closed is what
// Start and Spare return once Close was called.
func NewStarts(limit int, closed error) *Starts {
	return &Starts{limit: max(limit, 1), closedErr: closed}
}

// Start waits for a slot for a turn's start (after every turn's start
// that waited before it). A caller whose ctx ends while waiting leaves.
// release must be called once the start is done; it is idempotent.
func (s *Starts) Start(ctx context.Context) (func(), error) { return s.acquire(ctx, false) }

// Spare waits for a slot for a standby's preparation: granted only when no
// turn's start waits and a slot stays free for one.
func (s *Starts) Spare(ctx context.Context) (func(), error) { return s.acquire(ctx, true) }

func (s *Starts) acquire(ctx context.Context, spare bool) (func(), error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, s.closedErr
	}
	w := &startWaiter{ready: make(chan struct{}), spare: spare}
	if spare {
		s.spares = append(s.spares, w)
	} else {
		s.turns = append(s.turns, w)
	}
	s.promoteLocked()
	hook, waits := s.queued, !w.granted
	s.mu.Unlock()
	if hook != nil && waits {
		kind := StartQueued
		if spare {
			kind = SpareQueued
		}
		hook(kind)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			s.mu.Lock()
			s.held--
			if spare {
				s.spareHeld--
			}
			s.promoteLocked()
			s.mu.Unlock()
		})
	}
	if !waits { // granted at once: a ctx that ends now must not undo it
		return release, nil
	}
	select {
	case <-w.ready:
		return release, nil
	case <-ctx.Done():
		s.mu.Lock()
		if w.granted { // granted while we gave up: hand the slot on
			s.mu.Unlock()
			release()
		} else {
			if spare {
				s.spares = slices.DeleteFunc(s.spares, func(x *startWaiter) bool { return x == w })
			} else {
				s.turns = slices.DeleteFunc(s.turns, func(x *startWaiter) bool { return x == w })
			}
			s.mu.Unlock()
		}
		return nil, context.Cause(ctx)
	}
}

// promoteLocked grants turns' starts in arrival order while slots are
// free; then, only when no turn's start waits, spares, leaving one slot
// free for a turn that may come (all of them when the limit is 1).
func (s *Starts) promoteLocked() {
	for len(s.turns) > 0 && s.held < s.limit {
		w := s.turns[0]
		s.turns = s.turns[1:]
		s.grantLocked(w)
	}
	spareRoom := s.limit - 1
	if s.limit == 1 {
		spareRoom = 1
	}
	for len(s.turns) == 0 && len(s.spares) > 0 && s.held < spareRoom {
		w := s.spares[0]
		s.spares = s.spares[1:]
		s.grantLocked(w)
	}
}

func (s *Starts) grantLocked(w *startWaiter) {
	s.held++
	if w.spare {
		s.spareHeld++
	}
	w.granted = true
	close(w.ready)
}

// Limit is the bound on starts at once.
func (s *Starts) Limit() int { return s.limit }

// Totals returns the starts waiting (turns' and spares') and holding a
// slot now.
func (s *Starts) Totals() (waiting, starting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.turns) + len(s.spares), s.held
}

// SpareHeld is the number of slots standby preparations hold.
func (s *Starts) SpareHeld() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spareHeld
}

// Close refuses new starts; waiting callers are ended by their contexts.
func (s *Starts) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// OnQueued makes f hear each start that waits (StartQueued or
// SpareQueued): a synchronisation point for tests.
func (s *Starts) OnQueued(f func(kind string)) {
	s.mu.Lock()
	s.queued = f
	s.mu.Unlock()
}

// SpareStart is what a standby's preparation holds: a slot of q's global
// cap no waiting turn needs (Queue.Spare), then a start slot no turn's
// start waits for (Starts.Spare). In that order: nothing waits for a global
// slot while holding a start slot, so neither wait can block the other.
// release frees both; it is idempotent.
func SpareStart(ctx context.Context, q *Queue, s *Starts) (func(), error) {
	global, err := q.Spare(ctx)
	if err != nil {
		return nil, err
	}
	start, err := s.Spare(ctx)
	if err != nil {
		global()
		return nil, err
	}
	return func() { start(); global() }, nil
}
