package richsession_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

const richExtra = `rich:
  enabled: true
  startTimeoutSeconds: 1
profiles:
  - name: helper
    model: claude-test
    thinking: high
    tools: [lookup]
    mcp: [search]
    credential: anthropic
  - name: other
    model: claude-other
`

// fakeRichControl stands in for the session's broker and worker
// (pkg/sandboxtest's, shared by the host's and the kind's tests).
type fakeRichControl = sandboxtest.RichControl

// rig is the kind made from its Registration over a sandboxtest.Kit,
// without the host; its rich containers run until killed.
type rig struct {
	kit    *sandboxtest.Kit
	k      *richsession.Kind
	docker *sandboxtest.Docker
	units  *sandboxtest.Units
}

var (
	must    = sandboxtest.Must
	okRun   = sandboxtest.OKRun
	waitFor = func(t *testing.T, what string, cond func() bool) { t.Helper(); sandboxtest.WaitFor(t, what, cond) }
)

type (
	ContainerSpec = sandbox.ContainerSpec
	RunResult     = sandbox.RunResult
)

// richRig is a rig whose sessions go after idle.
func richRig(t *testing.T, idle time.Duration) (*rig, *fakeRichControl) {
	t.Helper()
	return richRigFull(t, idle, "", nil)
}

// richRigFull is richRig with more configuration and a clock (nil: the
// real one).
func richRigFull(t *testing.T, idle time.Duration, extra string, now func() time.Time) (*rig, *fakeRichControl) {
	t.Helper()
	return richRigLog(t, idle, richExtra+extra, now, nil)
}

// richRigLog is a rig over the whole configuration cfg, logging to log
// (nil: quiet).
func richRigLog(t *testing.T, idle time.Duration, cfg string, now func() time.Time, log *slog.Logger) (*rig, *fakeRichControl) {
	t.Helper()
	return richRigNew(t, cfg, now, log, richsession.Tuning{Idle: idle})
}

// richRigTuned is a rig with the kind's tuning tu (its Control the rig's
// fake).
func richRigTuned(t *testing.T, cfg string, log *slog.Logger, tu richsession.Tuning) (*rig, *fakeRichControl) {
	t.Helper()
	return richRigNew(t, cfg, nil, log, tu)
}

func richRigNew(t *testing.T, cfg string, now func() time.Time, log *slog.Logger, tu richsession.Tuning) (*rig, *fakeRichControl) {
	t.Helper()
	ctl := &fakeRichControl{BrokerErr: richsession.ErrBroker}
	kit := sandboxtest.NewKit(t, cfg, sandboxtest.KitOptions{Now: now, Logger: log})
	if tu.Control == nil {
		tu.Control = ctl
	}
	kit.Deps.Tuning = []any{&tu}
	made, err := richsession.Registration.New(kit.Deps)
	must(t, err)
	r := &rig{kit: kit, k: made.(*richsession.Kind), docker: kit.Docker, units: kit.Units}
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		if !spec.Rich {
			return okRun(ctx, spec, stdin)
		}
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	t.Cleanup(r.shutdown)
	return r, ctl
}

// shutdown stops as the host does: its turns first, then the kind.
func (r *rig) shutdown() {
	r.kit.Host.Stop()
	r.k.Stop()
}

func (r *rig) assertClean(t *testing.T) { t.Helper(); r.kit.AssertClean(t) }

// setRich puts channel in mode rich with profile as the host's mode route
// does once the kind accepted the profile.
func (r *rig) setRich(channel, profile string) error {
	if err := r.k.CheckMode(profile); err != nil {
		return err
	}
	if err := r.kit.Host.State.SetRich(channel, profile); err != nil {
		return err
	}
	r.k.ChannelMode(channel, chanstate.ModeRich, profile)
	return nil
}

// errTurnFailed is what the host answers a turn whose run failed on its
// own (not by its deadline, a cancel or the client leaving).
var errTurnFailed = errors.New("turn failed")

// run runs one turn as the host's RunRichTurn does once it admitted it:
// a fresh turn id, the profile's turn bound, counted as the host's work.
func (r *rig) run(ctx context.Context, in turnIn) (*protocol.Reply, string, error) {
	return r.runAnswer(ctx, in, nil)
}

