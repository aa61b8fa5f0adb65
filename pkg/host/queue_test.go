package host

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

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

func TestQueueFIFOPerChannel(t *testing.T) {
	q := newQueue(8, 0)
	first, err := q.acquire(context.Background(), "a")
	must(t, err)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := q.acquire(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			rel()
		}()
		waitFor(t, "ticket to queue", func() bool { return q.waitingFor("a") == i })
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
	rel, err := q.acquire(context.Background(), "a")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < 2; i++ {
		go q.acquire(ctx, "a")
	}
	waitFor(t, "two waiting", func() bool { return q.waitingFor("a") == 2 })
	if _, err := q.acquire(context.Background(), "a"); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third waiter: err = %v, want ErrQueueFull", err)
	}
	if r2, err := q.acquire(context.Background(), "b"); err != nil {
		t.Errorf("other channel refused: %v", err)
	} else {
		r2()
	}
	rel()
}

func TestQueueWaiterThatLeavesIsRemoved(t *testing.T) {
	q := newQueue(8, 0)
	rel, _ := q.acquire(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := q.acquire(ctx, "a"); done <- err }()
	waitFor(t, "waiter", func() bool { return q.waitingFor("a") == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	if n := q.waitingFor("a"); n != 0 {
		t.Errorf("waiting = %d after the client left", n)
	}
	rel()
	rel2, err := q.acquire(context.Background(), "a")
	if err != nil {
		t.Fatalf("slot not free after leave: %v", err)
	}
	rel2()
}

func TestQueueGlobalCap(t *testing.T) {
	q := newQueue(8, 1)
	rel, _ := q.acquire(context.Background(), "a")
	got := make(chan struct{})
	go func() { r, _ := q.acquire(context.Background(), "b"); close(got); r() }()
	select {
	case <-got:
		t.Fatal("second channel ran past the global cap")
	case <-time.After(50 * time.Millisecond):
	}
	rel()
	<-got
}

// Through the host: two channels run at once, neither overlaps itself.
func TestNoOverlapWithinChannelWhileChannelsRunTogether(t *testing.T) {
	r := newRig(t, "", nil)
	gate := make(chan struct{})
	r.docker.runFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-gate
		time.Sleep(5 * time.Millisecond)
		return okRun(ctx, spec, stdin)
	}
	var wg sync.WaitGroup
	for _, ch := range []string{"a", "b"} {
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rel, err := r.h.queue.acquire(context.Background(), ch)
				if err != nil {
					t.Error(err)
					return
				}
				defer rel()
				if _, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: ch, SpeakerID: "s", Text: "x"}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	waitFor(t, "both channels running", func() bool {
		r.docker.mu.Lock()
		defer r.docker.mu.Unlock()
		return r.docker.total == 2
	})
	close(gate)
	wg.Wait()
	if r.docker.maxRunning["a"] != 1 || r.docker.maxRunning["b"] != 1 {
		t.Errorf("max running per channel = %v, want 1 each", r.docker.maxRunning)
	}
	if r.docker.maxTotal != 2 {
		t.Errorf("max running together = %d, want 2", r.docker.maxTotal)
	}
	r.assertClean(t)
}
