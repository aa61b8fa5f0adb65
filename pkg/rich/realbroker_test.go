package rich

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
	"github.com/roundtable-sandbox/sandbox/pkg/broker"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

const realKey = "sk-ant-real-key-never-in-the-container-0123456789"

// realPeers runs the real rich channel broker (pkg/broker) on a Unix
// socket, with a fake Anthropic upstream, and this package's worker
// against it; turns go in through the host-only control route.
type realPeers struct {
	t        *testing.T
	sock     string
	pol      *policy.Policy
	upstream *anthropictest.Server
	logs     *lockedBuffer
	creds    *credential.Dir
	stopB    func() // stops the running broker
}

func newRealPeers(t *testing.T, replies ...anthropictest.Reply) *realPeers {
	return newRealPeersWith(t, Tiers{}, nil, replies...)
}

// newRealPeersWith sets the worker's tiers and the policy's host compactor.
func newRealPeersWith(t *testing.T, tiers Tiers, compactor *policy.Compactor, replies ...anthropictest.Reply) *realPeers {
	t.Helper()
	dir, err := os.MkdirTemp("", "richreal")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &realPeers{t: t, sock: filepath.Join(dir, "broker.sock"), upstream: anthropictest.New(t, replies...), logs: &lockedBuffer{}}
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	if err := os.WriteFile(filepath.Join(credDir, "anthropic"), []byte(realKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.pol = &policy.Policy{
		Version:        policy.Version,
		TurnID:         "00112233445566778899aabbccddeeff",
		Identity:       policy.Identity{Channel: "guild/rich", ChannelTag: ids.ChannelTag("guild/rich")},
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(),
		Tools:          []policy.Tool{{Name: "clock", Kind: policy.KindBuiltin, Builtin: "clock"}},
		Limits:         policy.DefaultLimits(),
		Rich: &policy.Rich{URL: p.upstream.URL, AllowHTTP: true, Model: "claude-test", MaxOutputTokens: 8192,
			Thinking: "medium", Credential: "anthropic", CredentialKind: policy.CredentialAPIKey, MaxCalls: 16,
			Compactor: compactor},
	}
	if p.creds, err = credential.OpenDir(credDir, ""); err != nil {
		t.Fatal(err)
	}
	p.startBroker()

	log := slog.New(slog.NewJSONHandler(p.logs, nil))
	wb := NewBroker(p.sock, log)
	w, err := New(Options{Pull: wb, Model: wb, Tools: wb, Compactor: wb, Reporter: wb,
		Sessions: WorkspaceSessions{Workspace: dir}, Workspace: dir, Logger: log, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Tiers: tiers})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Serve(wctx) }()
	t.Cleanup(func() {
		wcancel()
		<-wdone
		p.stopB()
	})
	return p
}

// startBroker runs a broker on the socket (a restart after stopBroker).
func (p *realPeers) startBroker() {
	t := p.t
	b, err := broker.New(broker.Config{Policy: p.pol, Credentials: p.creds, ControlUID: os.Getuid(),
		PollWait: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p.sock)
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, ln) }()
	p.stopB = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("broker did not stop")
		}
		// Close (and so unlink) the socket now: the broker's own close may
		// come later and would unlink the next broker's socket at this path.
		ln.Close()
		p.stopB = func() {}
	}
}

// turn hands a turn to the broker as the host does and returns the reply
// packet it answers.
func (p *realPeers) turn(text, thinking string) richproto.Result {
	p.t.Helper()
	code, body := p.control(text, thinking)
	if code != 200 {
		p.t.Fatalf("control answered %d %s; worker logs:\n%s", code, body, p.logs.String())
	}
	var res richproto.Result
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		p.t.Fatalf("control answer %s: %v", body, err)
	}
	return res
}

