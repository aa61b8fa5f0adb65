package broker

import (
	"bufio"
	"context"
	"encoding/base64"
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

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic"
	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/richroute"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

const realAnthropicKey = "sk-ant-api03-REALkey9Xq2Lm7Vb4Nk8Rt3Zp6Wy1"

type anthHarness struct {
	*harness
	up *anthropictest.Server
}

// newAnthropicHarness runs a rich broker whose model route goes to a fake
// Anthropic upstream, with a turn bound (thinking ceiling "medium") unless
// unbound is set.
func newAnthropicHarness(t *testing.T, kind string, silence time.Duration, unbound bool, replies ...anthropictest.Reply) *anthHarness {
	t.Helper()
	h := startAnthropicHarness(t, kind, silence, unbound, replies...)
	h.t = t
	return h
}

// startAnthropicHarness is newAnthropicHarness for tests and benchmarks.
func startAnthropicHarness(tb testing.TB, kind string, silence time.Duration, unbound bool, replies ...anthropictest.Reply) *anthHarness {
	tb.Helper()
	dir := tb.TempDir()
	h := &harness{dir: dir, logs: &syncBuffer{}, mcp: &fakeMCP{result: `{"content":[],"isError":false}`}}
	up := anthropictest.New(tb, replies...)
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	for name, v := range map[string]string{"anthropic": realAnthropicKey, "tool-key": realToolKey, "mcp-key": realMCPKey} {
		if err := os.WriteFile(filepath.Join(credDir, name), []byte(v+"\n"), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	h.pol = basePolicy("https://unused.example", "http://127.0.0.1:1/hook", "/bin/true")
	h.pol.Model = policy.Model{}
	h.pol.Identity.SpeakerID, h.pol.Identity.SpeakerName, h.pol.Identity.PrincipalID = "", "", ""
	h.pol.Rich = &policy.Rich{URL: up.URL, AllowHTTP: true, Model: "claude-test", MaxOutputTokens: 4096,
		Thinking: "high", Credential: "anthropic", CredentialKind: kind, MaxCalls: 8}
	creds, err := credential.OpenDir(credDir, "")
	if err != nil {
		tb.Fatal(err)
	}
	h.serve(tb, Config{Policy: h.pol, Credentials: creds, MCP: h.mcp, ControlUID: os.Getuid(),
		AnthropicSilence: silence, Logger: slog.New(slog.NewJSONHandler(h.logs, nil))})
	if !unbound {
		bctx, bcancel := context.WithCancel(context.Background())
		tb.Cleanup(bcancel)
		h.control(bctx, h.bind("medium"))
		for i := 0; ; i++ {
			if _, ok := h.broker.rich.Bound(); ok {
				break
			}
			if i == 400 {
				tb.Fatal("turn never bound")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return &anthHarness{harness: h, up: up}
}

// post sends a model call with the worker's headers; it returns the response
// with its body unread.
func (h *anthHarness) post(path, body string, hdr ...string) *http.Response {
	h.t.Helper()
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
		},
		DisableCompression: true,
	}}
	req, _ := http.NewRequest(http.MethodPost, "http://broker"+path, strings.NewReader(body))
	req.Header.Set("X-Api-Key", "sandbox-dummy-key")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

const streamReq = `{"model":"claude-test","max_tokens":100000,"stream":true,"thinking":{"type":"enabled","budget_tokens":60000},"messages":[{"role":"user","content":"hi"}]}`

func TestAnthropicStreamThroughBroker(t *testing.T) {
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 0, false,
		anthropictest.Reply{Events: anthropictest.ThinkingToolStream("claude-test", "clock", `{"tz":`, `"UTC"}`)})
	resp := h.post(richroute.RouteAnthropicMessages+"?beta=true", streamReq, "Anthropic-Beta", "interleaved-thinking-2025-05-14")
	body := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d type %q body %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	rd := anthropic.NewStreamReader(strings.NewReader(body))
	n := 0
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == "error" {
			t.Fatalf("error event in a good stream: %s", body)
		}
		n++
	}
	if n != 15 {
		t.Errorf("%d events passed, want 15", n)
	}
	got := h.up.Requests()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	r := got[0]
	want := map[string]string{"X-Api-Key": realAnthropicKey, "Anthropic-Version": "2023-06-01",
		"Anthropic-Beta": "interleaved-thinking-2025-05-14", "Accept": "text/event-stream", "Content-Type": "application/json", "Authorization": ""}
	for k, v := range want {
		if r.Header.Get(k) != v {
			t.Errorf("upstream header %s = %q, want %q", k, r.Header.Get(k), v)
		}
	}
	if r.Path != "/v1/messages" || r.RawQuery != "beta=true" {
		t.Errorf("upstream target %s?%s", r.Path, r.RawQuery)
	}
	// Rebuilt: output limit clamped to the profile's, thinking to the turn's medium ceiling.
	for _, s := range []string{`"max_tokens":4096`, `"budget_tokens":4095`, `"model":"claude-test"`, `"stream":true`} {
		if !strings.Contains(string(r.Body), s) {
			t.Errorf("upstream body %s lacks %s", r.Body, s)
		}
	}
	if !strings.Contains(h.logs.String(), `"route":"/anthropic/v1/messages"`) || strings.Contains(h.logs.String(), "hi") && strings.Contains(h.logs.String(), `"content"`) {
		t.Errorf("log: %s", h.logs.String())
	}
}

func TestAnthropicOAuthAndCountTokens(t *testing.T) {
	h := newAnthropicHarness(t, policy.CredentialOAuth, 0, false, anthropictest.Reply{JSON: `{"input_tokens":12}`})
	resp := h.post(richroute.RouteAnthropicCount, `{"messages":[{"role":"user","content":"hi"}]}`)
	if body := readAll(t, resp); resp.StatusCode != 200 || body != `{"input_tokens":12}` {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, body)
	}
	r := h.up.Requests()[0]
	if r.Header.Get("Authorization") != "Bearer "+realAnthropicKey || r.Header.Get("X-Api-Key") != "" || r.Header.Get("Anthropic-Beta") != richroute.OAuthBeta || r.Path != "/v1/messages/count_tokens" {
		t.Errorf("upstream headers %v path %s", r.Header, r.Path)
	}
}

func TestAnthropicStreamRefusals(t *testing.T) {
	split := realAnthropicKey[:15]
	tests := []struct {
		name  string
		reply anthropictest.Reply
		code  int    // status the worker sees
		event string // an error event type the stream ends with, "" for none
	}{
		{"credential split across two chunks", anthropictest.Reply{Events: []anthropictest.Event{anthropictest.Start("claude-test"),
			anthropictest.BlockStart(0, `{"type":"text","text":""}`), anthropictest.TextDelta(0, "key "+split), anthropictest.TextDelta(0, realAnthropicKey[15:])}}, 200, "api_error"},
		{"tool credential reflected base64", anthropictest.Reply{Events: []anthropictest.Event{anthropictest.Start("claude-test"),
			anthropictest.BlockStart(0, `{"type":"text","text":""}`), anthropictest.TextDelta(0, base64.StdEncoding.EncodeToString([]byte(realToolKey)))}}, 200, "api_error"},
		{"upstream error event", anthropictest.Reply{Events: []anthropictest.Event{anthropictest.Start("claude-test"), anthropictest.ErrorEvent("overloaded_error", "internal detail")}}, 200, "overloaded_error"},
		{"upstream redirect", anthropictest.Reply{Redirect: "http://127.0.0.1:1/elsewhere"}, 502, ""},
		{"upstream 529", anthropictest.Reply{Status: 529, JSON: `{"type":"error","error":{"type":"overloaded_error","message":"internal detail"}}`}, 529, ""},
		{"upstream 401", anthropictest.Reply{Status: 401, JSON: `{"type":"error","error":{"type":"authentication_error","message":"internal detail"}}`}, 502, ""},
		{"upstream 400", anthropictest.Reply{Status: 400, JSON: `{"internal detail":1}`}, 400, ""},
		{"upstream JSON to a stream request", anthropictest.Reply{JSON: `{"type":"message"}`}, 502, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newAnthropicHarness(t, policy.CredentialAPIKey, 0, false, tt.reply)
			resp := h.post(richroute.RouteAnthropicMessages, streamReq)
			body := readAll(t, resp)
			if resp.StatusCode != tt.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.code, body)
			}
			if strings.Contains(body, "internal detail") || strings.Contains(body, realAnthropicKey[15:]) || strings.Contains(body, "127.0.0.1") {
				t.Errorf("the worker got upstream text: %s", body)
			}
			if tt.event != "" && !strings.Contains(body, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\""+tt.event+"\"") {
				t.Errorf("stream does not end with a %s event: %s", tt.event, body)
			}
			if strings.Contains(h.logs.String(), realAnthropicKey) || strings.Contains(h.logs.String(), "internal detail") {
				t.Errorf("log holds upstream text or the key: %s", h.logs.String())
			}
			if tt.reply.Status != 0 && !strings.Contains(h.logs.String(), fmt.Sprintf(`"upstream_status":%d`, tt.reply.Status)) {
				t.Errorf("log does not name the upstream status: %s", h.logs.String())
			}
			if tt.reply.Status != 0 && h.broker.refusals.Load() != 0 {
				t.Errorf("an upstream error counted as a guest refusal")
			}
		})
	}
}

