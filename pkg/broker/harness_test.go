package broker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// Test credentials: distinctive so any leak is easy to find.
const (
	realModelKey = "sk-REAL-model-credential-q7Zx3Lm9Vb2Nk5Rt"
	realToolKey  = "tool-REAL-credential-W4pJ8sD1fG6hY0uE"
	realMCPKey   = "mcp-REAL-credential-00112233445566778899"
	testModel    = "policy-model"
	okAnswer     = `{"id":"c1","choices":[{"message":{"role":"assistant","content":"ok"}}]}`
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeUpstream is an httptest server that records what reached it.
type fakeUpstream struct {
	srv     *httptest.Server
	hits    atomic.Int64
	mu      sync.Mutex
	headers []http.Header
	bodies  [][]byte
	handler atomic.Pointer[http.HandlerFunc]
}

func newFakeUpstream(t *testing.T, answer string) *fakeUpstream {
	f := &fakeUpstream{}
	f.set(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.headers = append(f.headers, r.Header.Clone())
		f.bodies = append(f.bodies, body)
		f.mu.Unlock()
		(*f.handler.Load())(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeUpstream) set(h http.HandlerFunc) { f.handler.Store(&h) }

func (f *fakeUpstream) last() (http.Header, []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.headers) == 0 {
		return nil, nil
	}
	return f.headers[len(f.headers)-1], f.bodies[len(f.bodies)-1]
}

// fakeMCP is the hand-written MCPUpstream.
type fakeMCP struct {
	calls   atomic.Int64
	closed  atomic.Int64
	mu      sync.Mutex
	creds   []string
	tools   []string
	args    []string
	result  string
	err     error
	release chan struct{} // when set, CallTool waits for it
}

func (m *fakeMCP) CallTool(ctx context.Context, s policy.MCPServer, cred, tool string, args json.RawMessage) (json.RawMessage, error) {
	m.calls.Add(1)
	m.mu.Lock()
	m.creds = append(m.creds, cred)
	m.tools = append(m.tools, tool)
	m.args = append(m.args, string(args))
	res, err, rel := m.result, m.err, m.release
	m.mu.Unlock()
	if rel != nil {
		select {
		case <-rel:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return json.RawMessage(res), nil
}

func (m *fakeMCP) Close(context.Context) error { m.closed.Add(1); return nil }

type harness struct {
	t        *testing.T
	dir      string
	sock     string
	pol      *policy.Policy
	model    *fakeUpstream
	web      *fakeUpstream
	mcp      *fakeMCP
	execRuns string // file the exec tool appends to on each run
	logs     *syncBuffer
	broker   *Broker
	cancel   context.CancelFunc
	done     chan error
}

func basePolicy(modelURL, webURL, execScript string) *policy.Policy {
	return &policy.Policy{
		Version: policy.Version,
		TurnID:  "0123456789abcdef0123456789abcdef",
		Identity: policy.Identity{
			Channel: "guild/guests", ChannelTag: ids.ChannelTag("guild/guests"),
			SpeakerID: "u-42", SpeakerName: "Zoë", PrincipalID: "principal-7",
		},
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(),
		Model:          policy.Model{URL: modelURL, Name: testModel, MaxTokens: 4096, Credential: "model-key", AllowHTTP: true},
		Tools: []policy.Tool{
			{Name: "clock", Kind: policy.KindBuiltin, Builtin: "clock"},
			{Name: "echo", Kind: policy.KindExec, Argv: []string{"/bin/sh", execScript}, TimeoutMs: 5000},
			{Name: "web", Kind: policy.KindHTTP, URL: webURL, Credential: "tool-key", AllowHTTP: true},
		},
		MCP: []policy.MCPServer{
			{Name: "docs", URL: "https://mcp.example.invalid/mcp", Credential: "mcp-key", Session: policy.SessionStateless, Tools: []string{"search"}},
		},
		Limits: policy.DefaultLimits(),
	}
}

// newHarness runs a real broker on a Unix socket in a temp dir with fake
// upstreams. mutate may change the policy before the broker starts.
func newHarness(t *testing.T, mutate func(*policy.Policy)) *harness {
	t.Helper()
	return newHarnessMCP(t, mutate, true)
}

// newHarnessMCP is newHarness with or without an MCP upstream.
func newHarnessMCP(t *testing.T, mutate func(*policy.Policy), withMCP bool) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, logs: &syncBuffer{}, mcp: &fakeMCP{result: `{"content":[{"type":"text","text":"found"}],"isError":false}`}}
	h.model = newFakeUpstream(t, okAnswer)
	h.web = newFakeUpstream(t, `{"weather":"sunny"}`)
	h.execRuns = filepath.Join(dir, "exec-runs")
	script := filepath.Join(dir, "echo.sh")
	// The exec tool records that it ran, then prints its environment and input.
	writeFile(t, script, fmt.Sprintf("echo run >> %s\nprintf '{\"env\":\"%%s\",\"input\":%%s}' \"$(env | sort | tr '\\n' ';')\" \"$(cat)\"\n", h.execRuns))
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	writeFile(t, filepath.Join(credDir, "model-key"), realModelKey+"\n")
	writeFile(t, filepath.Join(credDir, "tool-key"), realToolKey+"\n")
	writeFile(t, filepath.Join(credDir, "mcp-key"), realMCPKey+"\n")
	h.pol = basePolicy(h.model.srv.URL+"/v1/chat/completions", h.web.srv.URL+"/hook", script)
	if mutate != nil {
		mutate(h.pol)
	}
	creds, err := credential.OpenDir(credDir, "")
	if err != nil {
		t.Fatal(err)
	}
	var up MCPUpstream
	if withMCP {
		up = h.mcp
	}
	h.serve(t, Config{Policy: h.pol, Credentials: creds, MCP: up,
		Logger: slog.New(slog.NewJSONHandler(h.logs, nil))})
	return h
}

// serve starts h's broker of cfg on a Unix socket in h.dir (h.sock); it
// stops when the test ends.
func (h *harness) serve(tb testing.TB, cfg Config) {
	tb.Helper()
	var err error
	if h.broker, err = New(cfg); err != nil {
		tb.Fatal(err)
	}
	h.sock = filepath.Join(h.dir, "broker.sock")
	ln, err := net.Listen("unix", h.sock)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.broker.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			tb.Error("broker did not stop")
		}
	})
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
		t.Fatal(err)
	}
}

