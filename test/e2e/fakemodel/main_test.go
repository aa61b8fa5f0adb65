package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/rich"
)

func msgs(t *testing.T, js string) []message {
	t.Helper()
	var m []message
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTurnState(t *testing.T) {
	tests := []struct {
		name, in   string
		user, tool string
		step       int
	}{
		{"first call", `[{"role":"system","content":"s"},{"role":"user","content":"hi"}]`, "hi", "", 0},
		{"after a tool", `[{"role":"user","content":"old"},{"role":"assistant","content":"x"},{"role":"user","content":"MEM"},{"role":"assistant","content":null},{"role":"tool","content":"42"}]`, "MEM", "42", 1},
		{"user context JSON", `[{"role":"user","content":"{\"speaker\":{\"id\":\"a\"},\"message\":\"remember x\"}"}]`, "remember x", "", 0},
		{"no user", `[{"role":"system","content":"s"}]`, "", "", 0},
	}
	for _, tt := range tests {
		user, tool, step := turnState(msgs(t, tt.in))
		if user != tt.user || tool != tt.tool || step != tt.step {
			t.Errorf("%s: turnState = (%q, %q, %d), want (%q, %q, %d)", tt.name, user, tool, step, tt.user, tt.tool, tt.step)
		}
	}
}

func TestScriptPickAndRecord(t *testing.T) {
	dir := t.TempDir()
	rec, err := os.Create(filepath.Join(dir, "rec"))
	if err != nil {
		t.Fatal(err)
	}
	s := &server{rec: rec, script: &Script{Rules: []Rule{
		{Match: "MEM", Replies: []Reply{{ToolCalls: []ToolCall{{Name: "memory_set", Arguments: json.RawMessage(`{"k":"{{user}}"}`)}}}, {Text: "got {{tool}}"}}},
		{Match: "", Replies: []Reply{{Text: "echo {{user}}"}}},
	}}}
	call := func(body string) map[string]any {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer real")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer is not JSON: %s", w.Body)
		}
		return out
	}
	first := call(`{"model":"m","messages":[{"role":"user","content":"MEM \"q\""}]}`)
	fn := first["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)
	if fn["name"] != "memory_set" || fn["arguments"] != `{"k":"MEM \"q\""}` {
		t.Errorf("first reply function = %v, want memory_set with the user text JSON-escaped", fn)
	}
	second := call(`{"model":"m","messages":[{"role":"user","content":"MEM"},{"role":"assistant","content":null},{"role":"tool","content":"ok"}]}`)
	if got := second["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]; got != "got ok" {
		t.Errorf("second reply = %v, want %q", got, "got ok")
	}
	other := call(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
	if got := other["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]; got != "echo hello" {
		t.Errorf("fallback reply = %v, want %q", got, "echo hello")
	}
	rec.Close()
	data, _ := os.ReadFile(filepath.Join(dir, "rec"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"Authorization":["Bearer real"]`) {
		t.Errorf("record = %d lines, first %q; want 3 with the Authorization header", len(lines), lines[0])
	}
}

func TestDemoReplies(t *testing.T) {
	if r := demoReply("remember the code is 7", "", 0, false); len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "memory_set" ||
		!strings.Contains(string(r.ToolCalls[0].Arguments), `"text":"the code is 7"`) {
		t.Errorf("remember, step 0 = %+v, want a memory_set of the note", r)
	}
	if r := demoReply("what do you remember?", "", 0, false); len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "memory_get" {
		t.Errorf("recall, step 0 = %+v, want memory_get", r)
	}
	if r := demoReply("what do you remember?", `[{"text":"x"}]`, 1, false); !strings.Contains(r.Text, `[{"text":"x"}]`) {
		t.Errorf("recall, step 1 = %q, want the memory shown", r.Text)
	}
	if r := demoReply("hi", "", 0, true); !strings.Contains(r.Text, "You said: hi") || !strings.Contains(r.Text, "not a language model") {
		t.Errorf("echo = %q", r.Text)
	}
	// A research task: fetch the URL when host_fetch is offered, then report.
	task := "Demo research\nRead this page: http://127.0.0.1:8080/notes and report"
	if r := demoReply(task, "", 0, true); len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "host_fetch" ||
		string(r.ToolCalls[0].Arguments) != `{"url":"http://127.0.0.1:8080/notes"}` {
		t.Errorf("research, step 0 = %+v, want host_fetch of the URL", r)
	}
	if r := demoReply(task, `"page text"`, 1, true); !strings.Contains(r.Text, "Report on http://127.0.0.1:8080/notes") || !strings.Contains(r.Text, `"page text"`) {
		t.Errorf("research, step 1 = %q, want a report quoting the page", r.Text)
	}
	if r := demoReply(task, "", 0, false); len(r.ToolCalls) != 0 || !strings.Contains(r.Text, "You said:") {
		t.Errorf("a URL without host_fetch offered = %+v, want the echo", r)
	}
}

// TestRichDemoStream: POST /v1/messages in demo mode answers a stream the
// rich worker's own reader assembles, echoing the last guest message and
// quoting the first one of the history.
func TestRichDemoStream(t *testing.T) {
	s := &server{demo: true}
	user := func(msg string) string {
		b, _ := json.Marshal(map[string]any{"speaker": map[string]string{"id": "g"}, "message": msg})
		q, _ := json.Marshal(string(b))
		return `{"role":"user","content":[{"type":"text","text":` + string(q) + `}]}`
	}
	tests := []struct {
		name, messages string
		want           []string
	}{
		{"first turn", "[" + user("my name is Ada") + "]", []string{`You said: "my name is Ada".`, "first message of our conversation"}},
		{"second turn", "[" + user("my name is Ada") + `,{"role":"assistant","content":[{"type":"text","text":"hi"}]},` + user("what did I say?") + "]",
			[]string{`You said: "what did I say?".`, `1 earlier message(s) of yours; the first was: "my name is Ada"`}},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(`{"model":"claude-demo","max_tokens":100,"stream":true,"messages":`+tt.messages+`}`))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s: %d %s", tt.name, w.Code, w.Header().Get("Content-Type"))
		}
		resp, err := rich.ReadStream(w.Body)
		if err != nil {
			t.Fatalf("%s: the worker's stream reader refused the answer: %v", tt.name, err)
		}
		if len(resp.Content) != 1 || resp.Content[0].Type != "text" {
			t.Fatalf("%s: answer %+v", tt.name, resp)
		}
		for _, want := range tt.want {
			if !strings.Contains(resp.Content[0].Text, want) {
				t.Errorf("%s: %q lacks %q", tt.name, resp.Content[0].Text, want)
			}
		}
	}
	script := &server{script: &Script{}}
	req := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(`{}`))
	w := httptest.NewRecorder()
	script.ServeHTTP(w, req)
	if w.Code != http.StatusNotFound {
		t.Errorf("POST /v1/messages outside demo mode = %d, want 404", w.Code)
	}
}

func TestRefusesOtherPaths(t *testing.T) {
	s := &server{demo: true}
	for _, target := range []string{"/v1/models", "/v1/chat/completions?x=1"} {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", target, w.Code)
		}
	}
}

// TestHoldUntilRelease: a held reply is answered only after its release,
// and a release that arrives first lets the request through at once.
func TestHoldUntilRelease(t *testing.T) {
	s := &server{script: &Script{Rules: []Rule{{Match: "HOLD", Replies: []Reply{{Text: "held {{user}}", Hold: "{{user}}"}}}}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	ask := func(user string) <-chan string {
		got := make(chan string, 1)
		go func() {
			body := `{"model":"m","messages":[{"role":"user","content":"` + user + `"}]}`
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			var out map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&out)
			got <- out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		}()
		return got
	}
	release := func(name string) {
		resp, err := http.Post(srv.URL+"/release/"+name, "", nil)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("release %s: %v %v", name, resp, err)
		}
		resp.Body.Close()
	}
	// Released first: answered without waiting.
	release("HOLD-a")
	if got := <-ask("HOLD-a"); got != "held HOLD-a" {
		t.Errorf("pre-released reply = %q", got)
	}
	// Held: no answer until the release; the server says when the request
	// waits on its gate, so the release surely comes after.
	held := make(chan string, 1)
	s.held = held
	got := ask("HOLD-b")
	if name := <-held; name != "HOLD-b" {
		t.Fatalf("held on gate %q, want HOLD-b", name)
	}
	select {
	case r := <-got:
		t.Fatalf("held request answered before its release: %q", r)
	default:
	}
	release("HOLD-b")
	if r := <-got; r != "held HOLD-b" {
		t.Errorf("released reply = %q", r)
	}
	release("HOLD-b") // a second release is harmless
}
