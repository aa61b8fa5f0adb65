package sealedturn_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// rig is the sealed turn made from its Registration over a kit whose
// driver supports standbys (channel "c" on), without the host.
type rig struct {
	kit    *sandboxtest.Kit
	k      *sealedturn.Kind
	w      *sandboxtest.WarmDocker
	docker *sandboxtest.Docker
	units  *sandboxtest.Units
}

func newWarmRig(t *testing.T, extra string) (*rig, *sandboxtest.WarmDocker) {
	t.Helper()
	kit := sandboxtest.NewKit(t, extra, sandboxtest.KitOptions{Warm: true})
	made, err := sealedturn.Registration.New(kit.Deps)
	must(t, err)
	r := &rig{kit: kit, k: made.(*sealedturn.Kind), w: kit.Warm, docker: kit.Docker, units: kit.Units}
	must(t, kit.Host.State.SetMode("c", chanstate.ModeOn))
	t.Cleanup(r.shutdown)
	return r, kit.Warm
}

var must = sandboxtest.Must

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	sandboxtest.WaitFor(t, what, cond)
}

// shutdown stops as the host does: its turns first, then the kind.
func (r *rig) shutdown() {
	r.kit.Host.Stop()
	r.k.Stop()
}

func (r *rig) assertClean(t *testing.T) { t.Helper(); r.kit.AssertClean(t) }

// status is the channel's report as the host's channel status shows it.
func (r *rig) status(channel string) kind.Report {
	return r.k.ChannelReport(channel, chanstate.ModeOn)
}

// turnIn is an admitted turn's input as the host gives it to the kind.
type turnIn struct{ Channel, SpeakerID, SpeakerName, PrincipalID, Text string }

func turnInput(channel string) turnIn {
	return turnIn{Channel: channel, SpeakerID: "s1", SpeakerName: "Ann", PrincipalID: "p1", Text: "hi"}
}

// run runs one turn as the host's RunTurn does once it admitted it: a
// fresh turn id, the turn deadline, counted as the host's work; the turn's
// error is its run's or its cleanup's.
func (r *rig) run(ctx context.Context, in turnIn) (*protocol.Reply, string, error) {
	done, err := r.kit.Host.Admit(func() error { return nil })
	if err != nil {
		return nil, "", err
	}
	defer done()
	timeout, err := r.k.TurnTimeout("")
	if err != nil {
		return nil, "", err
	}
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	o := r.k.RunChannelTurn(ctx, &kind.Turn{
		ID: ids.NewTurnID(), Channel: in.Channel, Speaker: protocol.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		Principal: in.PrincipalID, Text: in.Text, Deadline: deadline, Rebind: func(string) {},
	})
	if o.RunErr != nil {
		// As the host logs a failed turn: the details stay in the log.
		o.Log.Warn(o.Failed, append([]any{"err", o.RunErr}, o.FailedAttrs...)...)
		return nil, o.ID, o.RunErr
	}
	if o.CleanupErr != nil {
		return nil, o.ID, o.CleanupErr
	}
	return o.Reply, o.ID, nil
}

func waitStandby(t *testing.T, r *rig, channel, want string) kind.Report {
	t.Helper()
	var st kind.Report
	waitFor(t, "standby "+want, func() bool { st = r.status(channel); return st.Standby == want })
	return st
}

func counter(t *testing.T, r *rig, name string, labels map[string]string) float64 {
	t.Helper()
	return r.kit.CounterWith(t, name, labels)
}

// readyStandby waits for channel's ready standby and returns its turn id.
func readyStandby(t *testing.T, r *rig, channel string) string {
	t.Helper()
	var id string
	waitFor(t, "a ready standby of "+channel, func() bool {
		st := r.k.Pool().State(channel)
		id = st.TurnID
		return st.State == standby.StateReady
	})
	return id
}

func holdRuns(r *rig) (chan string, func()) { return sandboxtest.HoldRuns(r.docker) }

