package coderun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// fakeClock is the registry's injected clock; it moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var (
	shell   = runs.Params{Command: "echo ready", TimeoutSeconds: 120}
	network = runs.Params{Command: "curl example.org", Network: true, TimeoutSeconds: 120}
)

func newTestRegistry(t *testing.T, l RegistryLimits) (*Registry, *fakeClock) {
	t.Helper()
	c := newFakeClock()
	if l.ApprovalTimeout == 0 {
		l.ApprovalTimeout = time.Hour // no real timer fires unless a test asks
	}
	return NewRegistry(l, c.Now), c
}

func mustCreate(t *testing.T, g *Registry, p runs.Params) *Run {
	t.Helper()
	r, err := g.Create(p, 1000)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return r
}

// waitApproval runs WaitApproval in the background; the result arrives on the channel.
func waitApproval(r *Run) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- r.WaitApproval(context.Background()) }()
	return ch
}

func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("WaitApproval did not return within 10s")
		return nil
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func stateResult(r *Run) string {
	s := r.Status()
	if s.Result == "" {
		return s.State
	}
	return s.State + "/" + s.Result + "/" + s.Error
}

func TestCreateStates(t *testing.T) {
	g, c := newTestRegistry(t, RegistryLimits{ApprovalTimeout: 5 * time.Minute})
	tests := []struct {
		name         string
		p            runs.Params
		wantState    string
		wantDeadline bool
	}{
		{"shell", shell, runs.StateQueued, false},
		{"argv", runs.Params{Executable: "true", TimeoutSeconds: 1}, runs.StateQueued, false},
		{"network", network, runs.StateAwaitingApproval, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mustCreate(t, g, tc.p)
			s := r.Status()
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(r.ID()) || s.ID != r.ID() {
				t.Errorf("id = %q (status %q), want 32 lowercase hex", r.ID(), s.ID)
			}
			if s.State != tc.wantState {
				t.Errorf("state = %q, want %q", s.State, tc.wantState)
			}
			if got := s.ApprovalDeadline != nil; got != tc.wantDeadline {
				t.Errorf("approval deadline set = %v, want %v", got, tc.wantDeadline)
			} else if got && !s.ApprovalDeadline.Equal(c.Now().Add(5*time.Minute)) {
				t.Errorf("approval deadline = %v, want created + 5m", s.ApprovalDeadline)
			}
			if s.Mode != tc.p.Mode() || s.OwnerUID != 1000 || s.Network != tc.p.Network || !s.CreatedAt.Equal(c.Now()) {
				t.Errorf("status = %+v", s)
			}
			if !reflect.DeepEqual(r.Params(), tc.p) || r.Owner() != 1000 {
				t.Errorf("Params() = %+v, Owner() = %d", r.Params(), r.Owner())
			}
		})
	}
}

func TestCreateRefusesParamsWithoutMode(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	if _, err := g.Create(runs.Params{}, 1); !errors.Is(err, runs.ErrInvalid) {
		t.Errorf("Create(no mode) = %v, want ErrInvalid", err)
	}
}

func TestCreateBusy(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{MaxActive: 2})
	a := mustCreate(t, g, shell)
	mustCreate(t, g, network)
	if _, err := g.Create(shell, 1); !errors.Is(err, runs.ErrBusy) {
		t.Fatalf("third Create = %v, want ErrBusy", err)
	}
	a.Finish(Finish{Result: runs.ResultOK})
	if _, err := g.Create(shell, 1); err != nil {
		t.Fatalf("Create after a run finished = %v, want nil", err)
	}
}

// One owner cannot take every slot: past its own bound it is refused with
// the setting named, while another owner is still admitted; past the bound
// of all, everyone is.
func TestCreateBusyPerOwner(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{MaxActive: 3, MaxActivePerOwner: 2, ActiveKeys: "runs.maxInFlight", ActivePerOwnerKeys: "runs.maxInFlightPerClient"})
	mine := mustCreateAs(t, g, shell, 1)
	mustCreateAs(t, g, network, 1)
	_, err := g.Create(shell, 1)
	if want := "too many unfinished runs of yours (at most 2, runs.maxInFlightPerClient); try again when one has finished"; !errors.Is(err, runs.ErrBusy) || err.Error() != want {
		t.Fatalf("third Create of one owner = %v, want ErrBusy %q", err, want)
	}
	mustCreateAs(t, g, shell, 2)
	_, err = g.Create(shell, 3)
	if want := "too many unfinished runs on this host (at most 3, runs.maxInFlight); try again when one has finished"; !errors.Is(err, runs.ErrBusy) || err.Error() != want {
		t.Fatalf("fourth Create = %v, want ErrBusy %q", err, want)
	}
	mine.Cancel()
	mustCreateAs(t, g, shell, 1)
}

