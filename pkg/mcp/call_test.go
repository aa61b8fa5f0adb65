package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

func decodeResult(t *testing.T, raw json.RawMessage) (text string, structured map[string]any, all map[string]any) {
	t.Helper()
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatalf("result %s is not an object: %v", raw, err)
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent map[string]any `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || len(r.Content) != 1 || r.Content[0].Type != "text" {
		t.Fatalf("result %s: want one text content", raw)
	}
	return r.Content[0].Text, r.StructuredContent, all
}

func TestSessionAgainstStatefulSDKServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   *sdk.StreamableHTTPOptions
		wantCT string
	}{
		{"sse answers", nil, "text/event-stream"},
		{"json answers", &sdk.StreamableHTTPOptions{JSONResponse: true}, "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, srv, rec := newSDKServer(t, tc.opts)
			c := NewClient(testOptions())
			s := server(ts.URL, policy.SessionAuto)

			for i, text := range []string{"hello", "again"} {
				raw, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{"text":"`+text+`"}`))
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				got, structured, all := decodeResult(t, raw)
				if want := "echo: " + text; got != want {
					t.Errorf("call %d text = %q, want %q", i, got, want)
				}
				if structured["echoed"] != text {
					t.Errorf("call %d structuredContent = %v, want echoed=%q", i, structured, text)
				}
				for k := range all {
					if k != "content" && k != "structuredContent" && k != "isError" {
						t.Errorf("result carries key %q; want only content/structuredContent/isError", k)
					}
				}
				for _, leak := range []string{"META-DO-NOT-LEAK", "SERVER-INSTRUCTIONS", "Mcp-Session"} {
					if strings.Contains(string(raw), leak) {
						t.Errorf("result %s leaks %q", raw, leak)
					}
				}
			}
			if n := rec.count("initialize"); n != 1 {
				t.Errorf("initialize sent %d times, want 1 (one session reused)", n)
			}
			if n := rec.count("notifications/initialized"); n != 1 {
				t.Errorf("notifications/initialized sent %d times, want 1", n)
			}
			rec.mu.Lock()
			if len(rec.issued) != 1 || rec.issued[0] == "" {
				issued := rec.issued
				rec.mu.Unlock() // the server's cleanup waits for handlers that take it
				t.Fatalf("server issued session ids %v, want exactly one", issued)
			}
			sid := rec.issued[0]
			for i, m := range rec.rpcMethods {
				if i > 0 && rec.sessionHdr[i] != sid {
					t.Errorf("request %d (%s) carried session %q, want %q", i, m, rec.sessionHdr[i], sid)
				}
				if i > 0 && rec.protoHdr[i] == "" {
					t.Errorf("request %d (%s) has no MCP-Protocol-Version header", i, m)
				}
			}
			for i, a := range rec.auth {
				if a != "Bearer "+testCred {
					t.Errorf("request %d Authorization = %q, want the bearer credential", i, a)
				}
			}
			for i, ct := range rec.callCT {
				if !strings.HasPrefix(ct, tc.wantCT) {
					t.Errorf("tools/call answer %d Content-Type = %q, want %s", i, ct, tc.wantCT)
				}
			}
			for _, m := range rec.httpMethods {
				if m == http.MethodGet {
					t.Errorf("client opened a GET stream; standalone SSE must be disabled")
				}
			}
			rec.mu.Unlock()

			closeClient(t, c)
			rec.mu.Lock()
			deletes := append([]string(nil), rec.deletes...)
			rec.mu.Unlock()
			if len(deletes) != 1 || deletes[0] != sid {
				t.Errorf("DELETEs %v, want one for session %q", deletes, sid)
			}
			n := 0
			for range srv.Sessions() {
				n++
			}
			if n != 0 {
				t.Errorf("server still has %d sessions after Close", n)
			}
			if _, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{"text":"x"}`)); err == nil {
				t.Errorf("call after Close succeeded; want ErrCanceled")
			} else {
				wantErr(t, err, ErrCanceled)
			}
		})
	}
}

func TestSDKServerToolErrorKeepsSession(t *testing.T) {
	ts, _, rec := newSDKServer(t, nil)
	c := NewClient(testOptions())
	defer closeClient(t, c)
	s := server(ts.URL, policy.SessionAuto)
	s.Tools = append(s.Tools, "nosuchtool") // declared by the operator, absent upstream
	_, err := c.CallTool(t.Context(), s, "", "nosuchtool", json.RawMessage(`{}`))
	wantErr(t, err, ErrRPC)
	assertClean(t, err, ts.URL, "nosuchtool")
	if _, err := c.CallTool(t.Context(), s, "", "echo", json.RawMessage(`{"text":"a"}`)); err != nil {
		t.Fatalf("call after a JSON-RPC error: %v", err)
	}
	if n := rec.count("initialize"); n != 1 {
		t.Errorf("initialize sent %d times, want 1: a JSON-RPC error must not end the session", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, a := range rec.auth {
		if a != "" {
			t.Errorf("request %d carried Authorization %q with no credential configured", i, a)
		}
	}
}

func TestStatelessSDKServer(t *testing.T) {
	ts, _, rec := newSDKServer(t, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	for _, mode := range []string{policy.SessionStateless, policy.SessionAuto} {
		t.Run(mode, func(t *testing.T) {
			c := NewClient(testOptions())
			defer closeClient(t, c)
			raw, err := c.CallTool(t.Context(), server(ts.URL, mode), testCred, "echo", json.RawMessage(`{"text":"s"}`))
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if got, _, _ := decodeResult(t, raw); got != "echo: s" {
				t.Errorf("text = %q, want %q", got, "echo: s")
			}
		})
	}
	if n := rec.count("initialize"); n != 1 {
		t.Errorf("initialize sent %d times, want 1 (auto only)", n)
	}
}

func TestStatelessJSONOnlyServer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     string
		f        fake
		wantInit int
	}{
		{"stateless mode", policy.SessionStateless, fake{refuseInit: true}, 0},
		{"auto, initialize refused", policy.SessionAuto, fake{refuseInit: true}, 1},
		{"auto, initialize ignored", policy.SessionAuto, fake{ignoreInit: true}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			f.call = jsonAnswer(okResult("plain"))
			ts, rec := newFake(t, &f)
			c := NewClient(testOptions())
			s := server(ts.URL, tc.mode)
			for i := range 2 {
				raw, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{"text":"x"}`))
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if got, _, _ := decodeResult(t, raw); got != "plain" {
					t.Errorf("call %d text = %q, want %q", i, got, "plain")
				}
			}
			closeClient(t, c)
			if n := rec.count("initialize"); n != tc.wantInit {
				t.Errorf("initialize sent %d times, want %d (fallback remembered for the turn)", n, tc.wantInit)
			}
			if n := rec.count("tools/call"); n != 2 {
				t.Errorf("tools/call sent %d times, want 2", n)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for i, a := range rec.auth {
				if a != "Bearer "+testCred {
					t.Errorf("request %d Authorization = %q", i, a)
				}
			}
			if len(rec.deletes) != 0 {
				t.Errorf("DELETE sent %v without a session", rec.deletes)
			}
		})
	}
}

