package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/richroute"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

const richTurnID = "fedcba9876543210fedcba9876543210"

// newRichHarness runs a rich channel broker: no /model, a Rich section,
// the control route for controlUID, a short poll wait.
func newRichHarness(t *testing.T, controlUID int) *harness {
	t.Helper()
	return newRichHarnessWith(t, controlUID, nil)
}

// newRichHarnessWith is newRichHarness with the policy changed by mutate.
func newRichHarnessWith(t *testing.T, controlUID int, mutate func(*policy.Policy)) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, logs: &syncBuffer{}, mcp: &fakeMCP{result: `{"content":[],"isError":false}`}}
	h.model = newFakeUpstream(t, okAnswer)
	h.web = newFakeUpstream(t, `{"weather":"sunny"}`)
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	writeFile(t, filepath.Join(credDir, "anthropic"), realModelKey+"\n")
	writeFile(t, filepath.Join(credDir, "tool-key"), realToolKey+"\n")
	writeFile(t, filepath.Join(credDir, "mcp-key"), realMCPKey+"\n")
	h.pol = basePolicy("https://unused.example", h.web.srv.URL+"/hook", "/bin/true")
	h.pol.Model = policy.Model{}
	h.pol.Identity.SpeakerID, h.pol.Identity.SpeakerName, h.pol.Identity.PrincipalID = "", "", ""
	h.pol.Rich = &policy.Rich{URL: "https://api.anthropic.example", Model: "claude-test", MaxOutputTokens: 4096,
		Thinking: "high", Credential: "anthropic", CredentialKind: policy.CredentialAPIKey, MaxCalls: 8}
	if mutate != nil {
		mutate(h.pol)
	}
	creds, err := credential.OpenDir(credDir, "")
	if err != nil {
		t.Fatal(err)
	}
	h.serve(t, Config{Policy: h.pol, Credentials: creds, MCP: h.mcp, ControlUID: controlUID,
		PollWait: 300 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(h.logs, nil))})
	return h
}

func (h *harness) bind(thinking string) policy.Bind {
	return policy.Bind{
		Turn: richproto.Turn{ID: richTurnID, Text: "hello", Speaker: richproto.Speaker{ID: "u-1", Name: "Ann"},
			Thinking: thinking, DeadlineUnixMs: time.Now().Add(10 * time.Second).UnixMilli()},
		Identity: policy.Identity{Channel: h.pol.Identity.Channel, ChannelTag: h.pol.Identity.ChannelTag, SpeakerID: "u-1", SpeakerName: "Ann", PrincipalID: "p-1"},
	}
}

type controlAnswer struct {
	code int
	body string
}

// control posts a bind on the control route in the background.
func (h *harness) control(ctx context.Context, b policy.Bind) <-chan controlAnswer {
	out := make(chan controlAnswer, 1)
	data, _ := json.Marshal(b)
	go func() {
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
		}}}
		defer c.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+richroute.RouteControlTurn, bytes.NewReader(data))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			out <- controlAnswer{code: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		out <- controlAnswer{resp.StatusCode, string(body)}
	}()
	return out
}

// announce posts the worker's ready (no capabilities), which a long poll
// needs first.
func (h *harness) announce(t *testing.T) {
	t.Helper()
	if code, body, _ := h.do(richproto.RouteReady, ""); code != http.StatusOK {
		t.Fatalf("ready: %d %s", code, body)
	}
}

func (h *harness) waitBound(t *testing.T) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if _, ok := h.broker.rich.Bound(); ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("turn never bound")
}

func (h *harness) waitUnbound(t *testing.T) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if _, ok := h.broker.rich.Bound(); !ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("turn never revoked")
}

func resultJSON(id, text string) string {
	b, _ := json.Marshal(richproto.Result{TurnID: id, OK: true, Text: text})
	return string(b)
}

// TestRichPullTurn: ready (empty body), the long poll hands the bound turn,
// the reply packet reaches the host, and the bind is revoked after it:
// later packets and credential calls are refused.
func TestRichPullTurn(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	if code, body, _ := h.do(richproto.RouteReady, ""); code != http.StatusOK {
		t.Fatalf("empty ready: %d %s", code, body)
	}
	if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusNoContent {
		t.Fatalf("idle poll: %d, want 204", code)
	}
	got := h.control(context.Background(), h.bind("medium"))
	code, body, _ := h.do(richproto.RouteNext, "")
	if code != http.StatusOK {
		t.Fatalf("poll: %d %s", code, body)
	}
	var turn richproto.Turn
	if err := json.Unmarshal([]byte(body), &turn); err != nil || turn.ID != richTurnID || turn.Text != "hello" || turn.Thinking != "medium" {
		t.Fatalf("turn %s (%v)", body, err)
	}
	// Inside the bound turn host tools run with the bound identity.
	if code, body, _ := h.do("/tools/clock", `{}`); code != http.StatusOK {
		t.Errorf("tool inside the turn: %d %s", code, body)
	}
	if id := h.broker.callIdentity(); id.TurnID != richTurnID || id.Identity.SpeakerID != "u-1" || id.Identity.PrincipalID != "p-1" {
		t.Errorf("tool identity %+v", id)
	}
	if code, body, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "hi there")); code != http.StatusOK {
		t.Fatalf("result: %d %s", code, body)
	}
	a := <-got
	var res richproto.Result
	if a.code != http.StatusOK || json.Unmarshal([]byte(a.body), &res) != nil || res.Text != "hi there" || !res.OK {
		t.Fatalf("control answer %d %s", a.code, a.body)
	}
	h.waitUnbound(t)
	if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "again")); code != http.StatusBadRequest {
		t.Errorf("second packet after settle: %d, want 400", code)
	}
	if code, _, _ := h.do("/tools/clock", `{}`); code != http.StatusUnauthorized {
		t.Errorf("tool after revoke: %d, want 401", code)
	}
}