func mustCreateAs(t *testing.T, g *Registry, p runs.Params, owner int) *Run {
	t.Helper()
	r, err := g.Create(p, owner)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParamsIsACopy(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	p := runs.Params{Executable: "echo", Args: []string{"a"}}
	r := mustCreate(t, g, p)
	p.Args[0] = "changed"
	got := r.Params()
	got.Args[0] = "changed too"
	if r.Params().Args[0] != "a" {
		t.Errorf("Params().Args[0] = %q, want %q", r.Params().Args[0], "a")
	}
}

func TestApprovalStateMachine(t *testing.T) {
	tests := []struct {
		name     string
		act      func(r *Run, c *fakeClock) error // the action under test
		wantAct  error                            // its error (errors.Is), nil for none
		wantWait error                            // what WaitApproval returned
		want     string                           // state/result/error afterwards
	}{
		{name: "approve", act: func(r *Run, _ *fakeClock) error { return r.Approve(0) },
			wantWait: nil, want: runs.StateQueued},
		{name: "deny", act: func(r *Run, _ *fakeClock) error { return r.Deny(0) },
			wantWait: runs.ErrDenied, want: "finished/denied/network was denied"},
		{name: "cancel while waiting", act: func(r *Run, _ *fakeClock) error { return r.Cancel() },
			wantWait: runs.ErrCancelled, want: "finished/cancelled/cancelled"},
		{name: "approve after the deadline (clock)", act: func(r *Run, c *fakeClock) error { c.Advance(time.Hour); return r.Approve(0) },
			wantAct: runs.ErrState, wantWait: runs.ErrDenied, want: "finished/denied/approval timed out"},
		{name: "host finishes it (shutdown)", act: func(r *Run, _ *fakeClock) error {
			r.Finish(Finish{Result: runs.ResultError, Error: "host stopped"})
			return nil
		},
			wantWait: runs.ErrState, want: "finished/error/host stopped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newTestRegistry(t, RegistryLimits{})
			r := mustCreate(t, g, network)
			wait := waitApproval(r)
			time.Sleep(5 * time.Millisecond) // let it block (the outcome is the same if it did not yet)
			if err := tc.act(r, c); !errors.Is(err, tc.wantAct) || (tc.wantAct == nil && err != nil) {
				t.Fatalf("action = %v, want %v", err, tc.wantAct)
			}
			err := recv(t, wait)
			if !errors.Is(err, tc.wantWait) || (tc.wantWait == nil && err != nil) {
				t.Errorf("WaitApproval = %v, want %v", err, tc.wantWait)
			}
			if got := stateResult(r); got != tc.want {
				t.Errorf("afterwards %q, want %q", got, tc.want)
			}
			if s := r.Status(); s.ApprovalDeadline != nil {
				t.Errorf("ApprovalDeadline still set after leaving awaiting_approval")
			}
		})
	}
}

func TestApproveRecordsApprover(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, network)
	if err := r.Approve(0); err != nil {
		t.Fatal(err)
	}
	if s := r.Status(); s.ApprovedBy == nil || *s.ApprovedBy != 0 {
		t.Errorf("ApprovedBy = %v, want 0", s.ApprovedBy)
	}
}

