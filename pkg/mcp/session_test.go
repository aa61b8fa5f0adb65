package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// forgetful stands for a server that restarted: requests carrying a session
// id of the old incarnation (old) get refusal's answer, everything else goes
// to a fresh SDK handler (the new incarnation). refuseAll refuses every
// tools/call that carries any session id (a server that forgets at once).
type forgetful struct {
	mu        sync.Mutex
	old       string
	refuseAll bool
	next      http.Handler
	refusal   func(w http.ResponseWriter, id json.RawMessage)
}

func (f *forgetful) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.Unmarshal(body, &m)
	sid := r.Header.Get("Mcp-Session-Id")
	f.mu.Lock()
	refuse := sid != "" && (sid == f.old || f.refuseAll && m.Method == "tools/call")
	f.mu.Unlock()
	if refuse {
		if m.ID == nil {
			m.ID = json.RawMessage("null")
		}
		f.refusal(w, m.ID)
		return
	}
	f.next.ServeHTTP(w, r)
}

func refusal(status int, contentType, body string) func(http.ResponseWriter, json.RawMessage) {
	return func(w http.ResponseWriter, id json.RawMessage) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		if strings.Contains(body, "%s") {
			fmt.Fprintf(w, body, id)
		} else {
			io.WriteString(w, body)
		}
	}
}

// The answers real servers give to a request with a session id they do not
// know, and answers that look alike but must not count.
var refusals = []struct {
	name    string
	answer  func(http.ResponseWriter, json.RawMessage)
	renewed bool
}{
	// Byte for byte what server-everything 2026.8.31 answers (no id).
	{"reference server 400 (server-everything)", refusal(400, "application/json; charset=utf-8",
		`{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}`), true},
	{"reference server 400 with the request id", refusal(400, "application/json; charset=utf-8",
		`{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":%s}`), true},
	{"400 JSON-RPC error with a null id", refusal(400, "application/json",
		`{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`), true},
	{"older Python SDK 400", refusal(400, "application/json",
		`{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: No valid session ID provided"}}`), true},
	{"TypeScript SDK transport 404 JSON-RPC", refusal(404, "application/json",
		`{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}`), true},
	{"plain 404", refusal(404, "text/plain", "session not found\n"), true},
	{"404 with an empty body", refusal(404, "text/plain", ""), true},

	{"400 unrelated JSON-RPC error", refusal(400, "application/json",
		`{"jsonrpc":"2.0","error":{"code":-32600,"message":"Bad Request: Unsupported protocol version"},"id":%s}`), false},
	{"400 plain text naming the session", refusal(400, "text/plain", "Bad Request: No valid session ID provided\n"), false},
	{"400 JSON-RPC result, not an error", refusal(400, "application/json",
		`{"jsonrpc":"2.0","result":{"session":"x"},"id":%s}`), false},
	{"400 not JSON-RPC 2.0", refusal(400, "application/json",
		`{"error":{"code":-32000,"message":"No valid session ID provided"},"id":%s}`), false},
	{"400 session message past the peek bound", refusal(400, "application/json",
		`{"jsonrpc":"2.0","error":{"code":-32000,"message":"`+strings.Repeat(" ", maxRefusalBytes)+`No valid session ID"},"id":%s}`), false},
	{"500 naming the session", refusal(500, "application/json",
		`{"jsonrpc":"2.0","error":{"code":-32000,"message":"No valid session ID provided"},"id":%s}`), false},
	{"401 naming the session", refusal(401, "application/json",
		`{"jsonrpc":"2.0","error":{"code":-32000,"message":"session token expired"},"id":%s}`), false},
}

