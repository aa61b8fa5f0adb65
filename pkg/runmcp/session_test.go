package runmcp

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
)

// fakeSessions is a Runner that drives sessions too: one session, its
// files in a map, execs scripted by their command.
type fakeSessions struct {
	*fakeRunner
	mu      sync.Mutex
	files   map[string][]byte
	created []apiwire.SessionCreate
	closed  []string
	execs   []apiwire.SessionExec
	// log and approveErr: network execs (sessionnet_test.go).
	log        []string
	approveErr error
	// plain: the session was started without network.
	plain bool
	// project is the session's.
	project string
}

func (f *fakeSessions) Session(_ context.Context, id string) (apiwire.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, "show")
	return apiwire.Session{ID: id, State: apiwire.SessionRunning, Network: !f.plain, Project: f.project}, nil
}

func (f *fakeSessions) CreateSession(_ context.Context, p apiwire.SessionCreate) (apiwire.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, p)
	return apiwire.Session{ID: strings.Repeat("a", 32), State: apiwire.SessionRunning}, nil
}

func (f *fakeSessions) Exec(_ context.Context, id string, x apiwire.SessionExec, fn func(apiwire.SessionExecEvent) error) (apiwire.SessionExecResult, error) {
	f.mu.Lock()
	f.execs = append(f.execs, x)
	f.mu.Unlock()
	if x.Network {
		return f.networkExec(x, fn) // sessionnet_test.go
	}
	fn(apiwire.SessionExecEvent{Type: apiwire.ExecStdout, Data: []byte("out of " + x.Command + "\n")})
	fn(apiwire.SessionExecEvent{Type: apiwire.ExecStderr, Data: []byte("warn\n")})
	return apiwire.SessionExecResult{ExitCode: 2}, nil
}

func (f *fakeSessions) PutFile(_ context.Context, id, path string, _ uint32, data []byte) (apiwire.SessionFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = data
	return apiwire.SessionFile{Path: path, Size: int64(len(data))}, nil
}

func (f *fakeSessions) GetFile(_ context.Context, id, path string, _ bool) (apiwire.SessionFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.files[path]
	if !ok {
		return apiwire.SessionFile{}, &client.Error{Status: http.StatusNotFound, Reason: "no such file or directory in the session"}
	}
	return apiwire.SessionFile{Path: path, Size: int64(len(d)), Data: d}, nil
}

func (f *fakeSessions) CloseSession(_ context.Context, id string) (apiwire.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, id)
	return apiwire.Session{ID: id}, nil
}

// TestSessionTools: a Runner that drives sessions gets the five session
// tools beside sandbox_run; they start a session on the server's project,
// exec with output and status, write and read a file (binary as base64),
// refuse a network exec when the client cannot ask its human, and close.
func TestSessionTools(t *testing.T) {
	f := &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}}
	cs := connect(t, f, Options{Project: "demo"}, nil)
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	want := []string{ToolExec, ToolReadFile, ToolName, ToolSessionClose, ToolSessionStart, ToolWriteFile}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	id := strings.Repeat("a", 32)
	if res := call(ToolSessionStart, map[string]any{}); res.IsError || !strings.Contains(text(t, res), id) {
		t.Errorf("start: %+v", res)
	}
	if len(f.created) != 1 || f.created[0].Project != "demo" {
		t.Errorf("created %+v, want the server's project", f.created)
	}
	res := call(ToolExec, map[string]any{"session_id": id, "command": "make test"})
	if got := text(t, res); !res.IsError || !strings.Contains(got, "exit code 2") || !strings.Contains(got, "out of make test") || !strings.Contains(got, "warn") {
		t.Errorf("exec: %v %q", res.IsError, got)
	}
	if res := call(ToolExec, map[string]any{"session_id": id, "command": "curl x", "network": true}); !res.IsError || !strings.Contains(text(t, res), msgExecCannotAsk) {
		t.Errorf("network exec: %+v", res)
	}
	call(ToolWriteFile, map[string]any{"session_id": id, "path": "a.txt", "content": "hello"})
	call(ToolWriteFile, map[string]any{"session_id": id, "path": "b.bin", "content_base64": "AP8="})
	if got := text(t, call(ToolReadFile, map[string]any{"session_id": id, "path": "a.txt"})); got != "hello" {
		t.Errorf("read a.txt: %q", got)
	}
	if got := text(t, call(ToolReadFile, map[string]any{"session_id": id, "path": "b.bin"})); !strings.Contains(got, "AP8=") {
		t.Errorf("read b.bin: %q", got)
	}
	if res := call(ToolReadFile, map[string]any{"session_id": id, "path": "nope"}); !res.IsError || !strings.Contains(text(t, res), "no such file") {
		t.Errorf("read missing: %+v", res)
	}
	if res := call(ToolWriteFile, map[string]any{"session_id": id, "path": "c", "content": "x", "content_base64": "eA=="}); !res.IsError {
		t.Errorf("both contents accepted")
	}
	call(ToolSessionClose, map[string]any{"session_id": id})
	if len(f.closed) != 1 || f.closed[0] != id {
		t.Errorf("closed %v", f.closed)
	}
}