// TestAnthropicCutToolInputPasses: under the admitted
// fine-grained-tool-streaming beta, an answer that max_tokens ends inside a
// tool input (not JSON) reaches the worker whole: the block's stop, stop
// reason max_tokens and the usage, with no error event.
func TestAnthropicCutToolInputPasses(t *testing.T) {
	evs := []anthropictest.Event{anthropictest.Start("claude-test"),
		anthropictest.BlockStart(0, `{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"write_reply_file","input":{}}`),
		anthropictest.InputDelta(0, `{"name": "notes.md", "te`), anthropictest.InputDelta(0, `xt": "# Notes\n\nThe first part`),
		anthropictest.BlockStop(0)}
	evs = append(evs, anthropictest.End("max_tokens")...)
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 0, false, anthropictest.Reply{Events: evs})
	resp := h.post(richroute.RouteAnthropicMessages+"?beta=true", streamReq, "Anthropic-Beta", "fine-grained-tool-streaming-2025-05-14")
	body := readAll(t, resp)
	if resp.StatusCode != 200 || strings.Contains(body, "event: error") {
		t.Fatalf("status %d, body:\n%s", resp.StatusCode, body)
	}
	for _, want := range []string{"event: content_block_stop\n", `"stop_reason":"max_tokens"`, `"usage":{"output_tokens":15}`, "event: message_stop\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("the worker did not get %s:\n%s", want, body)
		}
	}
	if got := h.up.Requests(); len(got) != 1 || got[0].Header.Get("Anthropic-Beta") != "fine-grained-tool-streaming-2025-05-14" {
		t.Errorf("upstream requests %d, beta %q", len(got), got[0].Header.Get("Anthropic-Beta"))
	}
	if strings.Contains(h.logs.String(), "not JSON") || strings.Contains(h.logs.String(), "notes.md") {
		t.Errorf("log: %s", h.logs.String())
	}
}