// control posts the bind and returns the control route's status and body
// (-1 when the connection failed).
func (p *realPeers) control(text, thinking string) (int, string) {
	p.t.Helper()
	turn := newTurn(text)
	turn.Thinking = thinking
	turn.MaxOutputTokens = p.pol.Rich.MaxOutputTokens
	turn.Tools = []richproto.ToolSpec{{Name: "clock", Description: "time", Parameters: json.RawMessage(`{"type":"object"}`)}}
	bind := policy.Bind{Turn: *turn, Identity: policy.Identity{Channel: p.pol.Identity.Channel, ChannelTag: p.pol.Identity.ChannelTag,
		SpeakerID: "u1", SpeakerName: "Ann", PrincipalID: "p1"}}
	data, _ := json.Marshal(bind)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", p.sock)
	}}}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+policy.RouteControlTurn, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestWorkerAgainstRealBroker: the worker and the real rich broker (pull
// routes, model route with its rebuild and stream filter, host tools)
// hold a conversation with a tool call and thinking; the upstream sees the
// whole history, the real key, and never more thinking than the turn's.
func TestWorkerAgainstRealBroker(t *testing.T) {
	p := newRealPeers(t,
		anthropictest.Reply{Events: anthropictest.ThinkingToolStream("claude-test", "host_clock", `{}`)},
		anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "It is ", "noon.")},
		anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "Still noon.")},
	)
	res := p.turn("what time is it?", "low")
	if !res.OK || res.Text != "It is noon." {
		t.Fatalf("first turn = %+v; logs:\n%s", res, p.logs.String())
	}
	res = p.turn("and now?", "medium")
	if !res.OK || res.Text != "Still noon." {
		t.Fatalf("second turn = %+v; logs:\n%s", res, p.logs.String())
	}
	got := p.upstream.Requests()
	if len(got) != 3 {
		t.Fatalf("upstream saw %d requests, want 3", len(got))
	}
	for i, r := range got {
		if r.Header.Get("X-Api-Key") != realKey {
			t.Errorf("request %d: upstream did not get the real key", i)
		}
		var req Request
		if err := json.Unmarshal(r.Body, &req); err != nil {
			t.Fatal(err)
		}
		want := []int{2048, 2048, 4096}[i] // the turn's level, at most half the profile's 8,192
		if req.MaxTokens != 8192 {
			t.Errorf("request %d: max_tokens %d", i, req.MaxTokens)
		}
		if req.Thinking == nil || req.Thinking.BudgetTokens != want || !req.Stream || req.Model != "claude-test" {
			t.Errorf("request %d: thinking %+v stream %v model %q, want budget %d", i, req.Thinking, req.Stream, req.Model, want)
		}
	}
	// The third request carries the whole conversation, tool exchange included.
	body := string(got[2].Body)
	for _, want := range []string{"what time is it?", "host_clock", "tool_result", "It is noon.", "and now?"} {
		if !strings.Contains(body, want) {
			t.Errorf("last request lacks %q", want)
		}
	}
	if strings.Contains(p.logs.String(), "noon") {
		t.Error("worker logs carry model text")
	}
}

// TestCompactionThroughRealBroker: past the threshold the worker asks the
// real broker's /compact, which runs the operator's http compactor; the
// compaction lands in the session with the policy's engine and the next
// request starts with its summary.
func TestCompactionThroughRealBroker(t *testing.T) {
	var asked []sessions.CompactRequest
	var mu sync.Mutex
	comp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req sessions.CompactRequest
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		asked = append(asked, req)
		mu.Unlock()
		json.NewEncoder(w).Encode(sessions.Compaction{Summary: "Ann asked twice.", FirstKeptEntryID: req.FirstKeptEntryID, TokensBefore: req.TokensBefore})
	}))
	t.Cleanup(comp.Close)
	long := strings.Repeat("word ", 2_000)
	p := newRealPeersWith(t, Tiers{Threshold: 4_000, Ceiling: 1_000_000},
		&policy.Compactor{Kind: policy.CompactorHTTP, URL: comp.URL, AllowHTTP: true, Engine: "test_engine"},
		anthropictest.Reply{Events: withInput(anthropictest.TextStream("claude-test", long), 100)},
		anthropictest.Reply{Events: withInput(anthropictest.TextStream("claude-test", long), 5_000)},
		anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "short")},
	)
	for _, q := range []string{"one " + long, "two", "three"} {
		if res := p.turn(q, "off"); !res.OK {
			t.Fatalf("turn = %+v; logs:\n%s", res, p.logs.String())
		}
	}
	mu.Lock()
	n := len(asked)
	mu.Unlock()
	if n == 0 {
		t.Fatalf("the host compactor was never asked; logs:\n%s", p.logs.String())
	}
	got := p.upstream.Requests()
	if len(got) != 3 {
		t.Fatalf("upstream saw %d requests, want 3 (no summary call of its own)", len(got))
	}
	last := string(got[len(got)-1].Body)
	if !strings.Contains(last, summaryPrefix[:20]) || !strings.Contains(last, "Ann asked twice.") {
		t.Errorf("the request after compaction does not start with the summary")
	}
	if !strings.Contains(p.logs.String(), `"engine":"test_engine"`) {
		t.Errorf("compaction not logged with the policy's engine:\n%s", p.logs.String())
	}
}

// withInput makes the stream's message_start report input tokens (the
// tiers measure the model's usage).
func withInput(ev []anthropictest.Event, input int) []anthropictest.Event {
	ev[0] = anthropictest.Event{Name: "message_start", Data: `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"usage":{"input_tokens":` + strconv.Itoa(input) + `,"output_tokens":1}}}`}
	return ev
}

