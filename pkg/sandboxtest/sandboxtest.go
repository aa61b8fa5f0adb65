// Package sandboxtest holds hand-written fakes of the lifecycle's drivers
// (containers, broker units, journald) and a test configuration, shared by
// the host's tests and each kind's: a kind is tested beside its package on
// the same fakes the host's tests use.
// Guarantee: test tooling only, never in an installed binary; nothing here
// touches Docker, systemd or journald.
package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Docker is a hand-written driver of containers (sandbox.Containers and
// the host's Engine). RunFn decides each run.
type Docker struct {
	Mu          sync.Mutex
	Cfg         *config.Config
	Created     []sandbox.ContainerSpec
	Stdins      [][]byte
	Policies    []*policy.Policy // the policy file as it was at create time
	PolicyInfo  []os.FileInfo
	Kills       []string
	Removes     []string
	RemoveFails int // fail this many Remove calls first (-1: always)
	Live        map[string]bool
	Running     map[string]int // per channel tag
	MaxRunning  map[string]int
	MaxTotal    int
	Total       int
	RunFn       func(ctx context.Context, spec sandbox.ContainerSpec, stdin []byte) (sandbox.RunResult, error)
	Events      []string        // "create", "start", "ready failed", "stdin": the order a turn saw
	RemoveHook  func(id string) // called before each Remove, without the lock
	Observer    func(string, time.Duration)
	PingErr     error
	Image       bool
	Loaded      []string
	Stderr      string // the worker's stderr, written before stdin
	// TailStderr is what a framed run's worker writes to stderr after its
	// frame returned: it arrives only once someone waits for the run's
	// Tail (event "tail waited", then "tail" once written), never without
	// (a Kill ends the stream unwritten). TailErr is what Tail says.
	TailStderr string
	TailErr    error
	tails      map[string]func() // id: ends a pending tail unwritten
	// Exited are the containers whose run waited for the worker's exit (a
	// run that returned at its final frame is not among them).
	Exited map[string]bool
}

func NewDocker(cfg *config.Config) *Docker {
	return &Docker{Cfg: cfg, Live: map[string]bool{}, Running: map[string]int{}, MaxRunning: map[string]int{}, Image: true, Exited: map[string]bool{}}
}

func OKRun(ctx context.Context, spec sandbox.ContainerSpec, stdin []byte) (sandbox.RunResult, error) {
	return sandbox.RunResult{Stdout: []byte(`{"ok":true,"text":"hello"}` + "\n")}, nil
}

func (f *Docker) Create(ctx context.Context, spec sandbox.ContainerSpec) (string, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if err := ctx.Err(); err != nil {
		return "", err
	}
	id := "id-" + spec.Name
	f.Events = append(f.Events, "create")
	f.Created = append(f.Created, spec)
	f.Live[id] = true
	pf := filepath.Join(f.Cfg.PolicyDir, spec.Labels[layout.LabelTurn]+".json")
	st, _ := os.Stat(pf)
	f.PolicyInfo = append(f.PolicyInfo, st)
	if p, err := policy.Load(pf); err == nil {
		f.Policies = append(f.Policies, p)
	} else {
		f.Policies = append(f.Policies, nil)
	}
	return id, nil
}

func (f *Docker) Event(e string) {
	f.Mu.Lock()
	f.Events = append(f.Events, e)
	f.Mu.Unlock()
}

func (f *Docker) EventList() []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return append([]string(nil), f.Events...)
}

// Run behaves like container.Driver.RunGated: the container starts, ready
// gates stdin, a refusal kills the container (never removes it); it returns
// once the worker exited.
func (f *Docker) Run(ctx context.Context, id string, stdin []byte, max int64, ready func(context.Context) error, stderr io.Writer) (sandbox.RunResult, error) {
	res, err := f.run(ctx, id, stdin, max, ready, stderr)
	f.exited(id)
	return res, err
}

// RunFramed behaves like container.Driver.RunFramed: when the run's stdout
// is exactly one line that accept takes, it returns Framed without the
// worker's exit (the container stays live until Remove); else as Run.
func (f *Docker) RunFramed(ctx context.Context, id string, stdin []byte, max int64, ready func(context.Context) error, stderr io.Writer, accept func([]byte) bool) (sandbox.RunResult, error) {
	res, err := f.run(ctx, id, stdin, max, ready, stderr)
	if err == nil && !res.Truncated && !res.StderrRefused && accept != nil && len(res.Stdout) > 0 &&
		bytes.IndexByte(res.Stdout, '\n') == len(res.Stdout)-1 && accept(res.Stdout) {
		f.Event("framed")
		return sandbox.RunResult{Stdout: res.Stdout, ExitCode: -1, Framed: true, Tail: f.tail(id, stderr)}, nil
	}
	f.exited(id)
	return res, err
}