func TestStatelessSingleEventSSE(t *testing.T) {
	f := &fake{call: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		fl := sseStart(w)
		fmt.Fprintf(w, ": keep-alive\r\n\r\n")
		fmt.Fprintf(w, "event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\n")
		fmt.Fprintf(w, "id: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\r\ndata: \"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sse\"}]}}\r\n\r\n", id)
		fl.Flush()
	}}
	ts, _ := newFake(t, f)
	for _, mode := range []string{policy.SessionStateless, policy.SessionAuto} {
		t.Run(mode, func(t *testing.T) {
			c := NewClient(testOptions())
			defer closeClient(t, c)
			raw, err := c.CallTool(t.Context(), server(ts.URL, mode), "", "echo", json.RawMessage(`{}`))
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if got, _, _ := decodeResult(t, raw); got != "sse" {
				t.Errorf("text = %q, want sse", got)
			}
		})
	}
}

func TestCredentialChangeStartsNewSession(t *testing.T) {
	ts, _, rec := newSDKServer(t, nil)
	c := NewClient(testOptions())
	s := server(ts.URL, policy.SessionAuto)
	for _, cred := range []string{"cred-one", "cred-two"} {
		if _, err := c.CallTool(t.Context(), s, cred, "echo", json.RawMessage(`{"text":"a"}`)); err != nil {
			t.Fatalf("CallTool: %v", err)
		}
	}
	closeClient(t, c)
	if n := rec.count("initialize"); n != 2 {
		t.Errorf("initialize sent %d times, want 2 (one session per credential)", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.deletes) != 2 {
		t.Errorf("DELETEs %v, want both sessions ended", rec.deletes)
	}
	// Every request of a session carries that session's credential.
	bySession := map[string]string{}
	for i, sid := range rec.sessionHdr {
		if sid == "" {
			continue
		}
		if prev, ok := bySession[sid]; ok && prev != rec.auth[i] {
			t.Errorf("session %q used with two credentials", sid)
		}
		bySession[sid] = rec.auth[i]
	}
	if len(bySession) != 2 {
		t.Errorf("saw %d sessions in use, want 2", len(bySession))
	}
}

func TestCallArgumentChecks(t *testing.T) {
	ts, rec := newFake(t, &fake{call: jsonAnswer(okResult("x"))})
	c := NewClient(testOptions())
	defer closeClient(t, c)
	for _, tc := range []struct {
		name string
		s    policy.MCPServer
		tool string
		args string
		want error
	}{
		{"http without AllowHTTP", policy.MCPServer{Name: "srv", URL: ts.URL, Session: policy.SessionAuto}, "echo", `{}`, ErrURL},
		{"http to a non-loopback host", policy.MCPServer{Name: "srv", URL: "http://example.invalid/mcp", Session: policy.SessionAuto, AllowHTTP: true}, "echo", `{}`, ErrURL},
		{"URL with userinfo", policy.MCPServer{Name: "srv", URL: "https://u:" + testCred + "@example.invalid/", Session: policy.SessionAuto}, "echo", `{}`, ErrURL},
		{"arguments not an object", server(ts.URL, policy.SessionAuto), "echo", `[1]`, ErrInvalid},
		{"arguments not JSON", server(ts.URL, policy.SessionAuto), "echo", `{"a":`, ErrInvalid},
		{"bad tool name", server(ts.URL, policy.SessionAuto), "Echo/../x", `{}`, ErrInvalid},
		{"undeclared tool", server(ts.URL, policy.SessionAuto), "add", `{}`, ErrInvalid},
		{"bad session mode", policy.MCPServer{Name: "srv", URL: ts.URL, Session: "sticky", AllowHTTP: true}, "echo", `{}`, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CallTool(t.Context(), tc.s, testCred, tc.tool, json.RawMessage(tc.args))
			wantErr(t, err, tc.want)
			assertClean(t, err, ts.URL, "example.invalid")
		})
	}
	for _, cred := range []string{"a\r\nX-Injected: 1", "tab\tok?\x00", " padded"} {
		_, err := c.CallTool(t.Context(), server(ts.URL, policy.SessionAuto), cred, "echo", json.RawMessage(`{}`))
		wantErr(t, err, ErrInvalid)
		assertClean(t, err, cred)
	}
	if n := rec.requests(); n != 0 {
		t.Errorf("server saw %d requests for refused calls, want 0", n)
	}
}