// upstreamSeen is the number of requests any fake upstream or tool received.
func (h *harness) upstreamSeen() int64 {
	runs := int64(0)
	if data, err := os.ReadFile(h.execRuns); err == nil {
		runs = int64(bytes.Count(data, []byte("run")))
	}
	return h.model.hits.Load() + h.web.hits.Load() + h.mcp.calls.Load() + runs
}

// raw writes request bytes on a fresh connection and reads one response.
// status 0 means the connection closed without an answer.
func (h *harness) raw(method, request string) (int, string) {
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Write concurrently: the broker may answer (and close) before it has
	// read an oversized request.
	go io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// do sends one well-formed call through a real HTTP client on the socket.
func (h *harness) do(path, body string) (int, string, http.Header) {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
		},
		DisableCompression: true,
	}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "http://broker"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), resp.Header
}

// rawPost builds a request with the standard headers, then extra header
// lines; drop removes standard headers by name.
func rawPost(target, body string, extra []string, drop ...string) string {
	return rawReq("POST", target, "HTTP/1.1", body, extra, drop...)
}

func rawReq(method, target, proto, body string, extra []string, drop ...string) string {
	std := []struct{ k, v string }{
		{"Host", "broker"},
		{"Authorization", "Bearer sandbox-dummy-key"},
		{"Content-Type", "application/json"},
		{"Content-Length", fmt.Sprint(len(body))},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s\r\n", method, target, proto)
	for _, h := range std {
		skip := false
		for _, d := range drop {
			if strings.EqualFold(d, h.k) {
				skip = true
			}
		}
		if !skip {
			fmt.Fprintf(&b, "%s: %s\r\n", h.k, h.v)
		}
	}
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}
