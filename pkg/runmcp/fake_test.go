package runmcp

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// fakeRunner is a hand-written Runner: it records every call, replays
// Events through RunEvents and returns Final; Block makes RunEvents wait
// for its context (a run that does not end by itself).
type fakeRunner struct {
	mu     sync.Mutex
	calls  []string
	params []runs.Params

	StartErr   error
	ApproveErr error
	// EventErrs are returned by the first RunEvents calls, in order.
	EventErrs []error
	Events    []runs.Event
	// EventGap is the pause before each event.
	EventGap time.Duration
	Final    runs.Status
	Block    bool
	// Creds is what Credentials lists (nil: fakeCreds), CredsErr its
	// failure; credsFor the projects it was asked for.
	Creds    []runs.Credential
	CredsErr error
	credsFor []string

	started   chan struct{} // closed at the first StartRun
	following chan struct{} // closed at the first RunEvents
	cancelled chan error    // CancelRun's context error at the time of the call
}

func newFake() *fakeRunner {
	code := 0
	return &fakeRunner{
		Final:     runs.Status{ID: "r1", State: runs.StateFinished, Result: runs.ResultOK, Mode: runs.ModeShell, ExitCode: &code, DurationMs: 1234},
		started:   make(chan struct{}),
		following: make(chan struct{}),
		cancelled: make(chan error, 8),
	}
}

func (f *fakeRunner) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

// Calls returns the calls seen so far, by name.
func (f *fakeRunner) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeRunner) Params() []runs.Params {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.params)
}

func (f *fakeRunner) StartRun(ctx context.Context, p runs.Params) (runs.Status, error) {
	f.record("start")
	f.mu.Lock()
	f.params = append(f.params, p)
	first := len(f.params) == 1
	f.mu.Unlock()
	if first {
		close(f.started)
	}
	if f.StartErr != nil {
		return runs.Status{}, f.StartErr
	}
	st := runs.Status{ID: f.Final.ID, State: runs.StateQueued, Mode: f.Final.Mode, Network: p.Network}
	if p.Network {
		st.State = runs.StateAwaitingApproval
	}
	return st, nil
}

func (f *fakeRunner) RunEvents(ctx context.Context, id string, fn func(runs.Event) error) (runs.Status, error) {
	f.record("events")
	f.mu.Lock()
	var err error
	if len(f.EventErrs) > 0 {
		err, f.EventErrs = f.EventErrs[0], f.EventErrs[1:]
	}
	select {
	case <-f.following:
	default:
		close(f.following)
	}
	f.mu.Unlock()
	for _, ev := range f.Events {
		if f.EventGap > 0 {
			select {
			case <-ctx.Done():
				return runs.Status{}, ctx.Err()
			case <-time.After(f.EventGap):
			}
		}
		if err := fn(ev); err != nil {
			return runs.Status{}, err
		}
	}
	if err != nil {
		return runs.Status{}, err
	}
	if f.Block {
		<-ctx.Done()
		return runs.Status{}, ctx.Err()
	}
	final := f.Final
	fn(runs.Event{Seq: int64(len(f.Events) + 1), Type: runs.EventResult, Status: &final})
	return final, nil
}

func (f *fakeRunner) CancelRun(ctx context.Context, id string) (runs.Status, error) {
	f.record("cancel")
	f.cancelled <- ctx.Err()
	return runs.Status{ID: id, State: runs.StateFinished, Result: runs.ResultCancelled}, nil
}

func (f *fakeRunner) ApproveRun(ctx context.Context, id string) (runs.Status, error) {
	f.record("approve")
	if f.ApproveErr != nil {
		return runs.Status{}, f.ApproveErr
	}
	return runs.Status{ID: id, State: runs.StateQueued, Network: true}, nil
}

// connect serves NewServer(r, o) to an SDK client over in-memory
// transports; the sessions close with the test.
func connect(t *testing.T, r Runner, o Options, co *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	srv := NewServer(r, o)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "runmcp-test", Version: "0"}, co)
	cs, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// call calls sandbox_run with args within a test deadline.
func call(t *testing.T, cs *mcp.ClientSession, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	return res
}

// text is the first content block's text.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) == 0 {
		t.Fatalf("result has no content")
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content[0] is %T, want text", res.Content[0])
	}
	return tc.Text
}

// structured decodes the structured content as a runs.Status.
func structured(t *testing.T, res *mcp.CallToolResult) runs.Status {
	t.Helper()
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("structured content: %v", err)
	}
	var st runs.Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("structured content %s: %v", data, err)
	}
	return st
}

// asked records the questions a client's human was asked.
type asked struct {
	mu   sync.Mutex
	msgs []string
}

func (a *asked) add(m string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.msgs = append(a.msgs, m)
}

func (a *asked) Messages() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.msgs)
}

// elicitWith is a client whose human answers every question with res (or
// err; neither: never answers), recording the messages in a.
func elicitWith(res *mcp.ElicitResult, err error, a *asked) *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		a.add(req.Params.Message)
		if res == nil && err == nil {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return res, err
	}}
}

func intp(i int) *int { return &i }

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func eqCalls(t *testing.T, f *fakeRunner, want ...string) {
	t.Helper()
	if got := f.Calls(); !slices.Equal(got, want) {
		t.Errorf("runner calls: got %v, want %v", got, want)
	}
}

// fakeCreds are the credentials a fake host lists by default.
var fakeCreds = []runs.Credential{
	{Name: "git", Variable: "GIT_TOKEN", Host: "git.example.com", Port: 443},
	{Name: "gh", Variable: "GH_TOKEN", Host: "api.github.test", Port: 443},
	{Name: "npm\nX", Variable: "NPM_X_TOKEN", Host: "registry.example.com", Port: 8443},
}

func (f *fakeRunner) Credentials(_ context.Context, project string) ([]runs.Credential, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.credsFor = append(f.credsFor, project)
	if f.CredsErr != nil {
		return nil, f.CredsErr
	}
	if f.Creds == nil {
		return slices.Clone(fakeCreds), nil
	}
	return slices.Clone(f.Creds), nil
}