// TestAnthropicServerToolAndCitationsEndTheStream pins what docs/rich-channels.md says of
// answers the broker never asks for (requests carry no documents and no
// server tools): a server_tool_use block or a citations_delta ends the
// stream mid-way with a generic api_error event, after what passed before
// it, and the broker's log names the reason, never the upstream's text.
func TestAnthropicServerToolAndCitationsEndTheStream(t *testing.T) {
	text := anthropictest.BlockStart(0, `{"type":"text","text":""}`)
	for _, tt := range []struct {
		name   string
		evs    []anthropictest.Event
		reason string
	}{
		{"server_tool_use block", []anthropictest.Event{anthropictest.Start("claude-test"), text, anthropictest.TextDelta(0, "Let me search."), anthropictest.BlockStop(0),
			anthropictest.BlockStart(1, `{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{"query":"internal detail"}}`)},
			"content block type not allowed"},
		{"web_search_tool_result block", []anthropictest.Event{anthropictest.Start("claude-test"),
			anthropictest.BlockStart(0, `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://internal.example/detail","title":"internal detail"}]}`)},
			"content block type not allowed"},
		{"citations_delta", []anthropictest.Event{anthropictest.Start("claude-test"), text, anthropictest.TextDelta(0, "The grass is green."),
			anthropictest.Delta(0, `{"type":"citations_delta","citation":{"type":"char_location","cited_text":"internal detail","document_index":0,"document_title":"internal detail","start_char_index":0,"end_char_index":15}}`)},
			"delta type does not fit its block"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			evs := append(tt.evs, anthropictest.End("end_turn")...)
			h := newAnthropicHarness(t, policy.CredentialAPIKey, 0, false, anthropictest.Reply{Events: evs})
			resp := h.post(richroute.RouteAnthropicMessages, streamReq)
			body := readAll(t, resp)
			if resp.StatusCode != 200 || !strings.Contains(body, "event: message_start\n") {
				t.Fatalf("status %d, body:\n%s", resp.StatusCode, body)
			}
			if !strings.HasSuffix(body, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"upstream failed\"}}\n\n") {
				t.Errorf("stream does not end with the generic api_error event:\n%s", body)
			}
			for _, never := range []string{"internal", "srvtoolu", "web_search", "citation", `"stop_reason":"end_turn"`} {
				if strings.Contains(body, never) {
					t.Errorf("the worker got %s:\n%s", never, body)
				}
			}
			logs := h.logs.String()
			if !strings.Contains(logs, `"msg":"model call failed"`) || !strings.Contains(logs, tt.reason) || strings.Contains(logs, "internal") {
				t.Errorf("log does not name %q alone:\n%s", tt.reason, logs)
			}
		})
	}
}