func TestApprovalRealTimeout(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{ApprovalTimeout: 30 * time.Millisecond})
	r := mustCreate(t, g, network)
	start := time.Now()
	err := recv(t, waitApproval(r))
	if !errors.Is(err, runs.ErrDenied) || !strings.Contains(err.Error(), "approval timed out") {
		t.Fatalf("WaitApproval = %v, want ErrDenied (approval timed out)", err)
	}
	if el := time.Since(start); el < 25*time.Millisecond {
		t.Errorf("timed out after %v, want about 30ms", el)
	}
	if got, want := stateResult(r), "finished/denied/approval timed out"; got != want {
		t.Errorf("after timeout %q, want %q", got, want)
	}
	if !closed(r.Done()) {
		t.Error("Done not closed after the approval timed out")
	}
	// Nothing revives it.
	if err := r.Approve(0); !errors.Is(err, runs.ErrState) {
		t.Errorf("Approve after timeout = %v, want ErrState", err)
	}
	if err := r.Start(); !errors.Is(err, runs.ErrState) {
		t.Errorf("Start after timeout = %v, want ErrState", err)
	}
}

func TestTimeoutDoesNotFireAfterApproval(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{ApprovalTimeout: 20 * time.Millisecond})
	r := mustCreate(t, g, network)
	if err := r.Approve(0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond)
	if got := stateResult(r); got != runs.StateQueued {
		t.Errorf("approved run became %q after the approval timeout", got)
	}
}

func TestRefusedTransitions(t *testing.T) {
	tests := []struct {
		name  string
		setup func(r *Run) // from awaiting_approval
		op    func(r *Run) error
		want  error
	}{
		{"approve after deny", func(r *Run) { r.Deny(0) }, func(r *Run) error { return r.Approve(0) }, runs.ErrState},
		{"deny after approve", func(r *Run) { r.Approve(0) }, func(r *Run) error { return r.Deny(0) }, runs.ErrState},
		{"approve twice", func(r *Run) { r.Approve(0) }, func(r *Run) error { return r.Approve(0) }, runs.ErrState},
		{"approve after cancel", func(r *Run) { r.Cancel() }, func(r *Run) error { return r.Approve(0) }, runs.ErrState},
		{"start while awaiting", func(*Run) {}, func(r *Run) error { return r.Start() }, runs.ErrState},
		{"start after cancel", func(r *Run) { r.Cancel() }, func(r *Run) error { return r.Start() }, runs.ErrCancelled},
		{"start twice", func(r *Run) { r.Approve(0); r.Start() }, func(r *Run) error { return r.Start() }, runs.ErrState},
		{"cancel after finish", func(r *Run) { r.Finish(Finish{Result: runs.ResultOK}) }, func(r *Run) error { return r.Cancel() }, runs.ErrState},
		{"deny a running run", func(r *Run) { r.Approve(0); r.Start() }, func(r *Run) error { return r.Deny(0) }, runs.ErrState},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newTestRegistry(t, RegistryLimits{})
			r := mustCreate(t, g, network)
			tc.setup(r)
			before := r.Status()
			if err := tc.op(r); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
			if after := r.Status(); !reflect.DeepEqual(after, before) {
				t.Errorf("refused operation changed the run: %+v -> %+v", before, after)
			}
		})
	}
}

func TestWaitApprovalWithoutNetwork(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, shell)
	if err := r.WaitApproval(context.Background()); err != nil {
		t.Errorf("WaitApproval(no network) = %v, want nil", err)
	}
	if err := r.Approve(0); !errors.Is(err, runs.ErrState) {
		t.Errorf("Approve(no network) = %v, want ErrState", err)
	}
}

func TestWaitApprovalContext(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, network)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.WaitApproval(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitApproval = %v, want context.DeadlineExceeded", err)
	}
	if got := stateResult(r); got != runs.StateAwaitingApproval {
		t.Errorf("a waiter leaving changed the run to %q", got)
	}
}

func TestHostRestartWhileWaiting(t *testing.T) {
	old, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, old, network)
	// The host restarts: the new process has a new, empty registry. The
	// run's id means nothing to it (approve/deny over the API get 404).
	restarted, _ := newTestRegistry(t, RegistryLimits{})
	if _, err := restarted.Get(r.ID()); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Get(old id) after restart = %v, want ErrNotFound", err)
	}
	if l := restarted.List(); len(l) != 0 {
		t.Errorf("List after restart = %v, want empty", l)
	}
}