// runAnswer is run with answer (when not nil) called with a successful
// turn's outcome before its reply budget is given back, where the host
// writes the turn's answer.
func (r *rig) runAnswer(ctx context.Context, in turnIn, answer func(kind.Outcome)) (*protocol.Reply, string, error) {
	done, err := r.kit.Host.Admit(func() error { return nil })
	if err != nil {
		return nil, "", err
	}
	defer done()
	profile := r.kit.Host.State.Profile(in.Channel)
	timeout, err := r.k.TurnTimeout(profile)
	if err != nil {
		return nil, "", err
	}
	deadline := r.kit.Deps.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	o := r.k.RunChannelTurn(ctx, &kind.Turn{
		ID: ids.NewTurnID(), Channel: in.Channel, Profile: profile, Speaker: protocol.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		Principal: in.PrincipalID, Text: in.Text, Attachments: in.Attachments, Deadline: deadline, Reset: in.Reset, Rebind: func(string) {},
	})
	if o.Release != nil {
		defer o.Release()
	}
	if o.RunErr != nil {
		// As the host logs a failed turn: the details stay in the log.
		o.Log.Warn(o.Failed, append([]any{"err", o.RunErr}, o.FailedAttrs...)...)
	}
	switch {
	case o.CleanupErr != nil:
		return nil, o.ID, o.CleanupErr
	case o.RunErr != nil && context.Cause(ctx) == nil:
		return nil, o.ID, fmt.Errorf("%w: %w", errTurnFailed, o.RunErr)
	case o.RunErr != nil:
		return nil, o.ID, o.RunErr
	}
	if answer != nil {
		answer(o)
	}
	return o.Reply, o.ID, nil
}

type turnIn struct {
	Channel, SpeakerID, SpeakerName, PrincipalID, Text string
	Reset                                              bool
	Attachments                                        []richproto.Attachment
}

func richTurn(t *testing.T, r *rig, channel, text string) (string, string, error) {
	t.Helper()
	reply, id, err := r.run(context.Background(), turnIn{Channel: channel, SpeakerID: "u-1", SpeakerName: "Ann", PrincipalID: "p-1", Text: text})
	if err != nil {
		return "", id, err
	}
	if !reply.OK {
		t.Fatalf("reply not ok: %+v", reply)
	}
	return reply.Text, id, nil
}

func (r *rig) richContainers() []ContainerSpec {
	r.docker.Mu.Lock()
	defer r.docker.Mu.Unlock()
	var out []ContainerSpec
	for _, s := range r.docker.Created {
		if s.Rich {
			out = append(out, s)
		}
	}
	return out
}