// tail is a framed run's Tail: the stream after the frame, TailStderr
// written to stderr once Tail is waited for, or nothing once id is killed.
func (f *Docker) tail(id string, stderr io.Writer) func() error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	extra, terr := f.TailStderr, f.TailErr
	var once sync.Once
	var written bool
	end := func(write bool) {
		once.Do(func() {
			if write && extra != "" && stderr != nil {
				_, _ = io.WriteString(stderr, extra)
			}
			written = write
		})
	}
	if f.tails == nil {
		f.tails = map[string]func(){}
	}
	f.tails[id] = func() { end(false) }
	return func() error {
		f.Event("tail waited")
		end(true)
		if written {
			f.Event("tail")
		}
		return terr
	}
}

func (f *Docker) exited(id string) {
	f.Mu.Lock()
	f.Exited[id] = true
	f.Mu.Unlock()
}

// HasExited reports whether a run of container id waited for its exit.
func (f *Docker) HasExited(id string) bool {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.Exited[id]
}

func (f *Docker) run(ctx context.Context, id string, stdin []byte, max int64, ready func(context.Context) error, stderr io.Writer) (sandbox.RunResult, error) {
	f.Event("start")
	if f.Stderr != "" {
		if _, err := io.WriteString(stderr, f.Stderr); err != nil {
			f.Mu.Lock()
			f.Kills = append(f.Kills, id)
			f.Mu.Unlock()
			return sandbox.RunResult{ExitCode: -1, StderrRefused: true}, nil
		}
	}
	if ready != nil {
		if err := ready(ctx); err != nil {
			f.Mu.Lock()
			f.Events = append(f.Events, "ready failed")
			f.Kills = append(f.Kills, id)
			f.Mu.Unlock()
			return sandbox.RunResult{ExitCode: -1}, fmt.Errorf("fake run: not ready: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		f.Event("kill")
		return sandbox.RunResult{ExitCode: -1}, err
	}
	f.Mu.Lock()
	f.Events = append(f.Events, "stdin")
	var spec sandbox.ContainerSpec
	for _, s := range f.Created {
		if "id-"+s.Name == id {
			spec = s
		}
	}
	f.Stdins = append(f.Stdins, append([]byte(nil), stdin...))
	tag := spec.Labels[layout.LabelChannel]
	f.Running[tag]++
	f.Total++
	if f.Running[tag] > f.MaxRunning[tag] {
		f.MaxRunning[tag] = f.Running[tag]
	}
	if f.Total > f.MaxTotal {
		f.MaxTotal = f.Total
	}
	run := f.RunFn
	f.Mu.Unlock()
	defer func() {
		f.Mu.Lock()
		f.Running[tag]--
		f.Total--
		f.Mu.Unlock()
	}()
	if run == nil {
		run = OKRun
	}
	return run(ctx, spec, stdin)
}

func (f *Docker) Kill(ctx context.Context, id string) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Kills = append(f.Kills, id)
	if end := f.tails[id]; end != nil {
		end()
	}
	return nil
}

func (f *Docker) Remove(ctx context.Context, id string) error {
	if f.RemoveHook != nil {
		f.RemoveHook(id)
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Removes = append(f.Removes, id)
	if f.RemoveFails != 0 {
		if f.RemoveFails > 0 {
			f.RemoveFails--
		}
		return errors.New("fake: removal failed")
	}
	f.Events = append(f.Events, "removed")
	delete(f.Live, id)
	delete(f.Live, "id-"+id)
	return nil
}

func (f *Docker) Ping(ctx context.Context) error { return f.PingErr }
func (f *Docker) ImagePresent(ctx context.Context, ref string) (bool, error) {
	return f.Image, nil
}
func (f *Docker) LoadImage(ctx context.Context, p string) error {
	f.Loaded = append(f.Loaded, p)
	f.Image = true
	return nil
}
func (f *Docker) Observe(fn func(string, time.Duration)) { f.Observer = fn }
func (f *Docker) Close() error                           { return nil }

func (f *Docker) LiveCount() int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return len(f.Live)
}

// Units is a hand-written driver of broker units (sandbox.Units and the
// host's UnitManager).
type Units struct {
	Mu      sync.Mutex
	Started []string
	Stopped []string
	Active  map[string]bool
	StopErr error
	Closed  bool
	// services lists StartBrokerService calls; serviceErr fails them.
	Services   []string
	ServiceErr error
	// startHook, when set, runs first in StartBroker (without the lock)
	// and decides the job's result: tests block or fail the unit job.
	StartHook func(ctx context.Context, turn string) error
	// explain, when set, answers ExplainBroker (systemd's account of
	// the turn's units); nil = nothing failed.
	Explain func(turn string) error
	// explained lists ExplainBroker calls, each with whether the units
	// were still active (not yet stopped) when asked.
	Explained []bool
}

func (u *Units) ExplainBroker(_ context.Context, turn string) error {
	u.Mu.Lock()
	u.Explained = append(u.Explained, u.Active[turn])
	u.Mu.Unlock()
	if u.Explain == nil {
		return nil
	}
	return u.Explain(turn)
}

func NewUnits() *Units { return &Units{Active: map[string]bool{}} }

func (u *Units) StartBroker(ctx context.Context, turn string) error {
	if u.StartHook != nil {
		if err := u.StartHook(ctx, turn); err != nil {
			u.Mu.Lock()
			u.Started = append(u.Started, turn)
			u.Mu.Unlock()
			return err
		}
	}
	u.Mu.Lock()
	defer u.Mu.Unlock()
	u.Started = append(u.Started, turn)
	u.Active[turn] = true
	return nil
}

func (u *Units) StartBrokerService(ctx context.Context, turn string) error {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	u.Services = append(u.Services, turn)
	return u.ServiceErr
}

func (u *Units) StopBroker(ctx context.Context, turn string) error {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	u.Stopped = append(u.Stopped, turn)
	if u.StopErr != nil {
		return u.StopErr
	}
	delete(u.Active, turn)
	return nil
}

func (u *Units) Close() { u.Closed = true }

func (u *Units) ActiveCount() int {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	return len(u.Active)
}

// Config is a valid config with every root in a temp dir.
func Config(t testing.TB, extra string) *config.Config {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sbh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	y := `model:
  url: https://api.example.com/v1/chat/completions
  name: m1
credentials:
  default: model
  rules:
    - principal: p-special
      credential: special-key
tools:
  - name: lookup
    description: Look something up
    kind: http
    url: https://tools.example.com/lookup
    credential: tool-key
    parameters: '{"type":"object","properties":{"q":{"type":"string"}}}'
mcp:
  - name: search
    url: https://mcp.example.com/mcp
    credential: mcp-key
    tools:
      - name: find
        description: Find
        parameters: '{"type":"object"}'
` + extra
	p := filepath.Join(dir, "sandbox.yaml")
	os.WriteFile(p, []byte(y), 0o600)
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	c.RunRoot = filepath.Join(dir, "run")
	c.WorkspaceRoot = filepath.Join(dir, "ws")
	c.PolicyDir = filepath.Join(dir, "pol")
	c.StateFile = filepath.Join(dir, "state", "channels.json")
	c.LockFile = filepath.Join(dir, "host.lock")
	if err := c.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	return c
}

// Journal stands in for journald.
type Journal struct {
	Mu      sync.Mutex
	Entries []JournalEntry
}

type JournalEntry struct {
	Msg  string
	Vars map[string]string
}

func (j *Journal) Send(msg string, _ journal.Priority, vars map[string]string) error {
	j.Mu.Lock()
	defer j.Mu.Unlock()
	j.Entries = append(j.Entries, JournalEntry{msg, vars})
	return nil
}

func (j *Journal) Lines(identifier string) []string {
	j.Mu.Lock()
	defer j.Mu.Unlock()
	var out []string
	for _, e := range j.Entries {
		if e.Vars["SYSLOG_IDENTIFIER"] == identifier {
			out = append(out, e.Msg)
		}
	}
	return out
}

// Must fails the test at once on an error.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Logger keeps logs out of passing test output.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}

// IsLive reports whether container id exists (created, not removed).
func (f *Docker) IsLive(id string) bool {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.Live[id]
}