// TestRichRefusals: each refusal of the pull and control routes.
func TestRichRefusals(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	t.Run("malformed ready", func(t *testing.T) {
		for _, body := range []string{`{"capabilities":{"privateTo":"yes"}}`, `{"other":1}`, `[]`, `{`} {
			if code, _, _ := h.do(richproto.RouteReady, body); code != http.StatusBadRequest {
				t.Errorf("ready %s: %d, want 400", body, code)
			}
		}
		big := `{"capabilities":{},"privateHistory":false` + strings.Repeat(" ", richproto.MaxReadyBytes) + `}`
		if code, _ := h.raw("POST", rawPost(richproto.RouteReady, big, nil)); code != http.StatusRequestEntityTooLarge {
			t.Errorf("oversized ready: %d, want 413", code)
		}
	})
	t.Run("result outside a turn refused before the body", func(t *testing.T) {
		// Declares a huge body and sends none: answered at once.
		req := "POST /worker/result HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer sandbox-dummy-key\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n"
		start := time.Now()
		if code, _ := h.raw("POST", req); code != http.StatusBadRequest {
			t.Errorf("result outside a turn: %d, want 400", code)
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("refusal took %v: the body was waited for", time.Since(start))
		}
	})
	t.Run("credential call outside a bound turn", func(t *testing.T) {
		for _, c := range []struct{ route, body string }{
			{"/tools/clock", `{}`},
			{"/mcp/docs", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{}}}`},
		} {
			if code, _, _ := h.do(c.route, c.body); code != http.StatusUnauthorized {
				t.Errorf("%s: %d, want 401", c.route, code)
			}
		}
		if code, _ := h.raw("POST", rawPost("/model", `{"messages":[]}`, nil)); code != http.StatusNotFound {
			t.Errorf("/model on a rich broker: %d, want 404", code)
		}
		if n := h.upstreamSeen(); n != 0 {
			t.Errorf("upstreams reached %d times", n)
		}
	})
	t.Run("next with a body", func(t *testing.T) {
		if code, _, _ := h.do(richproto.RouteNext, `{}`); code != http.StatusBadRequest {
			t.Errorf("next with a body: %d, want 400", code)
		}
	})
	t.Run("second long poll", func(t *testing.T) {
		h.announce(t)
		first := make(chan int, 1)
		go func() { code, _, _ := h.do(richproto.RouteNext, ""); first <- code }()
		time.Sleep(100 * time.Millisecond)
		if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusTooManyRequests {
			t.Errorf("second long poll: %d, want 429", code)
		}
		if code := <-first; code != http.StatusNoContent {
			t.Errorf("first long poll: %d, want 204", code)
		}
	})
	t.Run("control from another uid", func(t *testing.T) {
		other := newRichHarness(t, os.Getuid()+1)
		if a := <-other.control(context.Background(), other.bind("low")); a.code != http.StatusNotFound {
			t.Errorf("control from a non-host peer: %d %s, want 404", a.code, a.body)
		}
		if _, ok := other.broker.rich.Bound(); ok {
			t.Error("bound by a non-host peer")
		}
	})
	t.Run("bind above the ceiling", func(t *testing.T) {
		if a := <-h.control(context.Background(), h.bind("xhigh")); a.code != http.StatusBadRequest {
			t.Errorf("thinking above the ceiling: %d, want 400", a.code)
		}
	})
	t.Run("malformed bind", func(t *testing.T) {
		b := h.bind("low")
		b.Identity.Channel = "another"
		if a := <-h.control(context.Background(), b); a.code != http.StatusBadRequest {
			t.Errorf("bind of another channel: %d, want 400", a.code)
		}
	})
}

// TestRichPacketBounds: a packet over MaxPacketBytes is refused before its
// body; a packet of another turn or out of shape fails the turn; one packet
// a turn.
func TestRichPacketBounds(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	h.announce(t)
	got := h.control(context.Background(), h.bind("low"))
	if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
		t.Fatalf("poll: %d", code)
	}
	req := fmt.Sprintf("POST /worker/result HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer sandbox-dummy-key\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", richproto.MaxPacketBytes+1)
	if code, _ := h.raw("POST", req); code != http.StatusRequestEntityTooLarge {
		t.Errorf("packet over the bound: %d, want 413", code)
	}
	if code, _, _ := h.do(richproto.RouteResult, resultJSON("00000000000000000000000000000000", "x")); code != http.StatusBadRequest {
		t.Errorf("packet of another turn: %d, want 400", code)
	}
	if a := <-got; a.code != http.StatusServiceUnavailable {
		t.Errorf("host answer after a bad packet: %d %s, want 503", a.code, a.body)
	}
	h.waitUnbound(t)
	// The next turn works.
	got = h.control(context.Background(), h.bind("low"))
	if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
		t.Fatalf("poll: %d", code)
	}
	if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "ok")); code != http.StatusOK {
		t.Fatalf("result: %d", code)
	}
	if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "twice")); code != http.StatusBadRequest {
		t.Errorf("second packet of the turn: %d, want 400", code)
	}
	if a := <-got; a.code != http.StatusOK {
		t.Errorf("host answer: %d", a.code)
	}
}

// TestRichRevoke: the host going away, the turn deadline and a worker
// re-announce each settle the turn and revoke the bind; a second bind
// while one is open is refused.
func TestRichRevoke(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	h.announce(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := h.control(ctx, h.bind("low"))
	h.waitBound(t)
	if a := <-h.control(context.Background(), h.bind("low")); a.code != http.StatusTooManyRequests {
		t.Errorf("second bind: %d, want 429", a.code)
	}
	if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
		t.Fatalf("poll: %d", code)
	}
	cancel()
	<-got
	h.waitUnbound(t)
	if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "late")); code != http.StatusBadRequest {
		t.Errorf("packet after the host went away: %d, want 400", code)
	}

	b := h.bind("low")
	b.Turn.DeadlineUnixMs = time.Now().Add(300 * time.Millisecond).UnixMilli()
	if a := <-h.control(context.Background(), b); a.code != http.StatusServiceUnavailable {
		t.Errorf("turn past its deadline: %d %s, want 503", a.code, a.body)
	}
	h.waitUnbound(t)

	got = h.control(context.Background(), h.bind("low"))
	if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
		t.Fatalf("poll: %d", code)
	}
	if code, _, _ := h.do(richproto.RouteReady, `{"capabilities":{"privateTo":true,"readerRecords":true},"privateHistory":false}`); code != http.StatusOK {
		t.Fatalf("re-announce: %d", code)
	}
	if a := <-got; a.code != http.StatusServiceUnavailable {
		t.Errorf("turn lost by a restarted worker: %d, want 503", a.code)
	}
}

// TestRichControlStatus: the host sees the worker's announce and poll; no
// other peer gets an answer.
func TestRichControlStatus(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	status := func(hh *harness) (int, richroute.ControlStatus) {
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", hh.sock)
		}}}
		defer c.CloseIdleConnections()
		resp, err := c.Post("http://broker"+richroute.RouteControlStatus, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st richroute.ControlStatus
		json.NewDecoder(resp.Body).Decode(&st)
		return resp.StatusCode, st
	}
	if code, st := status(h); code != http.StatusOK || st.Ready || st.Polling || st.Bound {
		t.Errorf("before ready: %d %+v", code, st)
	}
	h.do(richproto.RouteReady, "")
	// The poll ends (204 after PollWait) before the test does: a poll cut
	// by the broker's cleanup would fail the finished test from its goroutine.
	polled := make(chan struct{})
	defer func() { <-polled }()
	go func() { defer close(polled); h.do(richproto.RouteNext, "") }()
	time.Sleep(100 * time.Millisecond)
	if code, st := status(h); code != http.StatusOK || !st.Ready || !st.Polling {
		t.Errorf("after ready and poll: %d %+v", code, st)
	}
	other := newRichHarness(t, os.Getuid()+1)
	if code, _ := status(other); code != http.StatusNotFound {
		t.Errorf("status from a non-host peer: %d, want 404", code)
	}
}

// TestRichRefusalsNotFlooded: a worker looping refused pull requests gets
// its refusals, but only MaxRefusals log lines.
func TestRichRefusalsNotFlooded(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	for i := 0; i < 3*MaxRefusals; i++ {
		if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "x")); code != http.StatusBadRequest {
			t.Fatalf("refusal %d: %d", i, code)
		}
	}
	if n := strings.Count(h.logs.String(), `"call refused"`); n != MaxRefusals {
		t.Errorf("%d refusal lines, want %d", n, MaxRefusals)
	}
	// The worker's routes still answer.
	if code, _, _ := h.do(richproto.RouteReady, ""); code != http.StatusOK {
		t.Errorf("ready after the refusals: %d", code)
	}
}
