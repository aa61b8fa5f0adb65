package standby

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeWarm struct {
	channel, turn string
	aliveErr      error
	mu            sync.Mutex
	discards      []string
}

func (w *fakeWarm) Alive(context.Context) error { return w.aliveErr }
func (w *fakeWarm) Discard(reason string) {
	w.mu.Lock()
	w.discards = append(w.discards, reason)
	w.mu.Unlock()
}
func (w *fakeWarm) discarded() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.discards...)
}

// rig is a pool over fake standbys. Preparations wait on gate when set.
type rig struct {
	t      *testing.T
	p      *Pool
	mu     sync.Mutex
	warms  map[string]*fakeWarm // by turn id
	gate   chan struct{}
	fail   atomic.Bool
	dead   atomic.Bool
	seq    atomic.Int64
	events map[string]int
}

func newRig(t *testing.T, mutate func(*Options)) *rig {
	r := &rig{t: t, warms: map[string]*fakeWarm{}, events: map[string]int{}}
	o := Options{
		Max: 8, MaxAge: time.Minute,
		NewTurnID: func() string { return fmt.Sprintf("%032x", r.seq.Add(1)) },
		Prepare: func(ctx context.Context, channel, key, turn string, expiry time.Time) (Warm, error) {
			if r.gate != nil {
				select {
				case <-r.gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if r.fail.Load() {
				return nil, errors.New("docker said no")
			}
			w := &fakeWarm{channel: channel, turn: turn}
			if r.dead.Load() {
				w.aliveErr = errors.New("container not running")
			}
			r.mu.Lock()
			r.warms[turn] = w
			r.mu.Unlock()
			return w, nil
		},
		Event: func(ev, reason string) {
			r.mu.Lock()
			r.events[ev+"/"+reason]++
			r.mu.Unlock()
		},
	}
	if mutate != nil {
		mutate(&o)
	}
	r.p = New(o)
	t.Cleanup(r.p.Close)
	return r
}

func (r *rig) event(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[name]
}

func (r *rig) warm(turn string) *fakeWarm {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.warms[turn]
}

func (r *rig) waitState(channel, want string) Status {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := r.p.State(channel)
		if st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("channel %s state %s, want %s", channel, st.State, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestTakeHandsOutExactlyOnce(t *testing.T) {
	r := newRig(t, nil)
	r.p.Refill("a", "k1")
	st := r.waitState("a", StateReady)
	lease, reason := r.p.Take(context.Background(), "a", "k1")
	if lease == nil || reason != "" || lease.TurnID != st.TurnID {
		t.Fatalf("Take = %+v, %q; want the ready standby %s", lease, reason, st.TurnID)
	}
	if _, reason := r.p.Take(context.Background(), "a", "k1"); reason != ReasonNone {
		t.Errorf("second Take: reason %q, want %q (never reused)", reason, ReasonNone)
	}
	lease.Release()
	if d := r.warm(lease.TurnID).discarded(); len(d) != 0 {
		t.Errorf("a standby handed out was discarded: %v", d)
	}
	if r.event(EventHit+"/") != 1 || r.event(EventMiss+"/"+ReasonNone) != 1 {
		t.Errorf("events %v", r.events)
	}
	// The next one has a fresh turn id.
	r.p.Refill("a", "k1")
	if st2 := r.waitState("a", StateReady); st2.TurnID == st.TurnID {
		t.Error("the next standby reuses the turn id")
	}
}

func TestTakeNeverCrossesChannels(t *testing.T) {
	r := newRig(t, nil)
	r.p.Refill("a", "k")
	r.waitState("a", StateReady)
	if lease, reason := r.p.Take(context.Background(), "b", "k"); lease != nil || reason != ReasonNone {
		t.Fatalf("Take(b) = %+v, %q; want a miss", lease, reason)
	}
	if r.p.State("a").State != StateReady {
		t.Error("another channel's miss touched a's standby")
	}
}

func TestDiscardReasons(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		dead   bool
		act    func(r *rig) (takeReason string)
		want   string
	}{
		{"key changed", nil, false, func(r *rig) string {
			_, reason := r.p.Take(context.Background(), "a", "other-key")
			return reason
		}, ReasonChanged},
		{"dead at bind time", nil, true, func(r *rig) string {
			_, reason := r.p.Take(context.Background(), "a", "k")
			return reason
		}, ReasonDead},
		{"channel off", nil, false, func(r *rig) string {
			r.p.Drop("a", ReasonChannelOff)
			_, reason := r.p.Take(context.Background(), "a", "k")
			return reason
		}, ReasonChannelOff},
		{"within the bind margin", func(o *Options) { o.MaxAge = 3 * time.Second; o.BindMargin = 5 * time.Second }, false, func(r *rig) string {
			_, reason := r.p.Take(context.Background(), "a", "k")
			return reason
		}, ReasonExpired},
		{"pool closed", nil, false, func(r *rig) string {
			r.p.Close()
			_, reason := r.p.Take(context.Background(), "a", "k")
			return reason
		}, ReasonStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.mutate)
			r.dead.Store(tt.dead)
			r.p.Refill("a", "k")
			st := r.waitState("a", StateReady)
			reason := tt.act(r)
			switch tt.want {
			case ReasonChannelOff:
				if reason != ReasonNone {
					t.Errorf("Take after drop: %q, want %q", reason, ReasonNone)
				}
			case ReasonStopped:
				if reason != ReasonDisabled {
					t.Errorf("Take after close: %q, want %q", reason, ReasonDisabled)
				}
			default:
				if reason != tt.want {
					t.Errorf("Take reason %q, want %q", reason, tt.want)
				}
			}
			w := r.warm(st.TurnID)
			waitFor(t, "discard", func() bool { return len(w.discarded()) > 0 })
			time.Sleep(10 * time.Millisecond)
			if got := w.discarded(); !equal(got, []string{tt.want}) {
				t.Errorf("discards %v, want exactly [%s]", got, tt.want)
			}
			if r.event(EventDiscard+"/"+tt.want) != 1 {
				t.Errorf("events %v: want one discard/%s", r.events, tt.want)
			}
			waitFor(t, "unlisted", func() bool { return len(r.p.Turns()) == 0 })
		})
	}
}

func TestExpiryDiscards(t *testing.T) {
	r := newRig(t, func(o *Options) { o.MaxAge = 150 * time.Millisecond; o.BindMargin = time.Millisecond })
	r.p.Refill("a", "k")
	st := r.waitState("a", StateReady)
	w := r.warm(st.TurnID)
	waitFor(t, "expiry", func() bool { return equal(w.discarded(), []string{ReasonExpired}) })
	if r.p.State("a").State != StateNone {
		t.Error("expired standby still listed as the channel's")
	}
	if lease, _ := r.p.Take(context.Background(), "a", "k"); lease != nil {
		t.Error("expired standby handed out")
	}
	if st.Expiry.IsZero() || st.Expiry.After(time.Now().Add(time.Second)) {
		t.Errorf("expiry %v not within MaxAge", st.Expiry)
	}
}

func TestDropWhilePreparing(t *testing.T) {
	r := newRig(t, nil)
	r.gate = make(chan struct{})
	r.p.Refill("a", "k")
	st := r.waitState("a", StatePreparing)
	if _, reason := r.p.Take(context.Background(), "a", "k"); reason != ReasonPreparing {
		t.Errorf("Take while preparing: %q, want %q (no waiting)", reason, ReasonPreparing)
	}
	r.p.Drop("a", ReasonChannelOff)
	if ts := r.p.Turns(); len(ts) != 1 || ts[0].TurnID != st.TurnID {
		t.Errorf("a dropped preparation is no longer listed: %+v", ts)
	}
	close(r.gate)
	waitFor(t, "warm", func() bool { return r.warm(st.TurnID) != nil })
	w := r.warm(st.TurnID)
	waitFor(t, "discard", func() bool { return equal(w.discarded(), []string{ReasonChannelOff}) })
	if lease, _ := r.p.Take(context.Background(), "a", "k"); lease != nil {
		t.Error("a standby dropped while preparing was handed out")
	}
	waitFor(t, "unlisted", func() bool { return len(r.p.Turns()) == 0 })
}

func TestCapAcrossChannels(t *testing.T) {
	r := newRig(t, func(o *Options) { o.Max = 2 })
	for _, ch := range []string{"a", "b", "c"} {
		r.p.Refill(ch, "k")
	}
	r.waitState("a", StateReady)
	r.waitState("b", StateReady)
	if st := r.p.State("c"); st.State != StateNone {
		t.Errorf("channel c beyond the cap: %s", st.State)
	}
	if r.event(EventCapped+"/") != 1 {
		t.Errorf("events %v", r.events)
	}
	if lease, reason := r.p.Take(context.Background(), "c", "k"); lease != nil || reason != ReasonNone {
		t.Errorf("Take(c) = %v %q", lease, reason)
	}
	// Taking one frees a place.
	lease, _ := r.p.Take(context.Background(), "a", "k")
	lease.Release()
	r.p.Refill("c", "k")
	r.waitState("c", StateReady)
}

func TestDisabledWhenMaxZero(t *testing.T) {
	r := newRig(t, func(o *Options) { o.Max = 0 })
	r.p.Refill("a", "k")
	time.Sleep(20 * time.Millisecond)
	if r.p.State("a").State != StateNone || len(r.warms) != 0 {
		t.Error("standby prepared with max 0")
	}
	if _, reason := r.p.Take(context.Background(), "a", "k"); reason != ReasonDisabled {
		t.Errorf("reason %q", reason)
	}
}

func TestPrepareFailureLeavesCold(t *testing.T) {
	r := newRig(t, nil)
	r.fail.Store(true)
	r.p.Refill("a", "k")
	waitFor(t, "failure", func() bool { return r.event(EventPrepareFailed+"/") == 1 })
	if r.p.State("a").State != StateNone || len(r.p.Turns()) != 0 {
		t.Error("failed preparation still listed")
	}
	r.fail.Store(false)
	r.p.Refill("a", "k")
	r.waitState("a", StateReady)
}

func TestCloseDiscardsEverything(t *testing.T) {
	r := newRig(t, nil)
	r.p.Refill("a", "k")
	st := r.waitState("a", StateReady)
	r.gate = make(chan struct{}) // b's preparation hangs until Close cancels it
	r.p.Refill("b", "k")
	r.waitState("b", StatePreparing)
	done := make(chan struct{})
	go func() { r.p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if got := r.warm(st.TurnID).discarded(); !equal(got, []string{ReasonStopped}) {
		t.Errorf("ready standby discards %v", got)
	}
	if len(r.p.Turns()) != 0 {
		t.Errorf("listed after Close: %+v", r.p.Turns())
	}
	r.p.Refill("c", "k")
	if r.p.State("c").State != StateNone {
		t.Error("Refill after Close prepared")
	}
}

// TestTurnsListing: the turn id is listed from the preparation's start
// until the lease is released or the discard finished.
func TestTurnsListing(t *testing.T) {
	r := newRig(t, nil)
	r.gate = make(chan struct{})
	r.p.Refill("a", "k")
	st := r.waitState("a", StatePreparing)
	if ts := r.p.Turns(); len(ts) != 1 || ts[0].TurnID != st.TurnID || ts[0].State != StatePreparing {
		t.Fatalf("preparing: %+v", ts)
	}
	close(r.gate)
	r.waitState("a", StateReady)
	lease, _ := r.p.Take(context.Background(), "a", "k")
	if ts := r.p.Turns(); len(ts) != 1 || ts[0].TurnID != lease.TurnID {
		t.Fatalf("leased, not released: %+v", ts)
	}
	lease.Release()
	lease.Release()
	if ts := r.p.Turns(); len(ts) != 0 {
		t.Fatalf("released: %+v", ts)
	}
}

// TestRefillWhileLeased: the warm conversation's contract. A channel's next
// standby can be prepared while its last one is handed out and not yet
// released (its turn still runs): the lease's turn id and the new
// standby's differ, both are listed, the new one counts against Max (the
// lease does not: it is a turn now) and it is handed out once, to its own
// channel only.
func TestRefillWhileLeased(t *testing.T) {
	r := newRig(t, func(o *Options) { o.Max = 2 })
	r.p.Refill("a", "k")
	r.waitState("a", StateReady)
	lease, _ := r.p.Take(context.Background(), "a", "k")
	if lease == nil {
		t.Fatal("no lease")
	}
	defer lease.Release()
	r.p.Refill("a", "k")
	next := r.waitState("a", StateReady)
	if next.TurnID == lease.TurnID {
		t.Fatal("the standby prepared at bind reuses the bound turn id")
	}
	listed := map[string]string{}
	for _, l := range r.p.Turns() {
		listed[l.TurnID] = l.State
	}
	if listed[lease.TurnID] != "binding" || listed[next.TurnID] != StateReady {
		t.Errorf("Turns = %v, want the lease (binding) and the next standby (ready)", listed)
	}
	r.p.Refill("b", "k")
	r.waitState("b", StateReady)
	r.p.Refill("c", "k")
	if st := r.p.State("c"); st.State != StateNone || r.event(EventCapped+"/") != 1 {
		t.Errorf("channel c: %s, capped events %d; want none and 1 (a's next and b's fill Max 2)", st.State, r.event(EventCapped+"/"))
	}
	if l, reason := r.p.Take(context.Background(), "b", "other"); l != nil || reason != ReasonChanged {
		t.Errorf("Take(b, other key) = %v, %q", l, reason)
	}
	if l, _ := r.p.Take(context.Background(), "c", "k"); l != nil {
		t.Errorf("channel c got %s's standby", l.TurnID)
	}
	second, _ := r.p.Take(context.Background(), "a", "k")
	if second == nil || second.TurnID != next.TurnID {
		t.Fatalf("second Take(a) = %+v, want %s", second, next.TurnID)
	}
	second.Release()
	if l, reason := r.p.Take(context.Background(), "a", "k"); l != nil || reason != ReasonNone {
		t.Errorf("third Take(a) = %v, %q; want none (single use)", l, reason)
	}
}

// TestExpiryRenews: with Renew an expired standby is discarded and a fresh
// one (another turn id, the same key) replaces it; without Renew the
// channel stays cold (TestExpiryDiscards).
func TestExpiryRenews(t *testing.T) {
	r := newRig(t, func(o *Options) { o.MaxAge = 150 * time.Millisecond; o.BindMargin = time.Millisecond; o.Renew = true })
	r.p.Refill("a", "k")
	first := r.waitState("a", StateReady)
	w := r.warm(first.TurnID)
	waitFor(t, "expiry", func() bool { return equal(w.discarded(), []string{ReasonExpired}) })
	var next Status
	waitFor(t, "a renewed standby", func() bool {
		next = r.p.State("a")
		return next.State == StateReady && next.TurnID != first.TurnID
	})
	lease, reason := r.p.Take(context.Background(), "a", "k")
	if lease == nil || lease.TurnID != next.TurnID {
		t.Fatalf("Take after renewal = %+v, %q; want the renewed standby %s", lease, reason, next.TurnID)
	}
	lease.Release()
}
