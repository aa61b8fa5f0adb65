package broker

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

func TestCallLimitPerTurn(t *testing.T) {
	h := newHarness(t, nil)
	max := h.pol.Limits.MaxCalls
	if max != 48 {
		t.Fatalf("default maxCalls = %d, want 48", max)
	}
	// A refused request does not spend a call.
	h.raw("POST", rawPost("/model?x", goodModel, nil))
	for i := 1; i <= max; i++ {
		route, body := "/model", goodModel
		if i%3 == 0 {
			route, body = "/tools/clock", `{}`
		}
		if code, resp, _ := h.do(route, body); code != 200 {
			t.Fatalf("call %d: status %d %s", i, code, resp)
		}
	}
	before := h.upstreamSeen()
	for _, c := range []struct{ route, body string }{{"/model", goodModel}, {"/tools/echo", `{}`}, {"/mcp/docs", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}}`}} {
		code, body, _ := h.do(c.route, c.body)
		if code != 429 || body != `{"error":"call limit reached"}` {
			t.Errorf("call %d to %s: status %d body %s, want 429", max+1, c.route, code, body)
		}
	}
	if after := h.upstreamSeen(); after != before {
		t.Errorf("upstream saw %d calls past the limit", after-before)
	}
}

func TestOneCallInFlight(t *testing.T) {
	h := newHarness(t, nil)
	release := make(chan struct{})
	h.mcp.mu.Lock()
	h.mcp.release = release
	h.mcp.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	var firstCode int
	go func() {
		defer wg.Done()
		firstCode, _, _ = h.do("/mcp/docs", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}}`)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for h.mcp.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range []struct{ route, body string }{{"/model", goodModel}, {"/tools/clock", `{}`}, {"/mcp/docs", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search"}}`}} {
		code, body, _ := h.do(c.route, c.body)
		if code != 429 || body != `{"error":"call in flight"}` {
			t.Errorf("concurrent %s: status %d body %s, want 429", c.route, code, body)
		}
	}
	if h.model.hits.Load() != 0 || h.mcp.calls.Load() != 1 {
		t.Errorf("upstream saw model %d, mcp %d calls; want 0 and 1", h.model.hits.Load(), h.mcp.calls.Load())
	}
	close(release)
	wg.Wait()
	if firstCode != 200 {
		t.Errorf("first call status %d", firstCode)
	}
	if code, _, _ := h.do("/model", goodModel); code != 200 {
		t.Errorf("call after the first finished: status %d", code)
	}
}

func TestHeaderTimeout(t *testing.T) {
	h := newHarness(t, func(p *policy.Policy) { p.Limits.HeaderTimeoutMs = 200 })
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /model HTTP/1.1\r\nHost: broker\r\nAuthorization: Bearer sandbox-dummy-key\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("unfinished headers got status %d", resp.StatusCode)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("connection held %v, want the 200 ms header deadline", d)
	}
	// Finishing the headers now is too late.
	io.WriteString(c, "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	if h.upstreamSeen() != 0 {
		t.Error("upstream saw a request")
	}
}

func TestConnectionLimit(t *testing.T) {
	h := newHarness(t, nil)
	max := h.pol.Limits.MaxConnections
	if max != 16 {
		t.Fatalf("default maxConnections = %d, want 16", max)
	}
	var held []net.Conn
	for i := 0; i < max; i++ {
		c, err := net.Dial("unix", h.sock)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Prove the 16 are accepted and served: a full request on the last one.
	last := held[max-1]
	io.WriteString(last, rawPost("/tools/clock", `{}`, nil))
	br := bufio.NewReader(last)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("16th connection not served: %v", err)
	}
	before := h.upstreamSeen()
	code, _ := h.raw("POST", rawPost("/model", goodModel, nil))
	if code != 0 {
		t.Errorf("17th connection got status %d, want closed", code)
	}
	if h.upstreamSeen() != before {
		t.Error("17th connection reached the upstream")
	}
	held[0].Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		code, _ = h.raw("POST", rawPost("/model", goodModel, nil))
		if code == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 200 {
		t.Errorf("after one connection closed: status %d, want 200", code)
	}
	for _, c := range held {
		c.Close()
	}
}