func TestSessionUnknownAfterRestart(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, srv, _ := newSDKServer(t, nil)
			handler := func() http.Handler {
				return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
			}
			fg := &forgetful{next: handler(), refusal: tc.answer}
			rec := &recorder{}
			ts := newServer(t, rec.wrap(fg))
			c := NewClient(testOptions())
			s := server(ts.URL, policy.SessionAuto)
			if _, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{"text":"1"}`)); err != nil {
				t.Fatalf("first call: %v", err)
			}
			rec.mu.Lock()
			issued := append([]string(nil), rec.issued...)
			rec.mu.Unlock()
			if len(issued) == 0 {
				t.Fatal("the server issued no session id to the first call")
			}
			old := issued[0]
			fg.mu.Lock()
			fg.old, fg.next = old, handler() // the restart
			fg.mu.Unlock()

			raw, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{"text":"2"}`))
			closeClient(t, c)
			wantInit, wantCalls := 1, 2
			if tc.renewed {
				wantInit, wantCalls = 2, 3
				if err != nil {
					t.Fatalf("call after restart: %v", err)
				}
				if got, _, _ := decodeResult(t, raw); got != "echo: 2" {
					t.Errorf("text = %q, want %q", got, "echo: 2")
				}
			} else {
				wantErr(t, err, ErrUnavailable)
				assertClean(t, err, old, "session", "Session")
			}
			if n := rec.count("initialize"); n != wantInit {
				t.Errorf("initialize sent %d times, want %d", n, wantInit)
			}
			if n := rec.count("tools/call"); n != wantCalls {
				t.Errorf("tools/call sent %d times, want %d", n, wantCalls)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if tc.renewed && len(rec.deletes) != 1 {
				// The forgotten session is not DELETEd; the renewed one is, at Close.
				t.Errorf("DELETEs for sessions %v, want only the renewed one", rec.deletes)
			}
		})
	}
}

func TestSessionRenewedAtMostOncePerCall(t *testing.T) {
	_, srv, _ := newSDKServer(t, nil)
	fg := &forgetful{
		refuseAll: true,
		next:      sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil),
		refusal:   refusals[0].answer,
	}
	rec := &recorder{}
	ts := newServer(t, rec.wrap(fg))
	c := NewClient(testOptions())
	defer closeClient(t, c)
	_, err := c.CallTool(t.Context(), server(ts.URL, policy.SessionAuto), testCred, "echo", json.RawMessage(`{"text":"1"}`))
	wantErr(t, err, ErrUnavailable)
	assertClean(t, err)
	if n := rec.count("initialize"); n != 2 {
		t.Errorf("initialize sent %d times, want 2 (one renewal)", n)
	}
	if n := rec.count("tools/call"); n != 2 {
		t.Errorf("tools/call sent %d times, want 2", n)
	}
}

// A 404 to a request that carried no session id (the server issued none) is
// not a forgotten session: no renewal.
func TestNotFoundWithoutSessionIsNotRenewed(t *testing.T) {
	rec := &recorder{}
	ts := newServer(t, rec.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		switch {
		case req.ID == nil:
			w.WriteHeader(http.StatusAccepted)
		case req.Method == "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}}`, req.ID)
		default:
			http.Error(w, "not found", http.StatusNotFound)
		}
	})))
	c := NewClient(testOptions())
	defer closeClient(t, c)
	_, err := c.CallTool(t.Context(), server(ts.URL, policy.SessionAuto), testCred, "echo", json.RawMessage(`{"text":"1"}`))
	wantErr(t, err, ErrUnavailable)
	if n := rec.count("initialize"); n != 1 {
		t.Errorf("initialize sent %d times, want 1 (no renewal)", n)
	}
}

// logLines decodes JSON log output.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// syncBuffer: the client logs from background goroutines too.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) snapshot() *bytes.Buffer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.NewBuffer(bytes.Clone(s.b.Bytes()))
}

