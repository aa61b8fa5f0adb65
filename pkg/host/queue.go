package host

import (
	"context"
	"errors"
	"sync"
)

// ErrQueueFull: the channel already has depth turns waiting.
var ErrQueueFull = errors.New("queue full")

// queue admits turns: FIFO per channel, never two at once in one channel,
// channels independent, optionally at most cap turns running in total.
type queue struct {
	mu      sync.Mutex
	depth   int
	cap     int
	waiting []*ticket // arrival order, all channels
	count   map[string]int
	running map[string]bool
	nrun    int
	closed  bool
}

type ticket struct {
	channel string
	ready   chan struct{}
	granted bool
}

func newQueue(depth, globalCap int) *queue {
	return &queue{depth: depth, cap: globalCap, count: map[string]int{}, running: map[string]bool{}}
}

// acquire waits for the channel's turn. A caller whose ctx ends while waiting
// leaves the queue. The returned release must be called exactly once.
func (q *queue) acquire(ctx context.Context, channel string) (func(), error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil, ErrShuttingDown
	}
	if q.count[channel] >= q.depth {
		q.mu.Unlock()
		return nil, ErrQueueFull
	}
	t := &ticket{channel: channel, ready: make(chan struct{})}
	q.waiting = append(q.waiting, t)
	q.count[channel]++
	q.promoteLocked()
	q.mu.Unlock()

	release := func() {
		q.mu.Lock()
		delete(q.running, channel)
		q.nrun--
		q.promoteLocked()
		q.mu.Unlock()
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

func (q *queue) removeLocked(t *ticket) {
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
// arrival order, while the global cap allows.
func (q *queue) promoteLocked() {
	for i := 0; i < len(q.waiting); {
		t := q.waiting[i]
		if q.cap > 0 && q.nrun >= q.cap {
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
}

// waitingFor is the number of turns waiting (not running) in a channel.
func (q *queue) waitingFor(channel string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count[channel]
}

// totals returns waiting and running turn counts.
func (q *queue) totals() (waiting, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting), q.nrun
}

// channels lists channels with waiting or running turns.
func (q *queue) channels() []string {
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

// close refuses new tickets; waiting callers are ended by their contexts.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
}
