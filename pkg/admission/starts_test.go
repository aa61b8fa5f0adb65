package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startsSignal makes s report each start that waits.
func startsSignal(s *Starts) <-chan string {
	ch := make(chan string, 64)
	s.OnQueued(func(kind string) { ch <- kind })
	return ch
}

// startAsync starts a turn's (or a spare's) start in the background; its
// release arrives on the channel once granted.
func startAsync(t *testing.T, s *Starts, spare bool) <-chan func() {
	t.Helper()
	got := make(chan func(), 1)
	go func() {
		acquire := s.Start
		if spare {
			acquire = s.Spare
		}
		r, err := acquire(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		got <- r
	}()
	return got
}

func granted(ch <-chan func()) bool {
	select {
	case r := <-ch:
		r()
		return true
	default:
		return false
	}
}

func TestStartsNeverExceedTheLimit(t *testing.T) {
	const limit, callers = 3, 40
	s := NewStarts(limit, errClosed)
	var now, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acquire := s.Start
			if i%3 == 0 {
				acquire = s.Spare
			}
			rel, err := acquire(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			n := now.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if _, held := s.Totals(); held > limit {
				t.Errorf("%d starts hold a slot, limit %d", held, limit)
			}
			now.Add(-1)
			rel()
			rel() // idempotent: must not free a second slot
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("peak %d starts at once, limit %d", p, limit)
	}
	if w, held := s.Totals(); w != 0 || held != 0 || s.SpareHeld() != 0 {
		t.Errorf("at the end: waiting %d, holding %d, spares %d; want 0, 0, 0", w, held, s.SpareHeld())
	}
}

func TestStartsRefuseBeyondTheLimitUntilARelease(t *testing.T) {
	s := NewStarts(2, errClosed)
	queued := startsSignal(s)
	a, err := s.Start(context.Background())
	must(t, err)
	b, err := s.Start(context.Background())
	must(t, err)
	c := startAsync(t, s, false)
	select { // one of them happens: the start waits, or it is granted
	case got := <-queued:
		if got != StartQueued {
			t.Fatalf("queued %q, want a turn's start", got)
		}
	case r := <-c:
		r()
		t.Fatal("a third start was granted with the limit 2 held")
	}
	if _, held := s.Totals(); held != 2 || granted(c) {
		t.Fatalf("%d starts hold a slot with the limit 2 held and a third waiting, want 2", held)
	}
	a()
	(<-c)()
	b()
	if w, held := s.Totals(); w != 0 || held != 0 {
		t.Errorf("waiting %d, holding %d; want 0, 0", w, held)
	}
}

func TestStartsTurnsInArrivalOrder(t *testing.T) {
	s := NewStarts(1, errClosed)
	queued := startsSignal(s)
	hold, err := s.Start(context.Background())
	must(t, err)
	var order []int
	var mu sync.Mutex
	done := make(chan struct{}, 3)
	for i := range 3 {
		go func() {
			rel, err := s.Start(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			rel()
			done <- struct{}{}
		}()
		<-queued // i waits before i+1 arrives
	}
	hold()
	for range 3 {
		<-done
	}
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Errorf("granted in order %v, want [0 1 2]", order)
	}
}

func TestStartsWaitingTurnNotOvertakenBySpare(t *testing.T) {
	s := NewStarts(2, errClosed)
	queued := startsSignal(s)
	a, err := s.Start(context.Background())
	must(t, err)
	b, err := s.Start(context.Background())
	must(t, err)
	spare := startAsync(t, s, true) // arrives first
	if got := <-queued; got != SpareQueued {
		t.Fatalf("queued %q, want the spare", got)
	}
	turn := startAsync(t, s, false)
	if got := <-queued; got != StartQueued {
		t.Fatalf("queued %q, want the turn's start", got)
	}
	a() // the freed slot is the turn's (granted under the lock, before a returns)
	if s.SpareHeld() != 0 {
		t.Fatal("the spare got a slot while a turn's start waited for it")
	}
	rel := <-turn
	b() // one slot free, the turn holds the other: the last free one stays a turn's
	if s.SpareHeld() != 0 || granted(spare) {
		t.Fatal("the spare took the last free slot")
	}
	rel()
	(<-spare)()
	if w, held := s.Totals(); w != 0 || held != 0 || s.SpareHeld() != 0 {
		t.Errorf("at the end: waiting %d, holding %d, spares %d; want 0, 0, 0", w, held, s.SpareHeld())
	}
}

func TestStartsSparesLeaveOneSlotForATurn(t *testing.T) {
	tests := []struct {
		limit, spares int
	}{
		{limit: 1, spares: 1}, // the only slot, when nothing else starts
		{limit: 2, spares: 1},
		{limit: 4, spares: 3},
	}
	for _, tc := range tests {
		s := NewStarts(tc.limit, errClosed)
		queued := startsSignal(s)
		var rels []func()
		for range tc.spares {
			r, err := s.Spare(context.Background())
			must(t, err)
			rels = append(rels, r)
		}
		extra := startAsync(t, s, true)
		select {
		case got := <-queued:
			if got != SpareQueued {
				t.Fatalf("limit %d: queued %q, want the spare", tc.limit, got)
			}
		case r := <-extra:
			r()
			t.Fatalf("limit %d: spare %d granted", tc.limit, tc.spares+1)
		}
		if got := s.SpareHeld(); got != tc.spares {
			t.Errorf("limit %d: spares holding %d, want %d", tc.limit, got, tc.spares)
		}
		if tc.limit > 1 {
			// A turn still finds the slot the spares left.
			turn, err := s.Start(context.Background())
			if err != nil {
				t.Fatalf("limit %d: turn's start: %v", tc.limit, err)
			}
			turn()
		}
		if granted(extra) {
			t.Errorf("limit %d: spare %d granted", tc.limit, tc.spares+1)
		}
		rels[0]()
		(<-extra)()
		for _, r := range rels[1:] {
			r()
		}
	}
}

func TestStartsWaiterLeavesWhenItsContextEnds(t *testing.T) {
	s := NewStarts(1, errClosed)
	hold, err := s.Start(context.Background())
	must(t, err)
	for _, spare := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		acquire := s.Start
		if spare {
			acquire = s.Spare
		}
		if _, err := acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("spare %v: %v, want DeadlineExceeded", spare, err)
		}
		cancel()
		if w, _ := s.Totals(); w != 0 {
			t.Errorf("spare %v: %d waiting after the ctx ended, want 0", spare, w)
		}
	}
	hold()
	r, err := s.Start(context.Background()) // the slot is free again
	must(t, err)
	r()
}