// TestRealBrokerStopMidTurn: the broker stops while the model streams (a
// systemctl stop of the channel broker); the turn fails (cause stream or
// model), the worker backs
// off, announces itself to the restarted broker and serves the next turn.
func TestRealBrokerStopMidTurn(t *testing.T) {
	p := newRealPeers(t,
		anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "par")[:4], Hang: true},
		anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "recovered")},
	)
	answered := make(chan int, 1)
	go func() {
		code, _ := p.control("first", "off")
		answered <- code
	}()
	waitFor(t, "the model call", func() bool { return len(p.upstream.Requests()) == 1 })
	time.Sleep(50 * time.Millisecond) // the stream has started
	p.stopB()
	if code := <-answered; code == 200 {
		t.Fatal("the interrupted turn was answered")
	}
	p.startBroker()
	res := p.turn("second", "off")
	if !res.OK || res.Text != "recovered" {
		t.Fatalf("turn after the restart = %+v; logs:\n%s", res, p.logs.String())
	}
	logs := p.logs.String()
	// The stream breaks, or the stopping broker ends it with an error event.
	if !strings.Contains(logs, `"msg":"turn failed","cause":"stream"`) && !strings.Contains(logs, `"msg":"turn failed","cause":"model"`) {
		t.Errorf("the interrupted turn did not fail with cause stream or model:\n%s", logs)
	}
	for _, want := range []string{`"msg":"result not accepted"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	if n := strings.Count(logs, `"msg":"worker ready"`); n < 2 {
		t.Errorf("worker announced %d times, want again after the restart", n)
	}
}

// TestCutToolInputThroughRealBroker: a tool_use whose input goes past a
// bound, from the upstream through the real broker's stream filter to the
// worker: cut short by max_tokens (not JSON: the worker reads it as no
// input), over MaxToolInputBytes (whole, but too large to keep in the
// session) and over the worker's MaxBlockBytes (within the broker's 16 MiB).
// Each turn goes on: the call is answered with a tool_result the model can
// read on its next request, an error saying why when the tool did not run,
// and the turn ends with the model's next answer.
func TestCutToolInputThroughRealBroker(t *testing.T) {
	toolStream := func(stop string, pieces ...string) []anthropictest.Event {
		ev := anthropictest.ThinkingToolStream("claude-test", "host_clock", pieces...)
		return append(ev[:len(ev)-2], anthropictest.End(stop)...)
	}
	big := func(n int) []string { // a whole object of about n bytes, in 64 KiB pieces
		body := `{"pad":"` + strings.Repeat("x", n) + `"}`
		var pieces []string
		for len(body) > 64<<10 {
			pieces, body = append(pieces, body[:64<<10]), body[64<<10:]
		}
		return append(pieces, body)
	}
	for _, tc := range []struct {
		name       string
		call       []anthropictest.Event
		wantResult string // in the tool_result the next request carries
		wantError  bool
		wantInput  string // the call's input as the next request carries it
	}{
		{"cut by max_tokens", toolStream("max_tokens", `{"tz": "Europe/Ber`), ToolInputCutText, true, OmittedInput},
		{"over MaxToolInputBytes", toolStream("tool_use", big(MaxToolInputBytes+1)...), "", false, OmittedInput},
		{"over MaxBlockBytes", toolStream("tool_use", big(MaxBlockBytes+1)...), "at most 4 MiB", true, OmittedInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRealPeers(t,
				anthropictest.Reply{Events: tc.call},
				anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "Done.")},
			)
			res := p.turn("what time is it?", "low")
			if !res.OK || res.Text != "Done." {
				t.Fatalf("turn = %+v, want it to go on to the model's next answer; logs:\n%s", res, p.logs.String())
			}
			got := p.upstream.Requests()
			if len(got) != 2 {
				t.Fatalf("upstream saw %d requests, want 2", len(got))
			}
			var req Request
			if err := json.Unmarshal(got[1].Body, &req); err != nil {
				t.Fatal(err)
			}
			use, result := findPair(t, req.Messages, "toolu_01T1x1fJ34qAmk2tNTrN7Up6")
			if string(use.Input) != tc.wantInput {
				t.Errorf("the call's input in the next request = %.80s, want %s", use.Input, tc.wantInput)
			}
			text := resultText(result)
			if result.IsError != tc.wantError || !strings.Contains(text, tc.wantResult) {
				t.Errorf("tool_result is_error=%v %q, want is_error=%v with %q", result.IsError, text, tc.wantError, tc.wantResult)
			}
		})
	}
}