func TestAnthropicSilence(t *testing.T) {
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 200*time.Millisecond, false,
		anthropictest.Reply{Events: []anthropictest.Event{anthropictest.Start("claude-test")}, Hang: true})
	began := time.Now()
	resp := h.post(richroute.RouteAnthropicMessages, streamReq)
	body := readAll(t, resp)
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("silent stream took %v", d)
	}
	if !strings.Contains(body, "message_start") || !strings.Contains(body, `"type":"api_error"`) {
		t.Fatalf("body %s", body)
	}
	if !strings.Contains(h.logs.String(), "silent") {
		t.Errorf("log does not name the silence: %s", h.logs.String())
	}
}

func TestAnthropicBackpressure(t *testing.T) {
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 2*time.Second, false, anthropictest.Reply{
		Events: []anthropictest.Event{anthropictest.Start("claude-test"), anthropictest.BlockStart(0, `{"type":"text","text":""}`)}, Endless: true})
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if uc, ok := c.(*net.UnixConn); ok {
		uc.SetReadBuffer(4 << 10)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: b\r\nX-Api-Key: sandbox-dummy-key\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", richroute.RouteAnthropicMessages, len(streamReq), streamReq)
	br := bufio.NewReaderSize(c, 4<<10)
	if _, err := br.Peek(100); err != nil {
		t.Fatal(err)
	}
	// The client stops reading: the broker stops reading upstream.
	time.Sleep(500 * time.Millisecond)
	w1 := h.up.Written.Load()
	time.Sleep(500 * time.Millisecond)
	w2 := h.up.Written.Load()
	const bound = 16 << 20
	if w1 > bound || w2-w1 > 512<<10 {
		t.Fatalf("upstream wrote %d then %d bytes to a client that stopped reading (bound %d)", w1, w2, bound)
	}
	t.Logf("upstream wrote %d bytes before backpressure held (then +%d)", w1, w2-w1)
	// Past the silence limit on the write side, the broker gives up.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(h.logs.String(), "client stopped reading") {
		if time.Now().After(deadline) {
			t.Fatalf("the broker never gave up on the stuck client: %s", h.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAnthropicSlotsAndBudget(t *testing.T) {
	var replies []anthropictest.Reply
	for range richroute.AnthropicSlots {
		replies = append(replies, anthropictest.Reply{Events: []anthropictest.Event{anthropictest.Start("claude-test")}, Hang: true})
	}
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 3*time.Second, false, replies...)
	var open []*http.Response
	for range richroute.AnthropicSlots {
		resp := h.post(richroute.RouteAnthropicMessages, streamReq)
		if resp.StatusCode != 200 {
			t.Fatalf("call in a free slot: %d", resp.StatusCode)
		}
		open = append(open, resp)
	}
	resp := h.post(richroute.RouteAnthropicMessages, streamReq)
	if body := readAll(t, resp); resp.StatusCode != 429 || !strings.Contains(body, "rate_limit_error") {
		t.Fatalf("fifth call: %d %s, want 429", resp.StatusCode, body)
	}
	for _, r := range open {
		r.Body.Close()
	}
	// The call budget: 8 a turn, four spent.
	h.up.Push(anthropictest.Reply{JSON: `{"input_tokens":1}`}, anthropictest.Reply{JSON: `{"input_tokens":1}`},
		anthropictest.Reply{JSON: `{"input_tokens":1}`}, anthropictest.Reply{JSON: `{"input_tokens":1}`}, anthropictest.Reply{JSON: `{"input_tokens":1}`})
	time.Sleep(100 * time.Millisecond)
	codes := []int{}
	for range 5 {
		resp := h.post(richroute.RouteAnthropicCount, `{"messages":[{"role":"user","content":"hi"}]}`)
		readAll(t, resp)
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 200 200 429]" {
		t.Fatalf("codes %v, want four answers then the call limit", codes)
	}
}

func TestAnthropicRefusedOutsideABoundTurn(t *testing.T) {
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 0, true, anthropictest.Reply{JSON: `{"input_tokens":1}`})
	resp := h.post(richroute.RouteAnthropicCount, `{"messages":[{"role":"user","content":"hi"}]}`)
	if body := readAll(t, resp); resp.StatusCode != 401 {
		t.Fatalf("unbound call: %d %s, want 401", resp.StatusCode, body)
	}
	if len(h.up.Requests()) != 0 {
		t.Fatal("upstream reached outside a bound turn")
	}
}

