package runmcp

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// fakeHost answers the run endpoints of the host API as docs/api.md documents
// them, on a Unix socket, so that the real pkg/client is the Runner.
type fakeHost struct {
	mu       sync.Mutex
	requests []string
	params   []runs.Params
	// approveStatus is what POST /approve answers (0: 200).
	approveStatus int
	// startStatus/startReason: POST /v1/runs refused.
	startStatus int
	startReason string
	// hold keeps the events stream open (no result) until the request ends.
	hold bool
}

func (h *fakeHost) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests)
}

func (h *fakeHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, r.Method+" "+r.URL.Path)
	h.mu.Unlock()
	fail := func(status int, reason string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": reason})
	}
	code := 0
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/runs":
		if h.startStatus != 0 {
			fail(h.startStatus, h.startReason)
			return
		}
		var p runs.Params
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			fail(400, "bad JSON")
			return
		}
		h.mu.Lock()
		h.params = append(h.params, p)
		h.mu.Unlock()
		st := runs.Status{ID: "run-1", State: runs.StateQueued, Mode: p.Mode(), Network: p.Network}
		if p.Network {
			st.State = runs.StateAwaitingApproval
		}
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(st)
	case r.Method == "POST" && r.URL.Path == "/v1/runs/run-1/approve":
		if h.approveStatus != 0 {
			fail(h.approveStatus, "forbidden")
			return
		}
		json.NewEncoder(w).Encode(runs.Status{ID: "run-1", State: runs.StateQueued, Network: true})
	case r.Method == "POST" && r.URL.Path == "/v1/runs/run-1/cancel":
		json.NewEncoder(w).Encode(runs.Status{ID: "run-1", State: runs.StateFinished, Result: runs.ResultCancelled})
	case r.Method == "GET" && r.URL.Path == "/v1/runs/run-1/events":
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(runs.Event{Seq: 1, Type: runs.EventState, State: runs.StateRunning})
		enc.Encode(runs.Event{Seq: 2, Type: runs.EventOutput, Stream: runs.StreamStdout, Phase: runs.PhaseMain, Data: []byte("42\n")})
		w.(http.Flusher).Flush()
		if h.hold {
			<-r.Context().Done()
			return
		}
		st := runs.Status{ID: "run-1", State: runs.StateFinished, Result: runs.ResultOK, Mode: runs.ModeArgv, ExitCode: &code, DurationMs: 321, Stdout: "42\n",
			Artifacts: []runs.Artifact{{Path: "a.txt", Size: 2, Data: []byte("hi")}}}
		enc.Encode(runs.Event{Seq: 3, Type: runs.EventResult, Status: &st})
	default:
		fail(404, "not found")
	}
}

func serveFakeHost(t *testing.T, h *fakeHost) *client.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return client.NewWithOptions(sock, client.Options{Timeout: 5 * time.Second, RunTimeout: 20 * time.Second})
}

func TestWithTheHostClient(t *testing.T) {
	h := &fakeHost{}
	cs := connect(t, serveFakeHost(t, h), Options{Project: "demo"}, nil)
	res := call(t, cs, map[string]any{"executable": "python3", "args": []string{"-c", "print(6*7)"}, "artifacts": []string{"a.txt"}})
	if res.IsError {
		t.Fatalf("run through pkg/client: %s", text(t, res))
	}
	if txt := text(t, res); !strings.Contains(txt, "exit code: 0") || !strings.Contains(txt, "42") {
		t.Errorf("text: %q", txt)
	}
	if len(res.Content) != 2 {
		t.Errorf("content: %d blocks, want text and the artifact", len(res.Content))
	}
	eq(t, "requests", strings.Join(h.seen(), ","), "POST /v1/runs,GET /v1/runs/run-1/events")
	p := h.params[0]
	eq(t, "project on the wire", p.Project, "demo")
	eq(t, "executable on the wire", p.Executable, "python3")
}

func TestWithTheHostClientApprovalForbidden(t *testing.T) {
	h := &fakeHost{approveStatus: http.StatusForbidden}
	var q asked
	cs := connect(t, serveFakeHost(t, h), Options{}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q))
	res := call(t, cs, map[string]any{"command": "curl example.org", "network": true})
	eq(t, "message", text(t, res), msgNeedAdmin)
	eq(t, "requests", strings.Join(h.seen(), ","), "POST /v1/runs,POST /v1/runs/run-1/approve,POST /v1/runs/run-1/cancel")
}

func TestWithTheHostClientRefusal(t *testing.T) {
	h := &fakeHost{startStatus: 400, startReason: "timeoutSeconds must be 1..3600 (default 120), got 4000"}
	cs := connect(t, serveFakeHost(t, h), Options{}, nil)
	res := call(t, cs, map[string]any{"command": "ls", "timeout_seconds": 4000})
	eq(t, "message", text(t, res), "the sandbox host refused the run: timeout_seconds must be 1..3600 (default 120), got 4000")
}

func TestWithTheHostClientCancel(t *testing.T) {
	h := &fakeHost{hold: true}
	cs := connect(t, serveFakeHost(t, h), Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"command": "sleep 600"}})
		close(done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(h.seen(), "GET /v1/runs/run-1/events") {
		if time.Now().After(deadline) {
			t.Fatalf("no events request: %v", h.seen())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	for !slices.Contains(h.seen(), "POST /v1/runs/run-1/cancel") {
		if time.Now().After(deadline) {
			t.Fatalf("the run was not cancelled on the host: %v", h.seen())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The schema states the host's own bounds.
func TestSchemaStatesTheHostBounds(t *testing.T) {
	var s struct {
		Properties map[string]struct {
			Default any `json:"default"`
			Maximum any `json:"maximum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(inputSchema), &s); err != nil {
		t.Fatal(err)
	}
	ts := s.Properties["timeout_seconds"]
	eq(t, "default", ts.Default, any(float64(runs.DefaultTimeoutSeconds)))
	eq(t, "maximum", ts.Maximum, any(float64(runs.MaxTimeoutSeconds)))
	eq(t, "network default", s.Properties["network"].Default, any(false))
}