// TestStandbyServesTheNextTurn: after a cold turn the channel gets a
// standby (container created and started, broker units started, a
// placeholder policy, listed for the reaper); the next turn binds it: the
// same turn id, no container created on its path, the full policy in place
// before stdin, and the ordinary cleanup. Then the next standby follows.
func TestStandbyServesTheNextTurn(t *testing.T) {
	r, w := newWarmRig(t, "")
	_, cold, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	st := waitStandby(t, r, "c", standby.StateReady)
	listed := r.k.Listed()
	if len(listed) != 1 || listed[0].Standby != standby.StateReady || listed[0].ID == cold || listed[0].ChannelTag != "c" {
		t.Fatalf("ActiveTurns = %+v, want the ready standby", listed)
	}
	sb := listed[0].ID
	if st.StandbyExpires.IsZero() || time.Until(time.Unix(st.StandbyExpires.Unix(), 0)) > 301*time.Second {
		t.Errorf("standby expiry %d, want within the 300 s default", st.StandbyExpires.Unix())
	}
	// The standby's objects: placeholder policy, units, a started container.
	polPath := filepath.Join(r.kit.Cfg.PolicyDir, sb+".json")
	full, pend, err := policy.Read(polPath)
	if err != nil || full != nil || pend == nil || pend.TurnID != sb {
		t.Fatalf("standby policy file: %+v %+v %v; want a placeholder", full, pend, err)
	}
	// Exactly the names the turn's policy will hold (least credential).
	if want := []string{"mcp-key", "model", "tool-key"}; !slices.Equal(pend.Credentials, want) {
		t.Errorf("placeholder credentials %v, want %v", pend.Credentials, want)
	}
	placeholderInode := sandboxtest.Inode(polPath)
	spec := r.docker.Created[len(r.docker.Created)-1]
	if spec.Labels[layout.LabelTurn] != sb || spec.Labels[layout.LabelStandby] == "" || spec.Labels[layout.LabelDeadline] != spec.Labels[layout.LabelStandby] {
		t.Errorf("standby labels %v", spec.Labels)
	}
	if _, ok := w.Started["id-"+spec.Name]; !ok {
		t.Error("standby container not started")
	}
	if r.units.ActiveCount() != 1 {
		t.Error("standby broker units not started")
	}
	created := len(r.docker.Created)

	reply, id, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	if !reply.OK || id != sb {
		t.Fatalf("second turn %q (reply %+v), want the standby's turn %s", id, reply, sb)
	}
	w.WMu.Lock()
	p := w.Bound["id-"+spec.Name]
	w.WMu.Unlock()
	if p == nil || p.TurnID != sb || p.Identity.Channel != "c" || p.Identity.SpeakerID != "s1" || p.Identity.PrincipalID != "p1" {
		t.Fatalf("policy at stdin time: %+v; want the turn's full policy", p)
	}
	if d := time.Until(p.Deadline()); d < 100*time.Second || d > 121*time.Second {
		t.Errorf("bound policy deadline in %v, want the turn's 120 s", d)
	}
	w.WMu.Lock()
	boundInode := w.Inodes["id-"+spec.Name]
	w.WMu.Unlock()
	if boundInode == 0 || boundInode != placeholderInode {
		t.Errorf("policy file inode %d at stdin, placeholder's %d: the broker unit binds the placeholder's file, so the policy must be written in place", boundInode, placeholderInode)
	}
	r.docker.Mu.Lock()
	for _, c := range r.docker.Created[created:] {
		if c.Labels[layout.LabelTurn] == sb {
			t.Error("the bound turn created a container")
		}
	}
	r.docker.Mu.Unlock()
	if counter(t, r, "sandbox_standby_turns_total", map[string]string{"result": "hit"}) != 1 {
		t.Error("hit not counted")
	}
	// The ordinary cleanup removed the standby's objects; a new standby
	// (another turn id) is prepared.
	next := waitStandby(t, r, "c", standby.StateReady)
	if nxt := r.k.Pool().State("c").TurnID; nxt == sb || nxt == "" {
		t.Errorf("next standby %q", nxt)
	}
	_ = next
	if _, err := os.Stat(filepath.Join(r.kit.Cfg.RunRoot, sb)); !os.IsNotExist(err) {
		t.Error("bound turn's directory left")
	}
	r.shutdown()
	r.assertClean(t)
	if counter(t, r, "sandbox_standby_discards_total", map[string]string{"reason": standby.ReasonStopped}) != 1 {
		t.Error("shutdown discard not counted")
	}
}