// TestRichSessionServesTurns: the first turn starts the session (one
// container of the seed's limits with the rich argument, one broker unit
// with a rich policy), later turns reuse it, each turn is bound with its
// own id and the admitted identity, and the session is listed for the
// reaper with its lifetime.
func TestRichSessionServesTurns(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	if err := r.setRich("room", "helper"); err != nil || r.kit.Host.State.Profile("room") != "helper" {
		t.Fatalf("mode rich: %v, profile %q", err, r.kit.Host.State.Profile("room"))
	}
	var ids_ []string
	for i, text := range []string{"one", "two", "three"} {
		got, id, err := richTurn(t, r, "room", text)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		ids_ = append(ids_, id)
		if want := strings.Join([]string{"one", "two", "three"}[:i+1], "|"); got != want {
			t.Errorf("turn %d reply %q, want the session's history %q", i, got, want)
		}
	}
	conts := r.richContainers()
	if len(conts) != 1 {
		t.Fatalf("%d rich containers, want 1 for three turns", len(conts))
	}
	c := conts[0]
	if c.MemoryMB != 1536 || c.CPUs != 1 || c.Pids != 256 || c.TmpfsMB != 512 || c.Image != r.kit.Cfg.Image {
		t.Errorf("container limits %+v", c)
	}
	session := c.Labels[layout.LabelTurn]
	if ids.ValidTurnID(session) != nil || c.TurnDir == "" || !strings.HasSuffix(c.TurnDir, session) {
		t.Errorf("session %q turn dir %q", session, c.TurnDir)
	}
	r.docker.Mu.Lock()
	pol := r.docker.Policies[len(r.docker.Policies)-1]
	r.docker.Mu.Unlock()
	if pol == nil || pol.Rich == nil || pol.TurnID != session || pol.Rich.Model != "claude-test" || pol.Rich.Credential != "anthropic" ||
		pol.Identity.SpeakerID != "" || len(pol.Tools) != 1 || len(pol.MCP) != 1 || pol.Limits.MaxCalls != 128 || pol.Model != (policy.Model{}) {
		t.Errorf("session policy %+v", pol)
	}
	if d := time.UnixMilli(pol.DeadlineUnixMs); d.Sub(time.Now()) > richsession.SessionLifetime || c.Labels[layout.LabelDeadline] == "" {
		t.Errorf("session deadline %v", d)
	}
	if got := len(r.units.Started); got != 1 {
		t.Errorf("%d broker starts, want 1", got)
	}
	binds := ctl.BindList()
	if len(binds) != 3 {
		t.Fatalf("%d binds", len(binds))
	}
	for i, b := range binds {
		if b.Turn.ID != ids_[i] || b.Identity.SpeakerID != "u-1" || b.Identity.PrincipalID != "p-1" || b.Identity.Channel != "room" ||
			b.Turn.Thinking != "high" || b.Turn.Model != "claude-test" || len(b.Turn.Tools) != 1 || len(b.Turn.MCP) != 1 || b.Turn.Fresh ||
			b.Turn.MaxOutputTokens == 0 || b.Turn.MaxOutputTokens != pol.Rich.MaxOutputTokens {
			t.Errorf("bind %d: %+v", i, b)
		}
		if err := b.Validate(pol); err != nil {
			t.Errorf("bind %d does not validate against the session policy: %v", i, err)
		}
	}
	listed := false
	for _, a := range r.k.Listed() {
		if a.ID == session && a.Rich && a.DeadlineUnixMs == pol.DeadlineUnixMs {
			listed = true
		}
	}
	if !listed {
		t.Errorf("session not listed for the reaper: %+v", r.k.Listed())
	}
	if st := r.k.ChannelReport("room", chanstate.ModeRich).Session; st == nil || st.State != "ready" || st.Turns != 3 {
		t.Errorf("status: %+v", st)
	}
}

// TestRichIdleStop: the session goes after the idle time, leaving nothing,
// and the next turn starts a new one.
func TestRichIdleStop(t *testing.T) {
	r, _ := richRig(t, 200*time.Millisecond)
	must(t, r.setRich("room", "helper"))
	if _, _, err := richTurn(t, r, "room", "hi"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "idle stop", func() bool { return r.k.Status("room").State == "none" })
	r.assertClean(t)
	if _, _, err := richTurn(t, r, "room", "again"); err != nil {
		t.Fatal(err)
	}
	if n := len(r.richContainers()); n != 2 {
		t.Errorf("%d containers, want a second one after the idle stop", n)
	}
}

// TestRichFailedTurnRecovers: a broker gone mid-turn fails the turn, the
// session is removed, and the next turn starts a new one.
func TestRichFailedTurnRecovers(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.setRich("room", "helper"))
	if _, _, err := richTurn(t, r, "room", "one"); err != nil {
		t.Fatal(err)
	}
	ctl.TurnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		return nil, richsession.ErrBroker
	}
	if _, _, err := richTurn(t, r, "room", "two"); !errors.Is(err, errTurnFailed) {
		t.Fatalf("turn with the broker gone: %v, want errTurnFailed", err)
	}
	r.assertClean(t)
	ctl.TurnFn = nil
	if got, _, err := richTurn(t, r, "room", "three"); err != nil || got != "three" {
		t.Fatalf("next turn: %q %v", got, err)
	}
	if n := len(r.richContainers()); n != 2 {
		t.Errorf("%d containers, want 2", n)
	}
	// A packet of another turn fails the turn too.
	ctl.TurnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		return &richproto.Result{TurnID: "00000000000000000000000000000000", OK: true}, nil
	}
	if _, _, err := richTurn(t, r, "room", "four"); !errors.Is(err, errTurnFailed) {
		t.Errorf("packet of another turn: %v", err)
	}
	// A turn past its deadline: the deadline's error, everything removed.
	ctl.TurnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := r.run(ctx, turnIn{Channel: "room", SpeakerID: "u", Text: "slow"}); err == nil {
		t.Error("turn whose client went away succeeded")
	}
	r.assertClean(t)
}

