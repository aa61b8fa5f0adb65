package livesession

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// readyStandby sweeps and waits for the preparation it started (the
// sweep adds it before returning); the standby's id, "" for none.
func (r *rig) readyStandby(t *testing.T) string {
	t.Helper()
	r.k.Sweep()
	r.k.standbyRun.Wait()
	r.k.mu.Lock()
	defer r.k.mu.Unlock()
	if r.k.standby == nil {
		return ""
	}
	return r.k.standby.id
}

func listedIDs(k *Kind) []string {
	var ids []string
	for _, t := range k.Listed() {
		ids = append(ids, t.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestStandbyTakenByAPlainCreate: with sessions.standby a prepared
// session waits for nobody (no client lists it, the reaper's list keeps
// it, its deadline label outlasts any TTL it serves); a plain create takes
// it (no container made on the request, the owner and TTL its own, execs
// work) and the next is prepared; a create of another shape that finds
// the box full while the standby holds room removes the standby instead
// of refusing; an unused standby is replaced once it could not serve a
// whole TTL; without the key none is made.
func TestStandbyTakenByAPlainCreate(t *testing.T) {
	r := newRig(t, func(c *config.Sessions) { c.Standby, c.MaxLive, c.MaxPerClient = 1, 2, 2 })
	ttl := time.Duration(r.kit.Cfg.Sessions.TTLSeconds) * time.Second
	sid := r.readyStandby(t)
	if sid == "" {
		t.Fatal("no standby prepared")
	}
	if got := r.k.List(0, true); len(got) != 0 {
		t.Errorf("an admin lists the standby: %+v", got)
	}
	if _, err := r.k.Lookup(sid, 0, true); err == nil {
		t.Error("the standby can be looked up")
	}
	if got := listedIDs(r.k); !slices.Equal(got, []string{sid}) {
		t.Errorf("the reaper's list %v, want the standby", got)
	}
	r.d.Mu.Lock()
	made := len(r.d.Created)
	r.d.Mu.Unlock()

	r.clock.add(time.Minute)
	st, err := r.k.Create(context.Background(), apiwire.SessionCreate{}, alice)
	if err != nil || st.ID != sid || st.OwnerUID != alice || !st.ExpiresAt.Equal(r.clock.now().Add(ttl)) {
		t.Fatalf("plain create: %+v %v, want the standby %s owned by alice for a whole TTL", st, err, sid)
	}
	s, err := r.k.Lookup(sid, alice, false)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, res, _ := r.exec(t, s, "echo hi"); out != "hi\n" || res == nil {
		t.Errorf("exec in the taken standby: %q %+v", out, res)
	}
	r.k.standbyRun.Wait() // the take started the next one
	r.k.mu.Lock()
	next := r.k.standby
	r.k.mu.Unlock()
	r.d.Mu.Lock()
	madeNow := len(r.d.Created)
	r.d.Mu.Unlock()
	if next == nil || next.id == sid || madeNow != made+1 {
		t.Fatalf("after the take: next standby %v, containers %d, want one more", next, madeNow-made)
	}
	if l := s.label; !l.After(st.ExpiresAt) {
		t.Errorf("the taken session's deadline label %v is before its expiry %v", l, st.ExpiresAt)
	}

	// The box is full (alice's and the standby): another shape displaces it.
	c := r.kit.Cfg.Sessions
	small := c.WorkMB + c.TmpfsMB + c.OutputMB + 64
	st2, err := r.k.Create(context.Background(), apiwire.SessionCreate{MemoryMb: small}, bob)
	if err != nil || st2.ID == next.id {
		t.Fatalf("create of another shape on a full box: %+v %v, want a cold session", st2, err)
	}
	if got, want := listedIDs(r.k), []string{sid, st2.ID}; !slices.Equal(got, func() []string { slices.Sort(want); return want }()) {
		t.Errorf("listed %v, want alice's and bob's only", got)
	}

	// Room again: the next standby, replaced unused after a TTL.
	r.k.standbyRun.Wait() // bob's create asked for one: no room then
	r.k.Close(s)
	old := r.readyStandby(t)
	if old == "" {
		t.Fatal("no standby once there was room")
	}
	r.clock.add(ttl)
	if renewed := r.readyStandby(t); renewed == "" || renewed == old {
		t.Errorf("after a TTL unused: standby %q, want a new one in place of %q", renewed, old)
	}
	if got := r.kit.Counter("sandbox_sessions_closed_total", "reason", "standby"); got != 2 {
		t.Errorf("standbys closed as displaced or expired: %v, want 2", got)
	}

	plain := newRig(t, nil)
	if id := plain.readyStandby(t); id != "" {
		t.Errorf("a standby without sessions.standby: %s", id)
	}
}

// TestStandbyKeepsTheClientBound: a client at sessions.maxPerClient is
// refused (429 naming the key) and neither takes nor displaces the
// standby, which the next client gets.
func TestStandbyKeepsTheClientBound(t *testing.T) {
	r := newRig(t, func(c *config.Sessions) { c.Standby, c.MaxLive, c.MaxPerClient = 1, 2, 1 })
	first := r.readyStandby(t)
	if st, err := r.k.Create(context.Background(), apiwire.SessionCreate{}, alice); err != nil || st.ID != first {
		t.Fatalf("first create: %+v %v, want the standby", st, err)
	}
	r.k.standbyRun.Wait()
	second := r.readyStandby(t)
	if second == "" {
		t.Fatal("no second standby")
	}
	for _, p := range []apiwire.SessionCreate{{}, {MemoryMb: r.kit.Cfg.Sessions.MemoryMB - 1}} {
		_, err := r.k.Create(context.Background(), p, alice)
		var b *busy
		if !errors.As(err, &b) || !strings.Contains(err.Error(), "sessions.maxPerClient") {
			t.Errorf("create %+v past the client's bound: %v, want 429 naming sessions.maxPerClient", p, err)
		}
	}
	if st, err := r.k.Create(context.Background(), apiwire.SessionCreate{}, bob); err != nil || st.ID != second {
		t.Errorf("bob's create: %+v %v, want the standby %s kept for him", st, err, second)
	}
}

// TestStandbyListedState: GET /v1/turns marks the standby "preparing"
// until its supervisor is attached, then "ready" (what a client waits for
// before a create that should take it); a taken one is a plain session.
func TestStandbyListedState(t *testing.T) {
	r := newRig(t, func(c *config.Sessions) { c.Standby = 1 })
	r.d.attachEntered, r.d.attachRelease = make(chan struct{}), make(chan struct{})
	state := func() string {
		l := r.k.Listed()
		if len(l) != 1 {
			t.Fatalf("listed %+v, want the standby alone", l)
		}
		return l[0].Standby
	}
	r.k.Sweep()
	<-r.d.attachEntered // its container made, its supervisor not yet attached
	gauge := func(st string) float64 {
		mfs, err := r.kit.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if mf.GetName() == "sandbox_sessions_standby" && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == st {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	if got := state(); got != StandbyPreparing || gauge(StandbyPreparing) != 1 || gauge(StandbyReady) != 0 {
		t.Errorf("while prepared: %q (gauges %v %v), want %q", got, gauge(StandbyPreparing), gauge(StandbyReady), StandbyPreparing)
	}
	close(r.d.attachRelease)
	r.k.standbyRun.Wait()
	if got := state(); got != StandbyReady || gauge(StandbyPreparing) != 0 || gauge(StandbyReady) != 1 {
		t.Errorf("once prepared: %q (gauges %v %v), want %q", got, gauge(StandbyPreparing), gauge(StandbyReady), StandbyReady)
	}
	r.d.attachEntered = nil // the next preparation goes through
	st, err := r.k.Create(context.Background(), apiwire.SessionCreate{}, alice)
	if err != nil {
		t.Fatal(err)
	}
	r.k.standbyRun.Wait()
	for _, l := range r.k.Listed() {
		if l.ID == st.ID && l.Standby != "" || l.ID != st.ID && l.Standby != StandbyReady {
			t.Errorf("after the take: %+v (the session %s)", l, st.ID)
		}
	}
}