func TestServeEndsAtPolicyDeadline(t *testing.T) {
	h := newHarness(t, func(p *policy.Policy) { p.DeadlineUnixMs = time.Now().Add(700 * time.Millisecond).UnixMilli() })
	// A connection open at the deadline is closed too.
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("Serve returned %v", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("broker did not stop at the policy deadline")
	}
	if h.mcp.closed.Load() != 1 {
		t.Errorf("MCP sessions closed %d times, want 1", h.mcp.closed.Load())
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after the deadline")
	}
	if _, err := net.Dial("unix", h.sock); err == nil {
		t.Error("socket still accepts after the deadline")
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	polDir := filepath.Join(dir, "policies")
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(polDir, 0o700)
	os.Mkdir(credDir, 0o700)
	up := newFakeUpstream(t, okAnswer)
	os.WriteFile(filepath.Join(credDir, "model-key"), []byte(realModelKey), 0o600)
	p := basePolicy(up.srv.URL, up.srv.URL, "/bin/true")
	p.DeadlineUnixMs = time.Now().Add(800 * time.Millisecond).UnixMilli()
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(polDir, p.TurnID+".json"), data, 0o600)
	var mu sync.Mutex
	var states []string
	var logs syncBuffer
	closed := &fakeMCP{}
	sock := filepath.Join(dir, "b.sock")
	start := time.Now()
	err = Run(context.Background(), RunOptions{
		TurnID: p.TurnID, PolicyDir: polDir, CredentialsDir: credDir, ListenPath: sock,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Notify: func(s string) { mu.Lock(); states = append(states, s); mu.Unlock() },
		NewMCP: func(_ int64, _ time.Duration, l *slog.Logger) MCPUpstream {
			l.Info("mcp client logger probe") // the MCP client logs into the broker's log
			return closed
		},
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 4*time.Second {
		t.Errorf("Run lasted %v, want about the 800 ms to the deadline", d)
	}
	if strings.Join(states, ",") != "READY=1,STOPPING=1" {
		t.Errorf("notifications %v", states)
	}
	if closed.closed.Load() != 1 {
		t.Error("MCP client not closed at the end")
	}
	if !strings.Contains(logs.String(), `"msg":"mcp client logger probe","turn":"`+p.TurnID+`"`) {
		t.Errorf("the MCP client's logger is not the broker's (with the turn):\n%s", logs.String())
	}
	if fi, err := os.Stat(sock); err == nil && fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v", fi.Mode().Perm())
	}

	for _, c := range []struct {
		name string
		o    RunOptions
	}{
		{"bad turn id", RunOptions{TurnID: "../../etc/passwd", PolicyDir: polDir, CredentialsDir: credDir, ListenPath: sock + "2"}},
		{"upper-case turn id", RunOptions{TurnID: strings.ToUpper(p.TurnID), PolicyDir: polDir, CredentialsDir: credDir, ListenPath: sock + "2"}},
		{"missing policy", RunOptions{TurnID: "ffffffffffffffffffffffffffffffff", PolicyDir: polDir, CredentialsDir: credDir, ListenPath: sock + "2"}},
		{"expired policy", RunOptions{TurnID: p.TurnID, PolicyDir: polDir, CredentialsDir: credDir, ListenPath: sock + "2"}},
		{"no credentials dir", RunOptions{TurnID: p.TurnID, PolicyDir: polDir, ListenPath: sock + "2"}},
	} {
		if err := Run(context.Background(), c.o); err == nil {
			t.Errorf("%s: Run succeeded", c.name)
		}
	}
	// A policy file naming another turn is refused.
	other := *p
	other.TurnID = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
	other.DeadlineUnixMs = time.Now().Add(time.Hour).UnixMilli()
	data, _ = other.Marshal()
	os.WriteFile(filepath.Join(polDir, p.TurnID+".json"), data, 0o600)
	if err := Run(context.Background(), RunOptions{TurnID: p.TurnID, PolicyDir: polDir, CredentialsDir: credDir, ListenPath: sock + "3"}); err == nil {
		t.Error("policy of another turn accepted")
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	up := newFakeUpstream(t, okAnswer)
	p := basePolicy(up.srv.URL, up.srv.URL, "/bin/true")
	data, _ := p.Marshal()
	os.WriteFile(filepath.Join(dir, p.TurnID+".json"), data, 0o600)
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{TurnID: p.TurnID, PolicyDir: dir, CredentialsDir: dir, Listener: ln})
	}()
	time.Sleep(100 * time.Millisecond)
	cancel() // what SIGTERM does in main
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop on cancel")
	}
}

func TestRequestDeadline(t *testing.T) {
	h := newHarness(t, func(p *policy.Policy) {
		p.Limits.RequestTimeoutMs = 300
		p.Limits.UpstreamTimeoutMs = 10_000
	})
	h.model.set(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	start := time.Now()
	code, body, _ := h.do("/model", goodModel)
	if code != 504 || body != `{"error":"upstream timed out"}` {
		t.Errorf("status %d body %s", code, body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("request lasted %v past its 300 ms deadline", d)
	}
}

func TestSlowBodyCut(t *testing.T) {
	h := newHarness(t, func(p *policy.Policy) { p.Limits.RequestTimeoutMs = 300 })
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := rawPost("/model", goodModel, nil)
	io.WriteString(c, req[:len(req)-10]) // headers and most of the body
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("a body that never finished was accepted")
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("slow body held the connection %v", d)
	}
	if h.upstreamSeen() != 0 {
		t.Error("upstream saw the unfinished request")
	}
}
