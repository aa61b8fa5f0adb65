package host

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
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

// fakeRichControl stands in for the session's broker and worker: the
// worker is "ready" unless notReady, and it answers each turn with the
// conversation it has seen on that socket (a session's memory).
type fakeRichControl struct {
	mu       sync.Mutex
	notReady bool
	binds    []policy.Bind
	sockets  []string
	seen     map[string][]string
	turnFn   func(ctx context.Context, b policy.Bind) (*richproto.Result, error)
	// reserve, when set, is the packet length each turn reserves from the
	// host's reply budget before turnFn runs (as HTTPRichControl does
	// before it reads a packet).
	reserve int64
}

func (f *fakeRichControl) Status(ctx context.Context, socket string) (policy.ControlStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notReady {
		return policy.ControlStatus{}, richsession.ErrBroker
	}
	return policy.ControlStatus{Ready: true, Polling: true}, nil
}

func (f *fakeRichControl) Turn(ctx context.Context, socket string, b policy.Bind, reserve richsession.ReserveFunc) (*richproto.Result, error) {
	f.mu.Lock()
	f.binds = append(f.binds, b)
	f.sockets = append(f.sockets, socket)
	if f.seen == nil {
		f.seen = map[string][]string{}
	}
	f.seen[socket] = append(f.seen[socket], b.Turn.Text)
	history := strings.Join(f.seen[socket], "|")
	fn, n := f.turnFn, f.reserve
	f.mu.Unlock()
	if n > 0 {
		if err := reserve(ctx, n); err != nil {
			return nil, err
		}
	}
	if fn != nil {
		return fn(ctx, b)
	}
	return &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: history}, nil
}

func (f *fakeRichControl) bindList() []policy.Bind {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]policy.Bind(nil), f.binds...)
}

// richRig is a rig whose rich containers run until killed.
func richRig(t *testing.T, idle time.Duration) (*rig, *fakeRichControl) {
	t.Helper()
	return richRigWith(t, idle, nil)
}

// richRigWith is richRig with the options changed by mutate (when not nil).
func richRigWith(t *testing.T, idle time.Duration, mutate func(*Options)) (*rig, *fakeRichControl) {
	t.Helper()
	return richRigFull(t, idle, "", mutate)
}

// richRigExtra is richRig with more configuration.
func richRigExtra(t *testing.T, idle time.Duration, extra string) (*rig, *fakeRichControl) {
	t.Helper()
	return richRigFull(t, idle, extra, nil)
}

func richRigFull(t *testing.T, idle time.Duration, extra string, mutate func(*Options)) (*rig, *fakeRichControl) {
	t.Helper()
	ctl := &fakeRichControl{}
	r := newRig(t, richExtra+extra, func(o *Options) {
		richTuning(o).Control = ctl
		richTuning(o).Idle = idle
		if mutate != nil {
			mutate(o)
		}
	})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		if !spec.Rich {
			return okRun(ctx, spec, stdin)
		}
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	t.Cleanup(r.h.Shutdown)
	return r, ctl
}

func (r *rig) api(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	return r.apiCtx(t, context.Background(), method, path, body)
}

// apiCtx is api with the request's context (a bound on waiting, say).
func (r *rig) apiCtx(t *testing.T, ctx context.Context, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, Peer{Known: true, UID: r.h.opts.UID, GID: r.h.opts.GID}))
	w := httptest.NewRecorder()
	r.h.Handler().ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