func TestCancel(t *testing.T) {
	g, c := newTestRegistry(t, RegistryLimits{})

	t.Run("queued finishes at once", func(t *testing.T) {
		r := mustCreate(t, g, shell)
		if err := r.Cancel(); err != nil {
			t.Fatal(err)
		}
		if !closed(r.CancelRequested()) || !closed(r.Done()) {
			t.Error("CancelRequested and Done must both be closed")
		}
		if got, want := stateResult(r), "finished/cancelled/cancelled"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})

	t.Run("running signals the host", func(t *testing.T) {
		r := mustCreate(t, g, shell)
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		c.Advance(1500 * time.Millisecond)
		if err := r.Cancel(); err != nil {
			t.Fatal(err)
		}
		if err := r.Cancel(); err != nil {
			t.Errorf("second Cancel of a running run = %v, want nil", err)
		}
		if !closed(r.CancelRequested()) {
			t.Error("CancelRequested not closed")
		}
		if closed(r.Done()) || r.Status().State != runs.StateRunning {
			t.Error("a running run must stay running until the host calls Finish")
		}
		// The host removed the container:
		r.Finish(Finish{Result: runs.ResultCancelled})
		if !closed(r.Done()) {
			t.Error("Done not closed after Finish")
		}
		s := r.Status()
		if got, want := stateResult(r), "finished/cancelled/cancelled"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
		if s.DurationMs != 1500 {
			t.Errorf("DurationMs = %d, want 1500 (StartedAt to FinishedAt)", s.DurationMs)
		}
	})
}

func TestFinish(t *testing.T) {
	g, c := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, runs.Params{Command: "x", Artifacts: []string{"a", "b"}})
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	code := 3
	arts := []runs.Artifact{{Path: "a", Size: 1, Data: []byte("x")}, {Path: "b", Error: "missing"}}
	r.Finish(Finish{Result: runs.ResultFailed, ExitCode: &code, FailedSetup: 0, Duration: 750 * time.Millisecond, Artifacts: arts})
	code = 99
	arts[0].Data[0] = 'y'
	r.Finish(Finish{Result: runs.ResultOK}) // ignored: the first Finish wins
	s := r.Status()
	if s.State != runs.StateFinished || s.Result != runs.ResultFailed || s.ExitCode == nil || *s.ExitCode != 3 || s.DurationMs != 750 {
		t.Errorf("status = %+v, want finished/failed exit 3 in 750ms", s)
	}
	if s.FinishedAt == nil || !s.FinishedAt.Equal(c.Now()) {
		t.Errorf("FinishedAt = %v, want %v", s.FinishedAt, c.Now())
	}
	if len(s.Artifacts) != 2 || s.Artifacts[1].Error != "missing" {
		t.Errorf("artifacts = %+v", s.Artifacts)
	}

	t.Run("unknown result is an error", func(t *testing.T) {
		r := mustCreate(t, g, shell)
		r.Finish(Finish{Result: "great"})
		if got, want := stateResult(r), "finished/error/internal error"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}

func TestStatusIsADeepCopy(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, network)
	r.Approve(7)
	r.Start()
	code := 0
	r.Finish(Finish{Result: runs.ResultOK, ExitCode: &code, Artifacts: []runs.Artifact{{Path: "a", Size: 1, Data: []byte("x")}}})
	s := r.Status()
	*s.ExitCode = 5
	*s.ApprovedBy = 5
	*s.StartedAt = time.Time{}
	s.Artifacts[0].Data[0] = 'z'
	s.Artifacts[0].Path = "evil"
	again := r.Status()
	if *again.ExitCode != 0 || *again.ApprovedBy != 7 || again.StartedAt.IsZero() ||
		string(again.Artifacts[0].Data) != "x" || again.Artifacts[0].Path != "a" {
		t.Errorf("mutating a Status changed the run: %+v", again)
	}
}