func TestSessionLifecycleIsLoggedWithoutSecrets(t *testing.T) {
	const argSecret = "ARGUMENT-PAYLOAD-5521"
	var logs syncBuffer
	opts := testOptions()
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	// A stateful server that restarts (400 like the reference server), then
	// refuses the session-ending DELETE with 500.
	_, srv, _ := newSDKServer(t, nil)
	handler := func() http.Handler {
		return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	}
	fg := &forgetful{next: handler(), refusal: refusals[0].answer}
	var deleteFails sync.Mutex
	failDelete := false
	rec := &recorder{}
	ts := newServer(t, rec.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deleteFails.Lock()
		fail := failDelete
		deleteFails.Unlock()
		if fail && r.Method == http.MethodDelete {
			http.Error(w, bodyMarker, http.StatusInternalServerError)
			return
		}
		fg.ServeHTTP(w, r)
	})))
	// A server refusing initialize: auto mode falls back to stateless calls.
	stateless, _ := newFake(t, &fake{refuseInit: true, call: jsonAnswer(okResult("ok"))})

	c := NewClient(opts)
	s := server(ts.URL, policy.SessionAuto)
	args := json.RawMessage(`{"text":"` + argSecret + `"}`)
	if _, err := c.CallTool(t.Context(), s, testCred, "echo", args); err != nil {
		t.Fatalf("first call: %v", err)
	}
	rec.mu.Lock()
	issued := append([]string(nil), rec.issued...)
	rec.mu.Unlock()
	if len(issued) == 0 {
		t.Fatal("the server issued no session id to the first call")
	}
	old := issued[0]
	fg.mu.Lock()
	fg.old, fg.next = old, handler()
	fg.mu.Unlock()
	if _, err := c.CallTool(t.Context(), s, testCred, "echo", args); err != nil {
		t.Fatalf("call after restart: %v", err)
	}
	sl := server(stateless.URL, policy.SessionAuto)
	sl.Name = "other"
	if _, err := c.CallTool(t.Context(), sl, "", "echo", args); err != nil {
		t.Fatalf("stateless call: %v", err)
	}
	deleteFails.Lock()
	failDelete = true
	deleteFails.Unlock()
	closeClient(t, c)

	type want struct{ msg, server, reason string }
	wants := []want{
		{"mcp session started", "srv", ""},
		{"mcp session unknown to the server (restart or expiry); renewing it", "srv", ""},
		{"mcp server answered initialize without a session; using stateless calls for this turn", "other", ""},
		{"mcp session end (DELETE) failed; the server keeps the session until it expires it", "srv", "HTTP status 500"},
	}
	lines := logLines(t, logs.snapshot())
	started := 0
	for _, w := range wants {
		found := false
		for _, l := range lines {
			if l["msg"] == w.msg && l["server"] == w.server && (w.reason == "" || l["reason"] == w.reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("no log line %+v in\n%s", w, logs.snapshot())
		}
	}
	for _, l := range lines {
		if l["msg"] == "mcp session started" && l["server"] == "srv" {
			started++
		}
	}
	if started != 2 {
		t.Errorf("%d session starts logged for srv, want 2 (first, renewal)", started)
	}
	rec.mu.Lock()
	issued = slices.Clone(rec.issued)
	rec.mu.Unlock()
	text := logs.snapshot().String()
	for _, f := range append(issued, testCred, argSecret, bodyMarker, ts.URL, stateless.URL, "127.0.0.1", "Bearer", "No valid session") {
		if strings.Contains(text, f) {
			t.Errorf("log holds %q:\n%s", f, text)
		}
	}
}

// A DELETE that cannot reach the server is logged with its category.
func TestSessionEndTransportFailureLogged(t *testing.T) {
	var logs syncBuffer
	opts := testOptions()
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	ts, _, _ := newSDKServer(t, nil)
	c := NewClient(opts)
	if _, err := c.CallTool(t.Context(), server(ts.URL, policy.SessionAuto), testCred, "echo", json.RawMessage(`{"text":"1"}`)); err != nil {
		t.Fatalf("call: %v", err)
	}
	ts.CloseClientConnections()
	ts.Listener.Close()
	closeClient(t, c)
	found := false
	for _, l := range logLines(t, logs.snapshot()) {
		if strings.HasPrefix(l["msg"].(string), "mcp session end (DELETE) failed") && l["reason"] == "connection failed" && l["server"] == "srv" {
			found = true
		}
	}
	if !found {
		t.Errorf("no DELETE failure line in\n%s", logs.snapshot())
	}
}

// FuzzSessionRefused: any upstream answer is handed on byte for byte, and
// only a 404 or a 400 JSON-RPC error naming the session counts.
func FuzzSessionRefused(f *testing.F) {
	f.Add(400, "application/json", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":1}`)
	f.Add(400, "application/json", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"x"},"id":1}`)
	f.Add(404, "text/plain", "gone")
	f.Add(400, "application/json", `{"jsonrpc":"2.0","error":null,"result":1}`)
	f.Fuzz(func(t *testing.T, status int, ct, body string) {
		resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(body))}
		unknown, rc := sessionRefused(resp)
		got, err := io.ReadAll(rc)
		if err != nil || string(got) != body {
			t.Fatalf("body handed on = %q, %v; want %q", got, err, body)
		}
		if unknown && status != 404 && !(status == 400 && strings.Contains(strings.ToLower(body), "session") && strings.Contains(body, "error")) {
			t.Fatalf("status %d %q counted as an unknown session", status, body)
		}
	})
}