func richTurn(t *testing.T, r *rig, channel, text string) (string, string, error) {
	t.Helper()
	reply, id, err := r.h.RunRichTurn(context.Background(), TurnInput{Channel: channel, SpeakerID: "u-1", SpeakerName: "Ann", PrincipalID: "p-1", Text: text})
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
	if code, body := r.api(t, "PUT", "/v1/channels/room/mode", `{"mode":"rich","profile":"helper"}`); code != 200 || !strings.Contains(body, `"profile":"helper"`) {
		t.Fatalf("mode rich: %d %s", code, body)
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
	if c.MemoryMB != 1536 || c.CPUs != 1 || c.Pids != 256 || c.TmpfsMB != 512 || c.Image != r.cfg.Image {
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
	binds := ctl.bindList()
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
	for _, a := range r.h.ActiveTurns() {
		if a.ID == session && a.Rich && a.DeadlineUnixMs == pol.DeadlineUnixMs {
			listed = true
		}
	}
	if !listed {
		t.Errorf("session not listed for the reaper: %+v", r.h.ActiveTurns())
	}
	if code, body := r.api(t, "GET", "/v1/channels/room", ""); code != 200 || !strings.Contains(body, `"state":"ready"`) || !strings.Contains(body, `"turns":3`) {
		t.Errorf("status: %d %s", code, body)
	}
}

// TestRichIdleStop: the session goes after the idle time, leaving nothing,
// and the next turn starts a new one.
func TestRichIdleStop(t *testing.T) {
	r, _ := richRig(t, 200*time.Millisecond)
	must(t, r.h.state.SetRich("room", "helper"))
	if _, _, err := richTurn(t, r, "room", "hi"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "idle stop", func() bool { return r.h.richSessions().Status("room").State == "none" })
	r.assertClean(t)
	if _, _, err := richTurn(t, r, "room", "again"); err != nil {
		t.Fatal(err)
	}
	if n := len(r.richContainers()); n != 2 {
		t.Errorf("%d containers, want a second one after the idle stop", n)
	}
}

// TestRichOffFreshAndHostStop: channel off stops the session; a fresh
// start stops it before the next turn, which carries Fresh; host stop
// removes every session.
func TestRichOffFreshAndHostStop(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.h.state.SetRich("room", "helper"))
	must(t, r.h.state.SetRich("hall", "other"))
	for _, ch := range []string{"room", "hall"} {
		if _, _, err := richTurn(t, r, ch, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	if code, _ := r.api(t, "PUT", "/v1/channels/hall/mode", `{"mode":"off"}`); code != 200 {
		t.Fatalf("off: %d", code)
	}
	if st := r.h.richSessions().Status("hall"); st.State != "none" {
		t.Errorf("hall after off: %+v", st)
	}
	if code, _ := r.api(t, "POST", "/v1/channels/room/fresh", ""); code != 200 {
		t.Fatalf("fresh: %d", code)
	}
	first := r.h.richSessions().Status("room").Session
	got, _, err := richTurn(t, r, "room", "new start")
	if err != nil {
		t.Fatal(err)
	}
	if got != "new start" {
		t.Errorf("reply %q: the fresh session saw an old history", got)
	}
	binds := ctl.bindList()
	if last := binds[len(binds)-1]; !last.Turn.Fresh {
		t.Error("turn after fresh start does not carry Fresh")
	}
	if second := r.h.richSessions().Status("room").Session; second == first || second == "" {
		t.Errorf("session %q after fresh start, was %q", second, first)
	}
	r.h.mu.Lock()
	_, pending := r.h.fresh["room"]
	r.h.mu.Unlock()
	if pending {
		t.Error("fresh start still pending after a successful turn")
	}
	r.h.Shutdown()
	r.assertClean(t)
	if n := len(r.h.richSessions().Listed()); n != 0 {
		t.Errorf("%d sessions listed after host stop", n)
	}
}

// TestRichFailedTurnRecovers: a broker gone mid-turn fails the turn, the
// session is removed, and the next turn starts a new one.
func TestRichFailedTurnRecovers(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.h.state.SetRich("room", "helper"))
	if _, _, err := richTurn(t, r, "room", "one"); err != nil {
		t.Fatal(err)
	}
	ctl.turnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		return nil, richsession.ErrBroker
	}
	if _, _, err := richTurn(t, r, "room", "two"); !errors.Is(err, ErrTurnFailed) {
		t.Fatalf("turn with the broker gone: %v, want ErrTurnFailed", err)
	}
	r.assertClean(t)
	ctl.turnFn = nil
	if got, _, err := richTurn(t, r, "room", "three"); err != nil || got != "three" {
		t.Fatalf("next turn: %q %v", got, err)
	}
	if n := len(r.richContainers()); n != 2 {
		t.Errorf("%d containers, want 2", n)
	}
	// A packet of another turn fails the turn too.
	ctl.turnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		return &richproto.Result{TurnID: "00000000000000000000000000000000", OK: true}, nil
	}
	if _, _, err := richTurn(t, r, "room", "four"); !errors.Is(err, ErrTurnFailed) {
		t.Errorf("packet of another turn: %v", err)
	}
	// A turn past its deadline: the deadline's error, everything removed.
	ctl.turnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := r.h.RunRichTurn(ctx, TurnInput{Channel: "room", SpeakerID: "u", Text: "slow"}); err == nil {
		t.Error("turn whose client went away succeeded")
	}
	r.assertClean(t)
}