func TestOutput(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{MaxOutputBytes: 10})
	r := mustCreate(t, g, shell)
	r.Output(runs.StreamStdout, runs.PhaseMain, []byte("queued ")) // ignored: not running
	r.Start()
	r.Output(runs.StreamStdout, runs.PhaseSetup, []byte("hello "))
	r.Output(runs.StreamStdout, runs.PhaseMain, []byte("world!"))
	r.Output(runs.StreamStderr, runs.PhaseMain, []byte("bad \xff"))
	r.Output("stdin", runs.PhaseMain, []byte("nope"))        // unknown stream: ignored
	r.Output(runs.StreamStderr, runs.PhaseMain, []byte(nil)) // empty: ignored
	s := r.Status()
	tests := []struct {
		name      string
		got, want any
	}{
		{"stdout", s.Stdout, "hello worl"},
		{"stdout truncated", s.StdoutTruncated, true},
		{"stderr (UTF-8 repaired)", s.Stderr, "bad \uFFFD"},
		{"stderr truncated", s.StderrTruncated, false},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %#v, want %#v", tc.name, tc.got, tc.want)
		}
	}
	r.Finish(Finish{Result: runs.ResultOK})
	r.Output(runs.StreamStderr, runs.PhaseMain, []byte("late")) // ignored: finished
	if got := r.Status().Stderr; got != "bad \uFFFD" {
		t.Errorf("output after Finish recorded: %q", got)
	}

	// The event stream carries every byte, raw, in order.
	var evs []string
	r.Subscribe(context.Background(), func(e runs.Event) error {
		evs = append(evs, describe(e))
		return nil
	})
	want := []string{"1 state queued", "2 state running", "3 output stdout setup \"hello \"", "4 output stdout main \"world!\"",
		"5 output stderr main \"bad \\xff\"", "6 state finished", "7 result ok"}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("events:\n got %q\nwant %q", evs, want)
	}
}

func describe(e runs.Event) string {
	s := fmt.Sprintf("%d %s", e.Seq, e.Type)
	switch e.Type {
	case runs.EventState:
		s += " " + e.State
	case runs.EventOutput:
		s += fmt.Sprintf(" %s %s %q", e.Stream, e.Phase, e.Data)
	case runs.EventResult:
		s += " " + e.Status.Result
	}
	if e.Dropped > 0 {
		s += fmt.Sprintf(" dropped=%d", e.Dropped)
	}
	return s
}

func TestSubscribeReplayThenLive(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, network)
	r.Approve(0)
	r.Start()
	r.Output(runs.StreamStdout, runs.PhaseMain, []byte("early"))

	got := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- r.Subscribe(context.Background(), func(e runs.Event) error {
			got <- describe(e)
			return nil
		})
	}()
	// Replayed history first.
	for _, want := range []string{"1 state awaiting_approval", "2 state queued", "3 state running", "4 output stdout main \"early\""} {
		if e := <-got; e != want {
			t.Fatalf("replayed %q, want %q", e, want)
		}
	}
	// Then live events, as they happen.
	r.Output(runs.StreamStderr, runs.PhaseMain, []byte("live"))
	if e := <-got; e != "5 output stderr main \"live\"" {
		t.Fatalf("live %q", e)
	}
	code := 0
	r.Finish(Finish{Result: runs.ResultOK, ExitCode: &code})
	for _, want := range []string{"6 state finished", "7 result ok"} {
		if e := <-got; e != want {
			t.Fatalf("live %q, want %q", e, want)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Subscribe = %v, want nil after the result", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Subscribe did not return after the result event")
	}

	// The result event carries the run's summary; written, the whole run.
	var last runs.Event
	r.Subscribe(context.Background(), func(e runs.Event) error { last = e; return nil })
	if last.Status == nil || last.Status.Stdout != "" || *last.Status.ExitCode != 0 || last.Status.State != runs.StateFinished {
		t.Errorf("result status = %+v", last.Status)
	}
	var line bytes.Buffer
	if err := r.WriteEventJSON(&line, last); err != nil {
		t.Fatal(err)
	}
	var written runs.Event
	if err := json.Unmarshal(line.Bytes(), &written); err != nil || written.Status.Stdout != "early" || written.Status.Stderr != "live" {
		t.Errorf("written result event %s (%v)", line.Bytes(), err)
	}
}

func TestSubscribeEnds(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, shell)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.Subscribe(ctx, func(runs.Event) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Subscribe(ctx ends) = %v, want DeadlineExceeded", err)
	}
	boom := errors.New("client went away")
	if err := r.Subscribe(context.Background(), func(runs.Event) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Subscribe(fn fails) = %v, want %v", err, boom)
	}
}