// TestAnthropicHostile: requests the model route refuses, each with the
// upstream never reached.
func TestAnthropicHostile(t *testing.T) {
	good := `{"messages":[{"role":"user","content":"hi"}]}`
	post := func(target, body string, extra []string, drop ...string) string {
		std := []string{"Host: broker", "X-Api-Key: sandbox-dummy-key", "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body))}
		var b strings.Builder
		fmt.Fprintf(&b, "POST %s HTTP/1.1\r\n", target)
	next:
		for _, s := range std {
			for _, d := range drop {
				if strings.HasPrefix(s, d+":") {
					continue next
				}
			}
			b.WriteString(s + "\r\n")
		}
		for _, e := range extra {
			b.WriteString(e + "\r\n")
		}
		return b.String() + "\r\n" + body
	}
	type tc struct {
		name, method, raw string
		want              int
	}
	var cs []tc
	add := func(name string, want int, raw string) { cs = append(cs, tc{name, "POST", raw, want}) }
	for _, m := range []string{"GET", "PUT", "DELETE", "PATCH", "HEAD"} {
		cs = append(cs, tc{"method " + m, m, strings.Replace(post(richroute.RouteAnthropicMessages, good, nil), "POST", m, 1), 405})
	}
	for _, target := range []string{
		"/anthropic/v1/messages/", "/anthropic/v1/messages/batches", "/anthropic/v1/models", "/anthropic/v1/files",
		"/anthropic/v1/messages/count_tokens/", "/anthropic/v1/complete", "/anthropic/v1/organizations/me", "/anthropic/v1/skills",
		"/anthropic/v2/messages", "/anthropic//v1/messages", "/anthropic/v1//messages", "/anthropic/./v1/messages",
		"/anthropic/v1/../v1/messages", "/anthropic/v1/%6Dessages", "/anthropic/V1/messages", "/anthropic/v1/Messages",
		"/anthropic/v1/messages;x", "/anthropic", "/anthropic/", "/anthropic/v1/messages%00", "/anthropic/v1/messages/batches/x/results",
	} {
		add("route "+target, 404, post(target, good, nil))
	}
	for _, q := range []string{"?beta=false", "?beta=true&x=1", "?x=1", "?", "?beta=TRUE", "?beta", "?beta=true#f", "?%62eta=true", "?beta=true&beta=true"} {
		add("query "+q, 404, post(richroute.RouteAnthropicMessages+q, good, nil))
	}
	for name, hdr := range map[string][]string{
		"cookie":              {"Cookie: a=b"},
		"x-forwarded-for":     {"X-Forwarded-For: 1.2.3.4"},
		"forwarded":           {"Forwarded: for=1.2.3.4"},
		"proxy-auth":          {"Proxy-Authorization: Basic eA=="},
		"via":                 {"Via: 1.1 x"},
		"connection":          {"Connection: keep-alive, X-Api-Key"},
		"upgrade":             {"Upgrade: h2c"},
		"te":                  {"TE: trailers"},
		"expect":              {"Expect: 100-continue"},
		"origin":              {"Origin: https://evil.example"},
		"x-unknown":           {"X-Stainless-Lang: go"},
		"repeated key":        {"X-Api-Key: sandbox-dummy-key"},
		"anthropic-dangerous": {"Anthropic-Dangerous-Direct-Browser-Access: true"},
		"beta not allowed":    {"Anthropic-Beta: files-api-2025-04-14"},
		"beta mcp":            {"Anthropic-Beta: mcp-client-2025-04-04"},
		"beta code exec":      {"Anthropic-Beta: code-execution-2025-08-25"},
		"beta one bad of two": {"Anthropic-Beta: interleaved-thinking-2025-05-14,context-1m-2025-08-07"},
		"beta oauth":          {"Anthropic-Beta: oauth-2025-04-20"},
		"version other":       {"Anthropic-Version: 2024-01-01"},
		"two credentials":     {"Authorization: Bearer sandbox-dummy-key"},
	} {
		add("header "+name, map[string]int{"two credentials": 401}[name]|400, post(richroute.RouteAnthropicMessages, good, hdr))
	}
	add("real-looking key", 401, post(richroute.RouteAnthropicMessages, good, []string{"X-Api-Key: " + realAnthropicKey}, "X-Api-Key"))
	add("no key", 401, post(richroute.RouteAnthropicMessages, good, nil, "X-Api-Key"))
	add("bearer other", 401, post(richroute.RouteAnthropicMessages, good, []string{"Authorization: Bearer x"}, "X-Api-Key"))
	add("no content type", 415, post(richroute.RouteAnthropicMessages, good, nil, "Content-Type"))
	add("text/plain", 415, post(richroute.RouteAnthropicMessages, good, []string{"Content-Type: text/plain"}, "Content-Type"))
	add("charset latin1", 415, post(richroute.RouteAnthropicMessages, good, []string{"Content-Type: application/json; charset=latin1"}, "Content-Type"))
	add("chunked", 411, post(richroute.RouteAnthropicMessages, "", []string{"Transfer-Encoding: chunked"}, "Content-Length")+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(good), good))
	add("over 96 MiB declared", 413, post(richroute.RouteAnthropicMessages, "", []string{fmt.Sprintf("Content-Length: %d", anthropic.MaxRequestBytes+1)}, "Content-Length"))
	add("HTTP/1.0", 400, strings.Replace(post(richroute.RouteAnthropicMessages, good, nil), "HTTP/1.1", "HTTP/1.0", 1))
	for name, body := range map[string]string{
		"wrong model":         `{"model":"claude-opus-other","messages":[{"role":"user","content":"hi"}]}`,
		"web_search tool":     `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`,
		"web_fetch tool":      `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]}`,
		"code_execution tool": `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`,
		"bash tool":           `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"bash_20250124","name":"bash"}]}`,
		"computer tool":       `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"computer_20250124","name":"computer"}]}`,
		"mcp_servers":         `{"messages":[{"role":"user","content":"hi"}],"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]}`,
		"container":           `{"messages":[{"role":"user","content":"hi"}],"container":"c"}`,
		"url image":           `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`,
		"file image":          `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}`,
		"url document":        `{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://x/a.pdf"}}]}]}`,
		"remote $ref":         `{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"$ref":"https://evil.example/s"}}}}]}`,
		"remote $schema":      `{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object","$schema":"https://evil.example/m"}}]}`,
		"unknown field":       `{"messages":[{"role":"user","content":"hi"}],"foo":1}`,
		"metadata extra":      `{"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u","x":1}}`,
		"duplicate key":       `{"messages":[{"role":"user","content":"hi"}],"messages":[]}`,
		"invalid utf8":        "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		"not json":            `hello`,
		"array":               `[]`,
		"system role":         `{"messages":[{"role":"system","content":"x"}]}`,
		"max_tokens string":   `{"max_tokens":"9","messages":[{"role":"user","content":"hi"}]}`,
		"thinking bogus":      `{"thinking":{"type":"max"},"messages":[{"role":"user","content":"hi"}]}`,
		"cache_control bad":   `{"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"forever"}}]}]}`,
		"server_tool_use":     `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}]}`,
	} {
		add("body "+name, 400, post(richroute.RouteAnthropicMessages, body, nil))
		add("count body "+name, 400, post(richroute.RouteAnthropicCount, body, nil))
	}
	add("count with max_tokens", 400, post(richroute.RouteAnthropicCount, `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, nil))
	add("count with stream", 400, post(richroute.RouteAnthropicCount, `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil))
	if len(cs) < 100 {
		t.Fatalf("only %d hostile cases", len(cs))
	}
	// Fresh brokers every MaxRefusals-1 cases: the refusal budget is its own test.
	var h *anthHarness
	for i, c := range cs {
		if i%(MaxRefusals-1) == 0 {
			h = newAnthropicHarness(t, policy.CredentialAPIKey, 0, false)
		}
		t.Run(c.name, func(t *testing.T) {
			got, body := h.raw(c.method, c.raw)
			if got != c.want {
				t.Errorf("status %d, want %d (%s)", got, c.want, body)
			}
			if c.method != "HEAD" && got != 0 && !strings.HasPrefix(body, `{"type":"error","error":{"type":"`) {
				t.Errorf("error body not in the provider's shape: %s", body)
			}
			if n := len(h.up.Requests()); n != 0 {
				t.Errorf("upstream reached %d times", n)
			}
		})
	}
}