// TestRichStartTimeout: a worker that never announces itself fails the
// turn after rich.startTimeoutSeconds and leaves nothing.
func TestRichStartTimeout(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.setRich("room", "helper"))
	ctl.NotReady = true
	start := time.Now()
	if _, _, err := richTurn(t, r, "room", "hi"); !errors.Is(err, errTurnFailed) {
		t.Fatalf("start timeout: %v", err)
	}
	if took := time.Since(start); took < time.Second || took > 5*time.Second {
		t.Errorf("took %v, want about rich.startTimeoutSeconds (1 s)", took)
	}
	r.assertClean(t)
	if n := len(r.k.Listed()); n != 0 {
		t.Errorf("%d sessions listed", n)
	}
}

// TestRichSessionLifetime: a turn that would end past what is left of the
// session's lifetime starts a new session (the old one removed first).
func TestRichSessionLifetime(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r, _ := richRigFull(t, time.Hour, "", clock)
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	must(t, r.setRich("room", "helper"))
	if _, _, err := richTurn(t, r, "room", "one"); err != nil {
		t.Fatal(err)
	}
	first := r.k.Status("room").Session
	mu.Lock()
	now = now.Add(richsession.SessionLifetime - r.kit.Cfg.RichTurnTimeout()) // a 600 s turn no longer fits
	mu.Unlock()
	if _, _, err := richTurn(t, r, "room", "two"); err != nil {
		t.Fatal(err)
	}
	if second := r.k.Status("room").Session; second == first {
		t.Error("a turn past the session's lifetime ran on the old session")
	}
	if n := len(r.richContainers()); n != 2 {
		t.Errorf("%d containers, want 2", n)
	}
	if r.docker.LiveCount() != 1 || r.units.ActiveCount() != 1 {
		t.Errorf("live containers %d, units %d: the old session was not removed", r.docker.LiveCount(), r.units.ActiveCount())
	}
}

// TestRichWorkerExitsMidTurn: a container that exits during a turn fails
// it at once (not at its deadline), and the next turn starts a new session.
func TestRichWorkerExitsMidTurn(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.setRich("room", "helper"))
	die := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		select {
		case <-ctx.Done():
			return RunResult{ExitCode: 137}, ctx.Err()
		case <-die:
			return RunResult{ExitCode: 137}, nil // killed by its memory limit, say
		}
	}
	ctl.TurnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		close(die)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	start := time.Now()
	if _, _, err := richTurn(t, r, "room", "one"); !errors.Is(err, errTurnFailed) {
		t.Fatalf("turn whose worker exited: %v, want errTurnFailed", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the turn failed after %v, not at once", took)
	}
	r.assertClean(t)
	ctl.TurnFn = nil
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	if got, _, err := richTurn(t, r, "room", "two"); err != nil || !strings.HasSuffix(got, "two") {
		t.Fatalf("next turn: %q %v", got, err)
	}
}

// TestReplyBudgetWaitEndsWithTheTurn: a packet waiting for the budget
// waits no longer than its turn, which fails saying why; the budget is
// whole again after.
func TestReplyBudgetWaitEndsWithTheTurn(t *testing.T) {
	logs := &lockedBuffer{}
	waited := make(chan int64, 1)
	r, ctl := richRigTuned(t, richExtra, slog.New(slog.NewTextHandler(logs, nil)), richsession.Tuning{
		Idle: time.Hour, ReplyBudget: 100, BudgetWait: func(n int64) { waited <- n },
	})
	ctl.Reserve = 60
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	entered, hold := make(chan struct{}, 1), make(chan struct{})
	ctl.TurnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		if b.Identity.Channel == "a" {
			entered <- struct{}{}
			<-hold
		}
		return &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: "x"}, nil
	}
	for _, ch := range []string{"a", "b"} {
		must(t, r.setRich(ch, "helper"))
	}
	aDone := make(chan error, 1)
	go func() {
		_, _, err := r.run(context.Background(), turnIn{Channel: "a", SpeakerID: "u", Text: "x"})
		aDone <- err
	}()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	bDone := make(chan error, 1)
	go func() {
		_, _, err := r.run(ctx, turnIn{Channel: "b", SpeakerID: "u", Text: "x"})
		bDone <- err
	}()
	<-waited
	cancel()
	if err := <-bDone; err == nil {
		t.Fatal("b's turn succeeded without the budget")
	}
	if !strings.Contains(logs.String(), "reply packet waits for the host's reply budget") ||
		!strings.Contains(logs.String(), "waited for the host's reply budget (60 of 100 bytes held by other packets) until the turn ended") {
		t.Errorf("the log does not say why the turn failed:\n%s", logs.String())
	}
	close(hold)
	if err := <-aDone; err != nil {
		t.Errorf("a: %v", err)
	}
	if used := r.k.ReplyBytesHeld(); used != 0 {
		t.Errorf("%d bytes of the reply budget still held", used)
	}
}