func TestHistoryDropsOldestOutputOnly(t *testing.T) {
	// Room for the 4 state and result events and one output event of 36
	// bytes of data, not two.
	g, _ := newTestRegistry(t, RegistryLimits{MaxHistoryBytes: 5*eventCost + 36 + 20})
	r := mustCreate(t, g, shell)
	r.Start() // 2 state events: 128 bytes
	for i := range 10 {
		r.Output(runs.StreamStdout, runs.PhaseMain, []byte(fmt.Sprintf("%036d", i)))
	}
	r.Finish(Finish{Result: runs.ResultOK}) // 2 more events: never dropped

	var evs []string
	var dropped int64
	if err := r.Subscribe(context.Background(), func(e runs.Event) error {
		dropped += e.Dropped
		evs = append(evs, fmt.Sprintf("%d %s%s", e.Seq, e.Type, e.State))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"1 statequeued", "2 staterunning", "12 output", "13 statefinished", "14 result"}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("late subscriber saw %q, want %q", evs, want)
	}
	if dropped != 9 {
		t.Errorf("Dropped total = %d, want 9", dropped)
	}
	if s := r.Status(); !strings.HasSuffix(s.Stdout, fmt.Sprintf("%036d", 9)) || len(s.Stdout) != 360 {
		t.Errorf("Status.Stdout must keep all output (bounded separately), got %d bytes", len(s.Stdout))
	}
}

func TestSlowSubscriberNeverBlocksTheRun(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{MaxHistoryBytes: 64 << 10})
	r := mustCreate(t, g, shell)
	r.Start()

	release := make(chan struct{})
	first := make(chan struct{})
	var mu sync.Mutex
	var seqs []int64
	var dropped int64
	done := make(chan error, 1)
	go func() {
		done <- r.Subscribe(context.Background(), func(e runs.Event) error {
			mu.Lock()
			seqs = append(seqs, e.Seq)
			dropped += e.Dropped
			n := len(seqs)
			mu.Unlock()
			if n == 1 {
				close(first)
				<-release // a subscriber that stops reading
			}
			return nil
		})
	}()
	<-first
	const n = 10000
	chunk := []byte(strings.Repeat("x", 100))
	// The run's writes all end while the subscriber is still stuck (it is
	// released only after them): nothing waits on it. (A 1 s bound on the
	// writes' wall time failed 5 runs in 200 under -race on a busy machine.)
	wrote := make(chan struct{})
	go func() {
		for range n {
			r.Output(runs.StreamStdout, runs.PhaseMain, chunk)
		}
		r.Finish(Finish{Result: runs.ResultOK})
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(30 * time.Second):
		t.Fatalf("the run's %d writes are blocked by a stuck subscriber", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := int64(n + 4) // queued, running, n outputs, finished, result
	if got := int64(len(seqs)) + dropped; got != total {
		t.Errorf("received %d + dropped %d = %d, want %d", len(seqs), dropped, got, total)
	}
	if dropped == 0 {
		t.Error("a stuck subscriber over a bounded history must see Dropped > 0")
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("events out of order: %d after %d", seqs[i], seqs[i-1])
		}
	}
	if seqs[len(seqs)-1] != total {
		t.Errorf("last event %d, want the result %d", seqs[len(seqs)-1], total)
	}
	// The history stayed bounded.
	r.mu.Lock()
	hb := r.histBytes
	r.mu.Unlock()
	if hb > 64<<10 {
		t.Errorf("history holds %d bytes, bound %d", hb, 64<<10)
	}
}