// TestRichStartTimeout: a worker that never announces itself fails the
// turn after rich.startTimeoutSeconds and leaves nothing.
func TestRichStartTimeout(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.h.state.SetRich("room", "helper"))
	ctl.notReady = true
	start := time.Now()
	if _, _, err := richTurn(t, r, "room", "hi"); !errors.Is(err, ErrTurnFailed) {
		t.Fatalf("start timeout: %v", err)
	}
	if took := time.Since(start); took < time.Second || took > 5*time.Second {
		t.Errorf("took %v, want about rich.startTimeoutSeconds (1 s)", took)
	}
	r.assertClean(t)
	if n := len(r.h.richSessions().Listed()); n != 0 {
		t.Errorf("%d sessions listed", n)
	}
}

// TestRichModeAPI: mode rich needs a configured profile; a profile is for
// mode rich only; turns of a rich channel take the rich path; another
// profile stops the session.
func TestRichModeAPI(t *testing.T) {
	r, _ := richRig(t, time.Hour)
	for _, c := range []struct{ body, want string }{
		{`{"mode":"rich"}`, "profile must name a configured profile"},
		{`{"mode":"rich","profile":"nope"}`, "profile must name a configured profile"},
		{`{"mode":"on","profile":"helper"}`, "profile is for mode"},
	} {
		if code, body := r.api(t, "PUT", "/v1/channels/room/mode", c.body); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s", c.body, code, body)
		}
	}
	if code, _ := r.api(t, "PUT", "/v1/channels/room/mode", `{"mode":"rich","profile":"helper"}`); code != 200 {
		t.Fatal(code)
	}
	code, body := r.api(t, "POST", "/v1/channels/room/turns", `{"speaker":{"id":"u"},"text":"hello"}`)
	var resp TurnResponse
	if code != 200 || json.Unmarshal([]byte(body), &resp) != nil || resp.Text != "hello" {
		t.Fatalf("turn on a rich channel: %d %s", code, body)
	}
	if n := len(r.richContainers()); n != 1 {
		t.Errorf("%d rich containers", n)
	}
	if code, _ := r.api(t, "PUT", "/v1/channels/room/mode", `{"mode":"rich","profile":"other"}`); code != 200 {
		t.Fatal(code)
	}
	if st := r.h.richSessions().Status("room"); st.State != "none" {
		t.Errorf("session after a profile change: %+v", st)
	}
	r2, _ := richRig(t, time.Hour)
	r2.cfg.Rich.Enabled = false
	if code, body := r2.api(t, "PUT", "/v1/channels/room/mode", `{"mode":"rich","profile":"helper"}`); code != 400 || !strings.Contains(body, "rich.enabled") {
		t.Errorf("rich disabled: %d %s", code, body)
	}
	_ = http.StatusOK
}