func TestStartsRefusedAfterClose(t *testing.T) {
	s := NewStarts(2, errClosed)
	s.Close()
	if _, err := s.Start(context.Background()); !errors.Is(err, errClosed) {
		t.Errorf("start after close: %v, want %v", err, errClosed)
	}
	if _, err := s.Spare(context.Background()); !errors.Is(err, errClosed) {
		t.Errorf("spare after close: %v, want %v", err, errClosed)
	}
	if NewStarts(0, errClosed).Limit() != 1 {
		t.Error("a limit of 0 must mean 1 (a start must always be possible)")
	}
}

func TestSpareStartHoldsBothAndFreesTheGlobalSlotOnFailure(t *testing.T) {
	q, s := newQueue(8, 2), NewStarts(2, errClosed)
	rel, err := SpareStart(context.Background(), q, s)
	must(t, err)
	if q.SpareHeld() != 1 || s.SpareHeld() != 1 {
		t.Errorf("held: global %d, start %d; want 1, 1", q.SpareHeld(), s.SpareHeld())
	}
	rel()
	rel() // idempotent
	if q.SpareHeld() != 0 || s.SpareHeld() != 0 {
		t.Errorf("after release: global %d, start %d; want 0, 0", q.SpareHeld(), s.SpareHeld())
	}
	// The start slots are taken: the spare waits for one holding its
	// global slot, and gives that back when its ctx ends.
	a, err := s.Start(context.Background())
	must(t, err)
	b, err := s.Start(context.Background())
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := SpareStart(ctx, q, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SpareStart with no start slot: %v, want DeadlineExceeded", err)
	}
	if q.SpareHeld() != 0 {
		t.Errorf("global spare slots held after the failed start wait: %d, want 0", q.SpareHeld())
	}
	a()
	b()
}
