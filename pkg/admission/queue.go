// Package admission admits turns: FIFO per channel, never two at once in one
// channel, channels independent, at most a global cap running in total, a
// wait bounded on its own, and spare slots (standby preparations) granted
// only when no waiting turn needs them; and it bounds starts (Starts): of
// the turns running, only a few start at once, a waiting turn's start
// before any standby preparation's. It knows no kind and no container.
package admission

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrQueueFull: the channel already has depth turns waiting.
var ErrQueueFull = errors.New("queue full")

// ErrBusy: a turn found no slot within queue.maxWaitSeconds and was not
// run. Like ErrQueueFull it is a 429: try again later.
var ErrBusy = errors.New("busy: no turn slot free within queue.maxWaitSeconds; try again later")

// Queue admits turns: FIFO per channel, never two at once in one channel,
// Channels independent, at most cap running in total (0 = no cap; the host
// always passes a cap, config.GlobalConcurrency). Standby preparation takes
// a slot only through spare: when one is free and nobody waits.
type Queue struct {
	mu      sync.Mutex
	depth   int
	cap     int
	waiting []*ticket // arrival order, all channels
	count   map[string]int
	running map[string]bool
	nrun    int            // running tickets
	nspare  int            // slots held through spare (standby preparations)
	spares  []*spareWaiter // waiting for a spare slot, arrival order
	closed  bool
	// closedErr is what Acquire and Spare return once closed (the host's
	// shutting-down error).
	closedErr error
	// queued, when set (tests), is told each time a ticket starts waiting
	// (its channel), or a spare waiter (SpareQueued).
	queued func(channel string)
	// wanted is closed (and forgotten) when a ticket or a spare waiter
	// starts waiting: the signal SpareYielding's holders give their slot
	// back on.
	wanted chan struct{}
}

type ticket struct {
	channel string
	ready   chan struct{}
	granted bool
}

func New(depth, globalCap int, closed error) *Queue {
	return &Queue{depth: depth, cap: globalCap, closedErr: closed, count: map[string]int{}, running: map[string]bool{}}
}

// Acquire waits for the channel's turn. A caller whose ctx ends while waiting
// leaves the queue. The returned release must be called exactly once.
func (q *Queue) Acquire(ctx context.Context, channel string) (func(), error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, q.closedErr
	}
	if q.count[channel] >= q.depth {
		q.mu.Unlock()
		return nil, ErrQueueFull
	}
	t := &ticket{channel: channel, ready: make(chan struct{})}
	q.waiting = append(q.waiting, t)
	q.count[channel]++
	q.promoteLocked()
	hook, waits := q.queued, !t.granted
	q.mu.Unlock()
	if hook != nil && waits {
		hook(channel)
	}

	release := func() {
		q.mu.Lock()
		delete(q.running, channel)
		q.nrun--
		q.promoteLocked()
		q.mu.Unlock()
	}
	if !waits { // granted at once: a ctx that ends now must not undo it
		return release, nil
	}
	select {
	case <-t.ready:
		return release, nil
	case <-ctx.Done():
		q.mu.Lock()
		if t.granted { // granted while we gave up: hand the slot on
			q.mu.Unlock()
			release()
		} else {
			q.removeLocked(t)
			q.mu.Unlock()
		}
		return nil, context.Cause(ctx)
	}
}

// AcquireWithin is acquire with the wait bounded by maxWait: a turn not
// granted by then leaves the queue with ErrBusy, so its caller answers at
// once instead of running it late. The bound covers only the wait; the
// turn's own deadline starts once it holds the slot.
func (q *Queue) AcquireWithin(ctx context.Context, channel string, maxWait time.Duration) (func(), error) {
	ctx, cancel := context.WithTimeoutCause(ctx, maxWait, ErrBusy)
	defer cancel()
	return q.Acquire(ctx, channel)
}

// Spare waits for a slot of the global cap, bound to no channel, granted
// only when one is free and no ticket waits for the cap: a standby's
// preparation, which must never take the slot a waiting turn needs nor
// delay one in the queue. Tickets are always promoted first; a spare
// waiter gets what is left. A ticket waiting only behind its own channel's
// running turn does not hold spares back: it needs no free slot (it takes
// the one its channel's turn releases), and that channel's next standby is
// exactly what a spare prepares. A caller whose ctx ends while waiting
// leaves. release must be called exactly once.
func (q *Queue) Spare(ctx context.Context) (func(), error) {
	release, _, err := q.spare(ctx, false)
	return release, err
}