// TestStandbyDeadContainerTakesColdPath: a standby whose container died
// while waiting is found at bind time; the turn succeeds on the cold path
// and the dead standby is removed.
func TestStandbyDeadContainerTakesColdPath(t *testing.T) {
	r, w := newWarmRig(t, "")
	_, _, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	waitStandby(t, r, "c", standby.StateReady)
	sb := r.k.Pool().State("c").TurnID
	w.WMu.Lock()
	for id := range w.Started {
		w.Dead[id] = true
	}
	w.WMu.Unlock()
	reply, id, err := r.run(context.Background(), turnInput("c"))
	if err != nil || !reply.OK {
		t.Fatalf("turn after a dead standby: %v %+v", err, reply)
	}
	if id == sb {
		t.Fatal("the dead standby was used")
	}
	if counter(t, r, "sandbox_standby_turns_total", map[string]string{"result": "miss", "reason": standby.ReasonDead}) != 1 {
		t.Error("dead miss not counted")
	}
	waitFor(t, "dead standby removed", func() bool {
		_, err := os.Stat(filepath.Join(r.kit.Cfg.PolicyDir, sb+".json"))
		return os.IsNotExist(err)
	})
	r.shutdown()
	r.assertClean(t)
}

// TestStandbyDisabled: standby.enabled false (or max 0) keeps every turn on
// the cold path.
func TestStandbyDisabled(t *testing.T) {
	for _, extra := range []string{"standby:\n  enabled: false\n", "standby:\n  max: 0\n"} {
		r, _ := newWarmRig(t, extra)
		for i := 0; i < 2; i++ {
			_, _, err := r.run(context.Background(), turnInput("c"))
			must(t, err)
		}
		time.Sleep(20 * time.Millisecond)
		if r.k.Pool() != nil || r.status("c").Standby != "" || len(r.docker.Created) != 2 {
			t.Errorf("%q: standbys made: %d containers for 2 turns", extra, len(r.docker.Created))
		}
		r.assertClean(t)
	}
}

// TestStandbyFailedPreparationLeavesNothing: a preparation that fails
// (here the container start) removes what it made; the next turn is cold.
func TestStandbyFailedPreparationLeavesNothing(t *testing.T) {
	r, w := newWarmRig(t, "")
	w.StartErr = io.ErrUnexpectedEOF
	_, _, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	waitFor(t, "failed preparation counted", func() bool {
		return counter(t, r, "sandbox_standby_prepares_total", map[string]string{"result": "failed"}) == 1
	})
	r.assertClean(t)
	_, _, err = r.run(context.Background(), turnInput("c"))
	must(t, err)
}

// TestStandbyBrokerServiceMustStart: a standby whose broker service fails
// to start is never offered (the unit allows one start a turn, so the bound
// turn could not activate it); the next turn takes the cold path and works.
func TestStandbyBrokerServiceMustStart(t *testing.T) {
	r, w := newWarmRig(t, "")
	r.units.Mu.Lock()
	r.units.ServiceErr = errors.New("fake: job failed")
	r.units.Mu.Unlock()
	_, _, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	waitFor(t, "failed preparation counted", func() bool {
		return counter(t, r, "sandbox_standby_prepares_total", map[string]string{"result": "failed"}) == 1
	})
	r.units.Mu.Lock()
	asked := len(r.units.Services)
	r.units.Mu.Unlock()
	if asked != 1 {
		t.Errorf("broker service starts waited for = %d, want 1 (the standby's)", asked)
	}
	w.WMu.Lock()
	startedN := len(w.Started)
	w.WMu.Unlock()
	if startedN != 0 {
		t.Errorf("%d standby containers started although the broker did not run", startedN)
	}
	r.assertClean(t)
	_, _, err = r.run(context.Background(), turnInput("c"))
	must(t, err)
	if got := counter(t, r, "sandbox_standby_turns_total", map[string]string{"result": "hit"}); got != 0 {
		t.Errorf("standby hits = %v, want 0", got)
	}
}

