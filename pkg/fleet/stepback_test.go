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
// (the cut link's 25-43 s tails, docs/fleet.md, *Failure model*). Nor
// does a step back when b reached the cluster again only after a's
// round asked (the election over: a's next round will be answered). a
// steps back once b had reached the cluster before a's round asked, and
// that round stays unanswered.
func TestNoStepBackForAPeerThatLostTheClusterToo(t *testing.T) {
	r := newRig(t, 1, 2)
	f, _ := r.fleet("a")
	clock := &testClock{now: time.Now()}
	// Not started: the test is its probe and its membership rounds, on
	// its own clock.
	a, err := NewBox(f, BoxOptions{Name: "a", Executor: newRecorder(), AckWait: testAckWait, OnEvent: r.record,
		Logger: quiet, Peers: []string{"a", "b"}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	lastOK := clock.Now()
	a.probeOK.Store(lastOK.UnixNano())
	interval := a.presenceInterval()
	steppedBack := func() bool {
		a.reconcile()
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.steppedBack
	}
	announce := func(reached time.Time) {
		now := clock.Now()
		ms := now.Sub(reached).Milliseconds()
		a.view.observe(announcement{Box: "b", Inc: "1", Healthy: true, ReachedMsAgo: &ms}, now, 2)
	}

	// b, still within its grace, announces itself healthy; its last
	// success was when a's was. a's round asks, and is not answered.
	clock.advance(a.presenceTimeout())
	announce(lastOK)
	a.asking(clock.Now())
	clock.advance(2 * interval) // a's grace is over; b heard within the timeout
	if a.healthy(clock.Now()) {
		t.Fatal("box a still healthy: the test's clock did not end its grace")
	}
	if steppedBack() {
		t.Fatal("box a stepped back for box b, whose last success was no later than its own: every box would hand its partitions over to another that cannot run them")
	}

	// The election ends: b reaches the cluster after a's round asked.
	announce(clock.Now())
	clock.advance(interval / 2)
	if steppedBack() {
		t.Fatal("box a stepped back for box b, which reached the cluster only after a's round asked")
	}

	// a's next round asks after b's success and is not answered: a is
	// the one cut off.
	a.asking(clock.Now())
	clock.advance(interval)
	announce(clock.Now())
	if !steppedBack() {
		t.Fatal("box a kept its partitions although box b reached the cluster before a asked, and a's round went unanswered")
	}

	// a's next round asks, still cut off: a stays back until its probe
	// succeeds (it took its partitions up for a round's first interval,
	// every round, while the cut lasted).
	a.asking(clock.Now())
	announce(clock.Now())
	if !steppedBack() {
		t.Fatal("box a took its partitions up again when its next probe round asked, before any round succeeded")
	}
	a.probeOK.Store(clock.Now().UnixNano())
	if steppedBack() {
		t.Fatal("box a stayed back although its probe succeeded")
	}
}
