package host

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
)

// Rich sessions are tested beside their kind (pkg/richsession); what
// stays here is the host's side of them: the mode route, the fresh
// route, the cancel route, the turn route's text limit, and the tests of
// the host's answer (replyfiles*_test.go, richattach_test.go).

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

// richRig is a rig whose rich containers run until killed; extra adds
// configuration.
func richRig(t *testing.T, extra string) (*rig, *fakeRichControl) {
	t.Helper()
	ctl := &fakeRichControl{BrokerErr: richsession.ErrBroker}
	r := newRig(t, richExtra+extra, func(o *Options) {
		richTuning(o).Control = ctl
		richTuning(o).Idle = time.Hour
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
	req := httptest.NewRequest(method, path, strings.NewReader(body))
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

// TestRichOffFreshAndHostStop: the mode route's off reaches the kind (the
// session stops); the fresh route makes the channel's next turn a fresh
// start (it carries Fresh), pending until that turn succeeded; host stop
// removes every session. The kind's side (a new session, no old history)
// is pkg/richsession's TestRichChannelOffAndFreshStart.
func TestRichOffFreshAndHostStop(t *testing.T) {
	r, ctl := richRig(t, "")
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
	if _, _, err := richTurn(t, r, "room", "new start"); err != nil {
		t.Fatal(err)
	}
	binds := ctl.BindList()
	if last := binds[len(binds)-1]; !last.Turn.Fresh {
		t.Error("turn after fresh start does not carry Fresh")
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

// TestRichModeAPI: the kind's refusal of mode rich is a 400 with its
// reason (the kind's checks: pkg/richsession's TestRichCheckMode); a
// profile is for mode rich only; turns of a rich channel take the rich
// path; another profile reaches the kind, which stops the session.
func TestRichModeAPI(t *testing.T) {
	r, _ := richRig(t, "")
	for _, c := range []struct{ body, want string }{
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
	var resp apiwire.Reply
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
}

// TestRichCancel: cancelling a rich channel's running turn ends it with
// ErrCancelled and removes its session.
func TestRichCancel(t *testing.T) {
	r, ctl := richRig(t, "")
	must(t, r.h.state.SetRich("room", "helper"))
	entered := make(chan struct{})
	ctl.TurnFn = func(ctx context.Context, b policy.Bind) (*richproto.Result, error) {
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
	r, _ := richRig(t, "")
	must(t, r.h.state.SetRich("room", "helper"))
	body := func(n int) string {
		b, _ := json.Marshal(apiwire.TurnRequest{Speaker: apiwire.Speaker{ID: "u"}, Text: strings.Repeat("\u00e9", n)})
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

// lockedBuffer is a log written by the host's goroutines and read by a
// test.
type lockedBuffer = sandboxtest.LockedBuffer