func TestAnthropicRequestBodySilence(t *testing.T) {
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 200*time.Millisecond, false)
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Declares the whole body, sends half, then goes quiet.
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: b\r\nX-Api-Key: sandbox-dummy-key\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		richroute.RouteAnthropicMessages, len(streamReq), streamReq[:len(streamReq)/2])
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	began := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Fatalf("a silent request body held the call %v", d)
	}
	if len(h.up.Requests()) != 0 {
		t.Fatal("upstream reached with half a body")
	}
}

func TestAnthropicRevocationEndsTheStream(t *testing.T) {
	h := newAnthropicHarness(t, policy.CredentialAPIKey, 0, true,
		anthropictest.Reply{Events: []anthropictest.Event{anthropictest.Start("claude-test")}, Hang: true})
	ctx, revoke := context.WithCancel(context.Background())
	defer revoke()
	h.control(ctx, h.bind("high"))
	h.waitBound(t)
	resp := h.post(richroute.RouteAnthropicMessages, streamReq)
	done := make(chan string, 1)
	go func() { done <- readAll(t, resp) }()
	time.Sleep(100 * time.Millisecond)
	revoke() // the host ends the turn
	select {
	case body := <-done:
		if !strings.Contains(body, "message_start") || !strings.Contains(body, "event: error") {
			t.Fatalf("body %s", body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived its turn's revocation")
	}
}

func TestAnthropicJSONAnswers(t *testing.T) {
	msg := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`
	tests := []struct {
		name, json string
		code       int
	}{
		{"plain answer", msg, 200},
		{"answer reflecting the key", strings.Replace(msg, `"hi"`, `"`+realAnthropicKey+`"`, 1), 502},
		{"answer reflecting the MCP key hex", strings.Replace(msg, `"hi"`, `"`+fmt.Sprintf("%x", realMCPKey)+`"`, 1), 502},
		{"answer not JSON", `oops`, 502},
		{"answer with duplicate keys", `{"a":1,"a":2}`, 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newAnthropicHarness(t, policy.CredentialAPIKey, 0, false, anthropictest.Reply{JSON: tt.json})
			resp := h.post(richroute.RouteAnthropicMessages, `{"messages":[{"role":"user","content":"hi"}]}`)
			body := readAll(t, resp)
			if resp.StatusCode != tt.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.code, body)
			}
			if tt.code != 200 && (strings.Contains(body, realAnthropicKey) || strings.Contains(body, "oops")) {
				t.Fatalf("body %s", body)
			}
		})
	}
}

// TestAnthropicStreamOutlivesSilenceLimit: a stream whose chunks come
// more often than the silence limit runs past it (and past the server's
// per-request read timeout): silence, not total time. Time is what the
// test is about: the chunks come 50 ms apart against a 1 s limit, so only
// a pause of the whole process near a second cuts it (a 100 ms gap against
// 300 ms was cut under -race on a busy machine).
func TestAnthropicStreamOutlivesSilenceLimit(t *testing.T) {
	chunks := make([]string, 50)
	for i := range chunks {
		chunks[i] = string(rune('a' + i%26))
	}
	evs := anthropictest.TextStream("claude-test", chunks...)
	h := newAnthropicHarness(t, policy.CredentialAPIKey, time.Second, false,
		anthropictest.Reply{Events: evs, Delay: 50 * time.Millisecond})
	began := time.Now()
	resp := h.post(richroute.RouteAnthropicMessages, streamReq)
	body := readAll(t, resp)
	if d := time.Since(began); d < 2*time.Second {
		t.Fatalf("stream took %v, want over 2 s, twice the limit (the test is wrong)", d)
	}
	if strings.Contains(body, "event: error") || !strings.Contains(body, "message_stop") {
		t.Fatalf("a lively stream was cut: %s", body)
	}
}