// SpareYielding is Spare for a holder that may give the slot back while it
// has not used it yet (a fleet box waiting for a job): wanted is closed as
// soon as a turn or a spare waiter that does not yield (a standby's
// preparation) waits for a slot. Yielding holders never yield to each
// other, so two of them cannot hand one slot back and forth.
func (q *Queue) SpareYielding(ctx context.Context) (release func(), wanted <-chan struct{}, err error) {
	return q.spare(ctx, true)
}

// wantedLocked: a turn or a spare waiter that does not yield waits.
func (q *Queue) wantedLocked() bool {
	if len(q.waiting) > 0 {
		return true
	}
	for _, w := range q.spares {
		if !w.yields {
			return true
		}
	}
	return false
}

func (q *Queue) signalWantedLocked() {
	if q.wanted != nil {
		close(q.wanted)
		q.wanted = nil
	}
}

func (q *Queue) spare(ctx context.Context, yields bool) (func(), <-chan struct{}, error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, nil, q.closedErr
	}
	w := &spareWaiter{ready: make(chan struct{}), yields: yields}
	q.spares = append(q.spares, w)
	q.promoteLocked()
	hook, waits := q.queued, !w.granted
	q.mu.Unlock()
	if hook != nil && waits {
		hook(SpareQueued)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			q.mu.Lock()
			q.nspare--
			q.promoteLocked()
			q.mu.Unlock()
		})
	}
	if !waits { // granted at once: a ctx that ends now must not undo it
		return release, w.wanted, nil
	}
	select {
	case <-w.ready:
		return release, w.wanted, nil
	case <-ctx.Done():
		q.mu.Lock()
		if w.granted {
			q.mu.Unlock()
			release()
		} else {
			q.spares = slices.DeleteFunc(q.spares, func(x *spareWaiter) bool { return x == w })
			q.mu.Unlock()
		}
		return nil, nil, context.Cause(ctx)
	}
}

// SpareQueued is what queue.queued is told for a spare waiter.
const SpareQueued = "(spare)"

type spareWaiter struct {
	ready   chan struct{}
	granted bool
	yields  bool // SpareYielding
	// wanted is the queue's signal current when the slot was granted.
	wanted chan struct{}
}

func (q *Queue) removeLocked(t *ticket) {
	for i, w := range q.waiting {
		if w == t {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			q.count[t.channel]--
			if q.count[t.channel] == 0 {
				delete(q.count, t.channel)
			}
			return
		}
	}
}

// promoteLocked grants the oldest waiting ticket of every idle channel, in
// arrival order, while the global cap allows; then, only when no ticket
// waits for the cap (every one left waits behind its channel's running
// turn), spare waiters.
func (q *Queue) promoteLocked() {
	defer func() {
		if q.wantedLocked() {
			q.signalWantedLocked()
		}
	}()
	full := func() bool { return q.cap > 0 && q.nrun+q.nspare >= q.cap }
	for i := 0; i < len(q.waiting); {
		t := q.waiting[i]
		if full() {
			return
		}
		if q.running[t.channel] {
			i++
			continue
		}
		q.running[t.channel] = true
		q.nrun++
		t.granted = true
		q.removeLocked(t)
		close(t.ready)
	}
	// Here the cap is not full: every ticket left waits for its channel.
	for len(q.spares) > 0 && !full() {
		w := q.spares[0]
		q.spares = q.spares[1:]
		q.nspare++
		w.granted = true
		if q.wanted == nil {
			q.wanted = make(chan struct{})
		}
		w.wanted = q.wanted
		close(w.ready)
	}
}

// WaitingFor is the number of turns waiting (not running) in a channel.
func (q *Queue) WaitingFor(channel string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count[channel]
}

// Limit is the global cap (0 = none).
func (q *Queue) Limit() int { return q.cap }

// Totals returns waiting and running turn counts (standby preparations
// holding a slot are not turns: see spare).
func (q *Queue) Totals() (waiting, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting), q.nrun
}

// Channels lists channels with waiting or running turns.
func (q *Queue) Channels() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for ch := range q.count {
		out = append(out, ch)
	}
	for ch := range q.running {
		if q.count[ch] == 0 {
			out = append(out, ch)
		}
	}
	return out
}

// Close refuses new tickets; waiting callers are ended by their contexts.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}

// SpareHeld is the number of slots standby preparations hold.
func (q *Queue) SpareHeld() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nspare
}

// OnQueued makes f hear each ticket that starts waiting (its channel) and
// each spare waiter (SpareQueued): a synchronisation point for tests.
func (q *Queue) OnQueued(f func(channel string)) {
	q.mu.Lock()
	q.queued = f
	q.mu.Unlock()
}