// TestStandbyOtherCredentialTakesColdPath: a turn whose rules select
// another model credential than the standby's broker holds does not bind
// it; the standby is discarded and the turn runs cold with its credential.
func TestStandbyOtherCredentialTakesColdPath(t *testing.T) {
	r, _ := newWarmRig(t, "")
	_, _, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	waitStandby(t, r, "c", standby.StateReady)
	sb := r.k.Pool().State("c").TurnID
	in := turnInput("c")
	in.PrincipalID = "p-special" // rule: credential special-key
	_, id, err := r.run(context.Background(), in)
	must(t, err)
	if id == sb {
		t.Fatal("a standby made for credential model served a special-key turn")
	}
	if counter(t, r, "sandbox_standby_turns_total", map[string]string{"result": "miss", "reason": standby.ReasonChanged}) != 1 {
		t.Error("miss for another credential not counted as changed")
	}
	// The next standby is made for the credential the last turn used.
	waitStandby(t, r, "c", standby.StateReady)
	next := r.k.Pool().State("c").TurnID
	_, pend, err := policy.Read(filepath.Join(r.kit.Cfg.PolicyDir, next+".json"))
	if err != nil || pend == nil || !slices.Contains(pend.Credentials, "special-key") || slices.Contains(pend.Credentials, "model") {
		t.Errorf("next placeholder %+v, %v: want special-key, not model", pend, err)
	}
}

// TestStandbyNotReusedAcrossChannels: a standby of one channel never serves
// another.
func TestStandbyNotReusedAcrossChannels(t *testing.T) {
	r, _ := newWarmRig(t, "")
	must(t, r.kit.Host.State.SetMode("d", chanstate.ModeOn))
	_, _, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	waitStandby(t, r, "c", standby.StateReady)
	sb := r.k.Pool().State("c").TurnID
	_, id, err := r.run(context.Background(), turnInput("d"))
	must(t, err)
	if id == sb {
		t.Fatal("channel d used channel c's standby")
	}
	if r.k.Pool().State("c").TurnID != sb {
		t.Error("channel c's standby was touched")
	}
}

// TestStandbyPreparedWhenBound: a conversation stays warm. While a turn
// bound to the channel's standby still runs, the channel's next standby is
// prepared (two containers of the channel for a moment), so the next turn,
// sent as soon as the reply came back, binds it. Each standby serves one
// turn: three turns, three turn ids, the last two on standbys.
func TestStandbyPreparedWhenBound(t *testing.T) {
	r, _ := newWarmRig(t, "")
	_, cold, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	first := readyStandby(t, r, "c")
	if first == "" || first == cold {
		t.Fatalf("first standby %q after cold turn %q", first, cold)
	}
	started, release := holdRuns(r)
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, id, err := r.run(context.Background(), turnInput("c"))
		done <- result{id, err}
	}()
	if got := <-started; got != first {
		t.Fatalf("the held turn runs as %s, want the standby's turn %s", got, first)
	}
	// The bound turn is still running: its next standby is made meanwhile.
	var next string
	waitFor(t, "the next standby while the bound turn runs", func() bool {
		st := r.k.Pool().State("c")
		next = st.TurnID
		return st.State == standby.StateReady && next != first
	})
	if n := r.docker.LiveCount(); n != 2 {
		t.Errorf("%d containers live while the bound turn runs beside its successor, want 2", n)
	}
	release()
	res := <-done
	must(t, res.err)
	if res.id != first {
		t.Fatalf("second turn ran as %s, want %s", res.id, first)
	}
	reply, id, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	if !reply.OK || id != next {
		t.Fatalf("third turn ran as %s, want the standby prepared at bind %s", id, next)
	}
	if got := counter(t, r, "sandbox_standby_turns_total", map[string]string{"result": "hit"}); got != 2 {
		t.Errorf("standby hits %v, want 2", got)
	}
	r.shutdown()
	r.assertClean(t)
}

// TestStandbyPreparedWhileColdTurnRuns: a cold turn prepares its
// channel's next standby once its own container and broker are up, while
// it still runs; the next turn binds it. (With a turn of the channel
// queued behind it, queue.spare grants the preparation only once nothing
// waits: see the report of issue 25's warm part.)
func TestStandbyPreparedWhileColdTurnRuns(t *testing.T) {
	r, _ := newWarmRig(t, "")
	started, release := holdRuns(r)
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, id, err := r.run(context.Background(), turnInput("c"))
		done <- result{id, err}
	}()
	cold := <-started
	sb := readyStandby(t, r, "c")
	if sb == "" || sb == cold {
		t.Fatalf("standby %q beside the cold turn %q", sb, cold)
	}
	release()
	a := <-done
	must(t, a.err)
	_, id, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	if a.id != cold || id != sb {
		t.Errorf("turns ran as %s, %s; want the cold %s, then the standby %s", a.id, id, cold, sb)
	}
}