func TestRetention(t *testing.T) {
	g, c := newTestRegistry(t, RegistryLimits{Retain: 10 * time.Minute, MaxRetained: 2, MaxActive: 10})
	var finished []*Run
	for range 3 {
		r := mustCreate(t, g, shell)
		r.Finish(Finish{Result: runs.ResultOK})
		finished = append(finished, r)
		c.Advance(time.Minute)
	}
	active := mustCreate(t, g, network)

	ids := func() []string {
		var out []string
		for _, s := range g.List() {
			out = append(out, s.ID)
		}
		return out
	}
	// MaxRetained 2: the oldest finished goes; the unfinished one stays.
	if got, want := ids(), []string{active.ID(), finished[2].ID(), finished[1].ID()}; !reflect.DeepEqual(got, want) {
		t.Errorf("List ids = %v, want %v (newest first)", got, want)
	}
	if _, err := g.Get(finished[0].ID()); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Get(pruned) = %v, want ErrNotFound", err)
	}
	// Retain 10m: finished[1] finished at +1m, finished[2] at +2m; now +3m.
	c.Advance(8*time.Minute + time.Second) // +11m01s: finished[1] is 10m01s old
	if _, err := g.Get(finished[1].ID()); !errors.Is(err, runs.ErrNotFound) {
		t.Errorf("Get(older than Retain) = %v, want ErrNotFound", err)
	}
	if _, err := g.Get(finished[2].ID()); err != nil {
		t.Errorf("Get(9m01s old) = %v, want found", err)
	}
	c.Advance(24 * time.Hour)
	if got, want := ids(), []string{active.ID()}; !reflect.DeepEqual(got, want) {
		t.Errorf("after a day List ids = %v, want only the unfinished %v", got, want)
	}
}

func TestListHasNoData(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, runs.Params{Command: "x", Artifacts: []string{"a"}})
	r.Start()
	r.Output(runs.StreamStdout, runs.PhaseMain, []byte("secret output"))
	r.Output(runs.StreamStderr, runs.PhaseMain, []byte("secret error"))
	r.Finish(Finish{Result: runs.ResultOK, Artifacts: []runs.Artifact{{Path: "a", Size: 4, Data: []byte("data")}}})
	l := g.List()
	if len(l) != 1 {
		t.Fatalf("List = %d runs, want 1", len(l))
	}
	s := l[0]
	if s.Stdout != "" || s.Stderr != "" || s.Artifacts[0].Data != nil {
		t.Errorf("List carries data: %+v", s)
	}
	if s.Artifacts[0].Path != "a" || s.Artifacts[0].Size != 4 || s.Result != runs.ResultOK {
		t.Errorf("List lost the summary: %+v", s)
	}
	if full := r.Status(); full.Stdout != "secret output" || string(full.Artifacts[0].Data) != "data" {
		t.Errorf("Status lost data: %+v", full)
	}
}

func TestConcurrentUse(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{MaxActive: 100, MaxHistoryBytes: 4096})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := shell
			if i%2 == 0 {
				p = network
			}
			r, err := g.Create(p, i)
			if err != nil {
				t.Error(err)
				return
			}
			var sub sync.WaitGroup
			for range 3 {
				sub.Add(1)
				go func() {
					defer sub.Done()
					if err := r.Subscribe(context.Background(), func(runs.Event) error { return nil }); err != nil {
						t.Error(err)
					}
				}()
			}
			go r.Approve(0)
			r.WaitApproval(context.Background())
			r.Start()
			for range 100 {
				r.Output(runs.StreamStdout, runs.PhaseMain, []byte("abc"))
				_ = r.Status()
				_ = g.List()
			}
			go r.Cancel()
			r.Finish(Finish{Result: runs.ResultOK})
			sub.Wait()
		}()
	}
	wg.Wait()
}

func TestUnfinished(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	a := mustCreate(t, g, shell)
	b := mustCreate(t, g, network)
	c := mustCreate(t, g, shell)
	c.Start()
	b.Deny(0)
	var got []string
	for _, r := range g.Unfinished() {
		got = append(got, r.ID())
	}
	if want := []string{a.ID(), c.ID()}; !reflect.DeepEqual(got, want) {
		t.Errorf("Unfinished = %v, want %v (oldest first)", got, want)
	}
}