func TestCloseBoundedByContext(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	f := &fake{call: jsonAnswer(okResult("x"))}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			select { // a server that never answers the DELETE
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		f.ServeHTTP(w, r)
	})
	rec := &recorder{}
	ts := newServer(t, rec.wrap(h))
	c := NewClient(testOptions())
	if _, err := c.CallTool(t.Context(), server(ts.URL, policy.SessionAuto), "", "echo", json.RawMessage(`{}`)); err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Close(ctx)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close took %v with a 200ms context", el)
	}
	wantErr(t, err, ErrTimeout)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.deletes) != 1 {
		t.Errorf("DELETEs %v, want one attempt", rec.deletes)
	}
}

// swapHandler lets a test replace the upstream mid-turn (a server restart).
type swapHandler struct {
	mu sync.Mutex
	h  http.Handler
}

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

func TestSessionLostUpstreamIsRenewedOnce(t *testing.T) {
	_, srv, _ := newSDKServer(t, nil)
	newHandler := func() http.Handler {
		return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	}
	sw := &swapHandler{h: newHandler()}
	rec := &recorder{}
	ts := newServer(t, rec.wrap(sw))
	c := NewClient(testOptions())
	defer closeClient(t, c)
	s := server(ts.URL, policy.SessionAuto)
	if _, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{"text":"1"}`)); err != nil {
		t.Fatalf("first call: %v", err)
	}
	sw.mu.Lock()
	sw.h = newHandler() // the restarted server knows no session: 404
	sw.mu.Unlock()
	raw, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{"text":"2"}`))
	if err != nil {
		t.Fatalf("call after upstream restart: %v", err)
	}
	if got, _, _ := decodeResult(t, raw); got != "echo: 2" {
		t.Errorf("text = %q", got)
	}
	if n := rec.count("initialize"); n != 2 {
		t.Errorf("initialize sent %d times, want 2 (one renewal)", n)
	}
	if n := rec.count("tools/call"); n != 3 {
		t.Errorf("tools/call sent %d times, want 3 (ok, 404, retried)", n)
	}
}

func TestConcurrentCallsShareOneSession(t *testing.T) {
	ts, _, rec := newSDKServer(t, nil)
	c := NewClient(testOptions())
	s := server(ts.URL, policy.SessionAuto)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i)))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent call: %v", err)
		}
	}
	closeClient(t, c)
	if n := rec.count("initialize"); n != 1 {
		t.Errorf("initialize sent %d times, want 1", n)
	}
	if n := rec.count("tools/call"); n != 8 {
		t.Errorf("tools/call sent %d times, want 8", n)
	}
}