// TestStandbyPreparedAtBindKeepsTheCap: standby.max counts every standby,
// those prepared while a turn runs included; a channel beyond it takes the
// cold path and never another channel's standby.
func TestStandbyPreparedAtBindKeepsTheCap(t *testing.T) {
	r, _ := newWarmRig(t, "standby:\n  max: 1\n")
	must(t, r.kit.Host.State.SetMode("d", chanstate.ModeOn))
	_, _, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	sbC := readyStandby(t, r, "c")
	// d's cold turn cannot prepare one: c's fills the cap.
	_, idD, err := r.run(context.Background(), turnInput("d"))
	must(t, err)
	if idD == sbC {
		t.Fatal("channel d used channel c's standby")
	}
	if st := r.status("d").Standby; st != standby.StateNone {
		t.Errorf("channel d has a standby (%s) beyond standby.max 1", st)
	}
	if got := counter(t, r, "sandbox_standby_prepares_total", map[string]string{"result": "capped"}); got < 1 {
		t.Errorf("capped preparations %v, want at least 1", got)
	}
	// c binds its standby: the place it held is free for c's next one.
	_, id, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	if id != sbC {
		t.Fatalf("c's turn ran as %s, want its standby %s", id, sbC)
	}
	nextC := readyStandby(t, r, "c")
	if nextC == sbC {
		t.Error("the bound standby is offered again")
	}
	if ready, preparing := r.k.Pool().Counts(); ready+preparing > 1 {
		t.Errorf("%d ready + %d preparing standbys, over standby.max 1", ready, preparing)
	}
}

// TestStandbyFailedPreparationNotRetriedAtCleanup: a turn whose next
// standby failed to prepare while it ran (under load: its broker did not
// start) does not retry at its cleanup; the channel's next turn does.
func TestStandbyFailedPreparationNotRetriedAtCleanup(t *testing.T) {
	r, _ := newWarmRig(t, "")
	r.units.Mu.Lock()
	r.units.ServiceErr = errors.New("fake: job failed")
	r.units.Mu.Unlock()
	started, release := holdRuns(r)
	done := make(chan error, 1)
	go func() {
		_, _, err := r.run(context.Background(), turnInput("c"))
		done <- err
	}()
	<-started
	waitFor(t, "the failed preparation while the turn runs", func() bool {
		return counter(t, r, "sandbox_standby_prepares_total", map[string]string{"result": "failed"}) == 1
	})
	release()
	must(t, <-done)
	if st := r.k.Pool().State("c"); st.State != standby.StateNone {
		t.Errorf("standby %s after cleanup: a failed preparation was retried at once", st.State)
	}
	r.units.Mu.Lock()
	asked := len(r.units.Services)
	r.units.Mu.Unlock()
	if got := counter(t, r, "sandbox_standby_prepares_total", map[string]string{"result": "failed"}); asked != 1 || got != 1 {
		t.Errorf("broker service starts %d, failed preparations %v; want 1 and 1", asked, got)
	}
	r.assertClean(t)
}

// TestStandbyChannelOffDiscards (moved from pkg/host, whose test of this
// name keeps the API's side: the status and listing show the standby, the
// mode route reaches the kind): switching the channel off removes its
// standby, counted as channel_off, and no new one is prepared for it.
func TestStandbyChannelOffDiscards(t *testing.T) {
	r, _ := newWarmRig(t, "")
	_, _, err := r.run(context.Background(), turnInput("c"))
	must(t, err)
	waitStandby(t, r, "c", standby.StateReady)
	must(t, r.kit.Host.State.SetMode("c", chanstate.ModeOff))
	r.k.ChannelMode("c", chanstate.ModeOff, "")
	// The discard is counted once its cleanup returned (container, units,
	// then the directory and policy file): the sync point for "nothing left".
	waitFor(t, "the channel_off discard counted", func() bool {
		return counter(t, r, "sandbox_standby_discards_total", map[string]string{"reason": standby.ReasonChannelOff}) == 1
	})
	r.assertClean(t)
	if st := r.status("c"); st.Standby != standby.StateNone {
		t.Errorf("standby %q after channel off", st.Standby)
	}
}