func TestRetentionBytes(t *testing.T) {
	const histOf = 4 * eventCost // queued, running, finished, result: no output
	tests := []struct {
		name   string
		bound  int64
		sizes  []int // artifact bytes of runs finished in this order
		wantIn []int // indexes still readable
	}{
		{"all fit", 3 * (1000 + histOf), []int{1000, 1000, 1000}, []int{0, 1, 2}},
		{"oldest goes", 3*(1000+histOf) - 1, []int{1000, 1000, 1000}, []int{1, 2}},
		{"two go", 1000 + histOf, []int{1000, 1000, 1000}, []int{2}},
		{"the newest stays even alone over the bound", 10, []int{1000, 5000}, []int{1}},
		{"small newer ones keep a place", 2000 + 2*histOf, []int{5000, 1000, 1000}, []int{1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, c := newTestRegistry(t, RegistryLimits{MaxRetainedBytes: tc.bound})
			var rs []*Run
			for _, n := range tc.sizes {
				r := mustCreate(t, g, runs.Params{Command: "x", Artifacts: []string{"a"}})
				r.Start()
				r.Finish(Finish{Result: runs.ResultOK, Artifacts: []runs.Artifact{{Path: "a", Size: int64(n), Data: make([]byte, n)}}})
				rs = append(rs, r)
				c.Advance(time.Second)
			}
			c.Advance(DefaultHold) // past the hold: the bytes bound applies
			g.List()               // prunes
			var in []int
			for i, r := range rs {
				if _, err := g.Get(r.ID()); err == nil {
					in = append(in, i)
				}
			}
			if !reflect.DeepEqual(in, tc.wantIn) {
				t.Errorf("readable runs %v, want %v", in, tc.wantIn)
			}
		})
	}
}

func TestFinishedRunHoldsOneCopy(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, runs.Params{Command: "x", Artifacts: []string{"a"}})
	r.Start()
	r.Output(runs.StreamStdout, runs.PhaseMain, []byte("out"))
	data := []byte("artifact")
	r.Finish(Finish{Result: runs.ResultOK, Artifacts: []runs.Artifact{{Path: "a", Size: 8, Data: data}}})
	var res *runs.Status
	r.Subscribe(context.Background(), func(e runs.Event) error { res = e.Status; return nil })
	if res == nil || res.Artifacts[0].Data != nil || res.Artifacts[0].Size != 8 {
		t.Errorf("the result event must carry the summary, sharing no byte: %+v", res)
	}
	if s := r.Status(); &s.Artifacts[0].Data[0] == &data[0] || s.Stdout != "out" {
		t.Errorf("Status() must copy the data: %+v", s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The run holds its output once (raw) and the artifacts as given.
	if &r.st.Artifacts[0].Data[0] != &data[0] || string(r.out[0]) != "out" || r.size != int64(len("out")+len("artifact")+5*eventCost+len("out")) {
		t.Errorf("finished run: out %q, size %d", r.out[0], r.size)
	}
}

// The supervisor's cut reaches the finished run: which streams, how many
// bytes dropped.
func TestFinishRecordsTheSupervisorsCut(t *testing.T) {
	g, _ := newTestRegistry(t, RegistryLimits{})
	r := mustCreate(t, g, shell)
	r.Start()
	r.Output(runs.StreamStdout, runs.PhaseMain, []byte("kept"))
	r.Finish(Finish{Result: runs.ResultOK, Cut: Cut{Stdout: true, StdoutDropped: 314572800}})
	s := r.Status()
	if !s.StdoutTruncated || s.StdoutDroppedBytes != 314572800 || s.StderrTruncated || s.StderrDroppedBytes != 0 {
		t.Errorf("status %+v, want stdout cut, 314572800 bytes dropped", s)
	}
	var res *runs.Status
	r.Subscribe(context.Background(), func(e runs.Event) error {
		if e.Type == runs.EventResult {
			res = e.Status
		}
		return nil
	})
	if res == nil || !res.StdoutTruncated || res.StdoutDroppedBytes != 314572800 {
		t.Errorf("result event %+v", res)
	}
}

func TestCutNote(t *testing.T) {
	for _, tc := range []struct {
		st   runs.Status
		want string
	}{
		{runs.Status{}, ""},
		{runs.Status{StdoutTruncated: true, StdoutDroppedBytes: 314572800}, "stdout cut at the host's output bound, 314572800 bytes dropped"},
		{runs.Status{StderrTruncated: true}, "stderr cut at the host's output bound"},
		{runs.Status{StdoutTruncated: true, StdoutDroppedBytes: 1, StderrTruncated: true, StderrDroppedBytes: 2},
			"stdout cut at the host's output bound, 1 bytes dropped; stderr cut at the host's output bound, 2 bytes dropped"},
	} {
		if got := tc.st.CutNote(); got != tc.want {
			t.Errorf("CutNote(%+v) = %q, want %q", tc.st, got, tc.want)
		}
	}
}
