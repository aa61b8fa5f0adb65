package fleet

import (
	"sync"
	"testing"
	"time"
)

// testClock is a box's clock that moves only when the test moves it.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// TestNoStepBackForAPeerThatLostTheClusterToo: a leader every box needs is
// lost (its server cut off), so every box's probe fails from the same
// moment. Box a's grace ends while box b still announces itself healthy
// (its own grace, its last success no later than a's): a must keep its
// partitions, not hand them all over to a box that cannot run them either
// (the cut link's 25-43 s tails, docs/fleet.md, *Failure model*). Once b
// says it reached the cluster after a last did, a steps back.
func TestNoStepBackForAPeerThatLostTheClusterToo(t *testing.T) {
	r := newRig(t, 1, 2)
	f, _ := r.fleet("a")
	// a's probe never succeeds (the channels bucket's leader unreachable);
	// the clock alone decides when its last success is too old.
	f.channels = unreachableKV{f.channels}
	clock := &testClock{now: time.Now()}
	a, err := NewBox(f, BoxOptions{Name: "a", Executor: newRecorder(), AckWait: testAckWait, OnEvent: r.record,
		Logger: quiet, Peers: []string{"a", "b"}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(r.ctx()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	lastOK := clock.Now() // Start's success
	grace := a.presenceTimeout() + a.presenceInterval()
	steppedBack := func() bool {
		a.reconcile()
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.steppedBack
	}
	reached := func(at time.Time) *int64 {
		ms := clock.Now().Sub(at).Milliseconds()
		return &ms
	}

	// b, still within its grace, announces itself healthy; its last
	// success was when a's was.
	now := clock.advance(grace - a.presenceInterval())
	a.view.observe(announcement{Box: "b", Inc: "1", Healthy: true, ReachedMsAgo: reached(lastOK)}, now, 2)
	clock.advance(2 * a.presenceInterval()) // a's grace is over, b heard within the timeout
	if a.healthy(clock.Now()) {
		t.Fatal("box a still healthy: the test's clock did not end its grace")
	}
	if steppedBack() {
		t.Fatal("box a stepped back for box b, whose last success was no later than its own: every box would hand its partitions over to another that cannot run them")
	}

	// b reaches the cluster again: a is the one cut off.
	now = clock.Now()
	a.view.observe(announcement{Box: "b", Inc: "1", Healthy: true, ReachedMsAgo: reached(now)}, now, 2)
	if !steppedBack() {
		t.Fatal("box a kept its partitions although box b reached the cluster after a last did")
	}
}