// TestReplyBudgetWaits (moved from pkg/host, where it went through the
// turn route): a packet that does not fit the host's reply budget waits
// for the packets holding it (here: until the first turn's answer is
// written), then goes on; the budget is whole again after both.
func TestReplyBudgetWaits(t *testing.T) {
	waited := make(chan int64, 1)
	r, ctl := richRigTuned(t, richExtra, nil, richsession.Tuning{Idle: time.Hour, ReplyBudget: 100, BudgetWait: func(n int64) { waited <- n }})
	ctl.Reserve = 60
	entered, hold := make(chan string, 2), make(chan struct{})
	ctl.TurnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		entered <- b.Identity.Channel
		if b.Identity.Channel == "a" {
			<-hold
		}
		return &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: "x", Files: []richproto.File{{Name: "f.txt", Data: []byte("0123456789")}}}, nil
	}
	for _, ch := range []string{"a", "b"} {
		must(t, r.setRich(ch, "helper"))
	}
	type answer struct {
		files []richproto.File
		err   error
	}
	turn := func(ch string, out chan<- answer) {
		var files []richproto.File
		_, _, err := r.runAnswer(context.Background(), turnIn{Channel: ch, SpeakerID: "u", Text: "x"}, func(o kind.Outcome) { files = o.Files })
		out <- answer{files, err}
	}
	aDone, bDone := make(chan answer, 1), make(chan answer, 1)
	go turn("a", aDone)
	if ch := <-entered; ch != "a" {
		t.Fatalf("turn of %s entered first", ch)
	}
	go turn("b", bDone)
	if n := <-waited; n != 60 {
		t.Fatalf("a packet of %d bytes waited, want 60", n)
	}
	select {
	case a := <-bDone:
		t.Fatalf("b answered while a held the budget: %+v", a)
	default:
	}
	close(hold)
	for _, done := range []chan answer{aDone, bDone} {
		if a := <-done; a.err != nil || len(a.files) != 1 || a.files[0].Name != "f.txt" {
			t.Errorf("answer %+v", a)
		}
	}
	if used := r.k.ReplyBytesHeld(); used != 0 {
		t.Errorf("%d bytes of the reply budget still held after both turns", used)
	}
}

// TestRichAttachmentsReachTheBind (moved from pkg/host's
// TestRichAttachmentsAPI, whose refusals stay there): a rich turn's
// attachments reach the bind as given; the session policy carries the
// operator's egress.allow.
func TestRichAttachmentsReachTheBind(t *testing.T) {
	r, ctl := richRigTuned(t, richExtra+"egress:\n  allow: [\"127.0.0.1:8080\"]\n", nil, richsession.Tuning{Idle: time.Hour})
	must(t, r.setRich("room", "helper"))
	atts := []richproto.Attachment{{URL: "https://example.com/a.png", Name: "a.png", Type: "image/png"}, {URL: "http://10.1.2.3:8080/r.txt", Name: "r.txt"}}
	if _, _, err := r.run(context.Background(), turnIn{Channel: "room", SpeakerID: "u", Text: "look", Attachments: atts}); err != nil {
		t.Fatalf("rich turn with attachments: %v", err)
	}
	binds := ctl.BindList()
	if len(binds) != 1 || fmt.Sprint(binds[0].Turn.Attachments) != fmt.Sprint(atts) {
		t.Fatalf("bound attachments %+v, want %+v", binds, atts)
	}
	r.docker.Mu.Lock()
	pol := r.docker.Policies[len(r.docker.Policies)-1]
	r.docker.Mu.Unlock()
	if fmt.Sprint(pol.EgressAllow) != "[127.0.0.1:8080]" {
		t.Errorf("session policy egressAllow %v, want the host's [127.0.0.1:8080]", pol.EgressAllow)
	}
}

