package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// errClosed stands for the host's shutting-down error.
var errClosed = errors.New("shutting down")

func newQueue(depth, globalCap int) *Queue { return New(depth, globalCap, errClosed) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// queuedSignal makes q report each ticket that starts waiting, so a test
// waits on that instead of polling.
func queuedSignal(q *Queue) <-chan string {
	ch := make(chan string, 64)
	q.mu.Lock()
	q.queued = func(channel string) { ch <- channel }
	q.mu.Unlock()
	return ch
}

func TestQueueWaitBoundRefusesBusy(t *testing.T) {
	q := newQueue(8, 1)
	rel, err := q.Acquire(context.Background(), "a")
	must(t, err)
	defer rel()
	_, err = q.AcquireWithin(context.Background(), "b", 20*time.Millisecond)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
	if w, _ := q.Totals(); w != 0 {
		t.Errorf("%d tickets still waiting after the refusal, want 0", w)
	}
}

func TestQueueWaitBoundCoversOnlyTheWait(t *testing.T) {
	q := newQueue(8, 1)
	// Granted at once: the bound ending later changes nothing.
	rel, err := q.AcquireWithin(context.Background(), "a", time.Millisecond)
	must(t, err)
	queued := queuedSignal(q)
	got := make(chan error, 1)
	go func() {
		r, err := q.AcquireWithin(context.Background(), "b", time.Minute)
		if err == nil {
			r()
		}
		got <- err
	}()
	<-queued
	rel() // b is granted well within its bound
	if err := <-got; err != nil {
		t.Errorf("b: %v, want granted", err)
	}
}

func TestQueueSpareNeverJumpsWaitingTurns(t *testing.T) {
	q := newQueue(8, 2)
	queued := queuedSignal(q)
	a, err := q.Acquire(context.Background(), "a")
	must(t, err)
	// One slot free, nobody waits: a standby preparation gets it.
	s1, err := q.Spare(context.Background())
	must(t, err)
	// The cap is full: b waits.
	granted := make(chan string, 4)
	go func() {
		r, err := q.Acquire(context.Background(), "b")
		if err != nil {
			t.Error(err)
			return
		}
		granted <- "b"
		r()
	}()
	<-queued
	// A second spare waiter arrives after b: b is served first.
	go func() {
		r, err := q.Spare(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		// Released before it says so: the end's SpareHeld must not race
		// this goroutine's release.
		r()
		granted <- "spare"
	}()
	if got := <-queued; got != SpareQueued {
		t.Fatalf("queued %q, want the spare waiter", got)
	}
	s1() // frees one slot: b's, never the spare's
	if got := <-granted; got != "b" {
		t.Fatalf("first granted after the spare's release: %s, want b", got)
	}
	a()
	if got := <-granted; got != "spare" {
		t.Fatalf("then: %s, want the spare", got)
	}
	if n := q.SpareHeld(); n != 0 {
		t.Errorf("spare slots held at the end: %d, want 0", n)
	}
}

func TestQueueSpareWaitsWhileATicketWaitsForTheCap(t *testing.T) {
	// The cap is full and b's ticket waits for a slot: a spare is not
	// granted until b has one, even once a slot came free.
	q := newQueue(8, 1)
	queued := queuedSignal(q)
	a, err := q.Acquire(context.Background(), "a")
	must(t, err)
	next := make(chan func(), 1)
	go func() {
		r, err := q.Acquire(context.Background(), "b")
		if err != nil {
			t.Error(err)
			return
		}
		next <- r
	}()
	if got := <-queued; got != "b" {
		t.Fatalf("queued %q, want b", got)
	}
	spare := make(chan func(), 1)
	go func() {
		s, err := q.Spare(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		spare <- s
	}()
	if got := <-queued; got != SpareQueued {
		t.Fatalf("queued %q, want the spare", got)
	}
	a() // the slot goes to b, not to the spare that came later
	b := <-next
	if n := q.SpareHeld(); n != 0 {
		t.Fatalf("spare slots held while b runs at the cap: %d, want 0", n)
	}
	b()
	s := <-spare
	s()
	s() // idempotent
	if n := q.SpareHeld(); n != 0 {
		t.Errorf("spare slots held: %d, want 0", n)
	}
}

func TestQueueSpareGrantedWhileATicketWaitsOnlyForItsChannel(t *testing.T) {
	// Slots are free; a's second ticket waits behind a's running turn, not
	// for the cap: a spare (a's next standby, say) is granted, and a's
	// second ticket still gets a's slot when a's turn ends.
	q := newQueue(8, 2)
	queued := queuedSignal(q)
	a, err := q.Acquire(context.Background(), "a")
	must(t, err)
	next := make(chan func(), 1)
	go func() {
		r, err := q.Acquire(context.Background(), "a")
		if err != nil {
			t.Error(err)
			return
		}
		next <- r
	}()
	<-queued
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := q.Spare(ctx)
	if err != nil {
		t.Fatalf("spare with slots free and a ticket waiting only for its channel: %v, want granted", err)
	}
	if n := q.SpareHeld(); n != 1 {
		t.Errorf("spare slots held: %d, want 1", n)
	}
	a()
	(<-next)() // granted with the spare still held: the cap is 2
	s()
	if w, r := q.Totals(); w != 0 || r != 0 || q.SpareHeld() != 0 {
		t.Errorf("at the end: waiting %d, running %d, spares %d; want 0, 0, 0", w, r, q.SpareHeld())
	}
}

func TestQueueSpareRefusedAfterClose(t *testing.T) {
	q := newQueue(8, 1)
	q.Close()
	if _, err := q.Spare(context.Background()); !errors.Is(err, errClosed) {
		t.Errorf("err = %v, want errClosed", err)
	}
}

// A turn that finds no slot within queue.maxWaitSeconds is answered 429
// "busy" when the bound ends, never run; the turn holding the slot is not
// disturbed, and the next turn's deadline counts from when it runs.
func TestQueueFIFOPerChannel(t *testing.T) {
	q := newQueue(8, 0)
	first, err := q.Acquire(context.Background(), "a")
	must(t, err)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := q.Acquire(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			rel()
		}()
		waitFor(t, "ticket to queue", func() bool { return q.WaitingFor("a") == i })
	}
	first()
	wg.Wait()
	for i, got := range order {
		if got != i+1 {
			t.Fatalf("order = %v, want 1..5", order)
		}
	}
}

func TestQueueFull(t *testing.T) {
	q := newQueue(2, 0)
	rel, err := q.Acquire(context.Background(), "a")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 2; i++ {
		go q.Acquire(ctx, "a")
	}
	waitFor(t, "two waiting", func() bool { return q.WaitingFor("a") == 2 })
	if _, err := q.Acquire(context.Background(), "a"); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third waiter: err = %v, want ErrQueueFull", err)
	}
	if r2, err := q.Acquire(context.Background(), "b"); err != nil {
		t.Errorf("other channel refused: %v", err)
	} else {
		r2()
	}
	rel()
}

func TestQueueWaiterThatLeavesIsRemoved(t *testing.T) {
	q := newQueue(8, 0)
	rel, _ := q.Acquire(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := q.Acquire(ctx, "a"); done <- err }()
	waitFor(t, "waiter", func() bool { return q.WaitingFor("a") == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	if n := q.WaitingFor("a"); n != 0 {
		t.Errorf("waiting = %d after the client left", n)
	}
	rel()
	rel2, err := q.Acquire(context.Background(), "a")
	if err != nil {
		t.Fatalf("slot not free after leave: %v", err)
	}
	rel2()
}

func TestQueueGlobalCap(t *testing.T) {
	q := newQueue(8, 1)
	rel, _ := q.Acquire(context.Background(), "a")
	got := make(chan struct{})
	go func() { r, _ := q.Acquire(context.Background(), "b"); close(got); r() }()
	select {
	case <-got:
		t.Fatal("second channel ran past the global cap")
	case <-time.After(50 * time.Millisecond):
	}
	rel()
	<-got
}

// TestQueueSpareYieldingGivesWay: a yielding spare holder is told when a
// turn waits for the slot it holds (and gives it back: the turn runs), and
// when a standby's preparation waits; never when another yielding holder
// waits, so two of them cannot hand a slot back and forth.
func TestQueueSpareYieldingGivesWay(t *testing.T) {
	q := newQueue(8, 2)
	queued := queuedSignal(q)
	a, err := q.Acquire(context.Background(), "a")
	must(t, err)
	y, wanted, err := q.SpareYielding(context.Background())
	must(t, err)
	// Another yielding holder waits: no signal.
	gotY2 := make(chan func(), 1)
	go func() {
		r, _, err := q.SpareYielding(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		gotY2 <- r
	}()
	if got := <-queued; got != SpareQueued {
		t.Fatalf("queued %q, want the second yielding waiter", got)
	}
	select {
	case <-wanted:
		t.Fatal("a yielding holder was told to give way to another yielding holder")
	default:
	}
	// A turn waits: the holder is told, gives the slot back, the turn runs.
	granted := make(chan struct{})
	go func() {
		r, err := q.Acquire(context.Background(), "b")
		if err != nil {
			t.Error(err)
			return
		}
		close(granted)
		r()
	}()
	<-queued
	<-wanted
	y()
	<-granted
	a()
	y2 := <-gotY2 // the second holder gets a slot once the turns are done
	y2()
	if n := q.SpareHeld(); n != 0 {
		t.Errorf("spare slots held at the end: %d, want 0", n)
	}
}