// TestRichSessionLifetime: a turn that would end past what is left of the
// session's lifetime starts a new session (the old one removed first).
func TestRichSessionLifetime(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	ctl := &fakeRichControl{}
	r := newRig(t, richExtra, func(o *Options) { richTuning(o).Control = ctl; richTuning(o).Idle = time.Hour; o.Now = clock })
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	t.Cleanup(r.h.Shutdown)
	must(t, r.h.state.SetRich("room", "helper"))
	if _, _, err := richTurn(t, r, "room", "one"); err != nil {
		t.Fatal(err)
	}
	first := r.h.richSessions().Status("room").Session
	mu.Lock()
	now = now.Add(richsession.SessionLifetime - r.cfg.RichTurnTimeout()) // a 600 s turn no longer fits
	mu.Unlock()
	if _, _, err := richTurn(t, r, "room", "two"); err != nil {
		t.Fatal(err)
	}
	if second := r.h.richSessions().Status("room").Session; second == first {
		t.Error("a turn past the session's lifetime ran on the old session")
	}
	if n := len(r.richContainers()); n != 2 {
		t.Errorf("%d containers, want 2", n)
	}
	if r.docker.LiveCount() != 1 || r.units.ActiveCount() != 1 {
		t.Errorf("live containers %d, units %d: the old session was not removed", r.docker.LiveCount(), r.units.ActiveCount())
	}
}

// TestRichCancel: cancelling a rich channel's running turn ends it with
// ErrCancelled and removes its session.
func TestRichCancel(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.h.state.SetRich("room", "helper"))
	entered := make(chan struct{})
	ctl.turnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		close(entered)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	done := make(chan error, 1)
	go func() { _, _, err := richTurn(t, r, "room", "long"); done <- err }()
	<-entered
	if code, body := r.api(t, "POST", "/v1/channels/room/cancel", ""); code != 200 || !strings.Contains(body, `"cancelled":true`) {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if err := <-done; !errors.Is(err, ErrCancelled) {
		t.Errorf("cancelled turn: %v, want ErrCancelled", err)
	}
	r.assertClean(t)
}

// TestRichTextLimit: a rich channel's turn takes up to 100,000 characters
// (a sealed channel's 32,000); one more is refused naming the field.
func TestRichTextLimit(t *testing.T) {
	r, _ := richRig(t, time.Hour)
	must(t, r.h.state.SetRich("room", "helper"))
	body := func(n int) string {
		b, _ := json.Marshal(TurnRequest{Speaker: SpeakerJSON{ID: "u"}, Text: strings.Repeat("\u00e9", n)})
		return string(b)
	}
	if code, out := r.api(t, "POST", "/v1/channels/room/turns", body(richproto.MaxTextChars)); code != 200 {
		t.Errorf("100,000 characters on a rich channel: %d %.200s", code, out)
	}
	if code, out := r.api(t, "POST", "/v1/channels/room/turns", body(richproto.MaxTextChars+1)); code != 400 || !strings.Contains(out, "text is 100001 characters") {
		t.Errorf("100,001 characters: %d %.200s", code, out)
	}
	must(t, r.h.state.SetMode("room", ModeOn))
	if code, _ := r.api(t, "POST", "/v1/channels/room/turns", body(40_000)); code != 400 {
		t.Errorf("40,000 characters on a sealed channel: %d, want 400", code)
	}
}

// TestRichWorkerExitsMidTurn: a container that exits during a turn fails
// it at once (not at its deadline), and the next turn starts a new session.
func TestRichWorkerExitsMidTurn(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	must(t, r.h.state.SetRich("room", "helper"))
	die := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		select {
		case <-ctx.Done():
			return RunResult{ExitCode: 137}, ctx.Err()
		case <-die:
			return RunResult{ExitCode: 137}, nil // killed by its memory limit, say
		}
	}
	ctl.turnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
		close(die)
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	start := time.Now()
	if _, _, err := richTurn(t, r, "room", "one"); !errors.Is(err, ErrTurnFailed) {
		t.Fatalf("turn whose worker exited: %v, want ErrTurnFailed", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the turn failed after %v, not at once", took)
	}
	r.assertClean(t)
	ctl.turnFn = nil
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: 137}, ctx.Err()
	}
	if got, _, err := richTurn(t, r, "room", "two"); err != nil || !strings.HasSuffix(got, "two") {
		t.Fatalf("next turn: %q %v", got, err)
	}
}