// TestRichChannelOffAndFreshStart (moved from pkg/host's
// TestRichOffFreshAndHostStop, which keeps the routes' side): channel off
// stops the channel's session; a fresh start stops it before the next
// turn, which carries Fresh, sees no old history and has a new session;
// the kind's stop removes every session.
func TestRichChannelOffAndFreshStart(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.setRich("room", "helper"))
	must(t, r.setRich("hall", "other"))
	for _, ch := range []string{"room", "hall"} {
		if _, _, err := richTurn(t, r, ch, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	must(t, r.kit.Host.State.SetMode("hall", chanstate.ModeOff))
	r.k.ChannelMode("hall", chanstate.ModeOff, "")
	if st := r.k.Status("hall"); st.State != "none" {
		t.Errorf("hall after off: %+v", st)
	}
	first := r.k.Status("room").Session
	reply, _, err := r.run(context.Background(), turnIn{Channel: "room", SpeakerID: "u-1", Text: "new start", Reset: true})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Text != "new start" {
		t.Errorf("reply %q: the fresh session saw an old history", reply.Text)
	}
	binds := ctl.BindList()
	if last := binds[len(binds)-1]; !last.Turn.Fresh {
		t.Error("turn after fresh start does not carry Fresh")
	}
	if second := r.k.Status("room").Session; second == first || second == "" {
		t.Errorf("session %q after fresh start, was %q", second, first)
	}
	r.shutdown()
	r.assertClean(t)
	if n := len(r.k.Listed()); n != 0 {
		t.Errorf("%d sessions listed after the kind's stop", n)
	}
}

// TestRichCheckMode (moved from pkg/host's TestRichModeAPI, which keeps
// the mode route's side): mode rich needs rich.enabled and a configured
// profile; another profile stops the channel's session.
func TestRichCheckMode(t *testing.T) {
	r, _ := richRig(t, time.Hour)
	for profile, want := range map[string]string{"": "profile must name a configured profile", "nope": "profile must name a configured profile", "helper": ""} {
		if err := r.k.CheckMode(profile); (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckMode(%q) = %v, want %q", profile, err, want)
		}
	}
	must(t, r.setRich("room", "helper"))
	if _, _, err := richTurn(t, r, "room", "hi"); err != nil {
		t.Fatal(err)
	}
	must(t, r.setRich("room", "other"))
	if st := r.k.Status("room"); st.State != "none" {
		t.Errorf("session after a profile change: %+v", st)
	}
	r.kit.Cfg.Rich.Enabled = false
	if err := r.k.CheckMode("helper"); err == nil || !strings.Contains(err.Error(), "rich.enabled") {
		t.Errorf("rich disabled: %v", err)
	}
}

// TestRichFailedReplyDropsItsFiles (moved from pkg/host's
// TestRichReplyFilesReachTheAPI, which keeps the answer's side): a reply's
// files are the turn's outcome; a failed reply's are dropped.
func TestRichFailedReplyDropsItsFiles(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	ok := true
	ctl.TurnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		res := &richproto.Result{TurnID: b.Turn.ID, OK: ok, Text: "drawn", Files: []richproto.File{{Name: "a.png", Data: []byte{1}}, {Name: "b.txt", Data: []byte("hi")}}}
		if !ok {
			res.Text, res.Cause = "", richproto.CauseModel
		}
		return res, nil
	}
	must(t, r.setRich("room", "helper"))
	for _, want := range []int{2, 0} {
		ok = want > 0
		files := -1
		_, _, err := r.runAnswer(context.Background(), turnIn{Channel: "room", SpeakerID: "u", Text: "draw"}, func(o kind.Outcome) { files = len(o.Files) })
		if err != nil || files != want {
			t.Errorf("reply ok %v: %d files, %v; want %d", ok, files, err, want)
		}
	}
}
