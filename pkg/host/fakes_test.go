package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// fakeDocker is a hand-written Containers/Engine. runFn decides each run.
type fakeDocker struct {
	mu          sync.Mutex
	cfg         *config.Config
	created     []ContainerSpec
	stdins      [][]byte
	policies    []*policy.Policy // the policy file as it was at create time
	policyInfo  []os.FileInfo
	kills       []string
	removes     []string
	removeFails int // fail this many Remove calls first (-1: always)
	live        map[string]bool
	running     map[string]int // per channel tag
	maxRunning  map[string]int
	maxTotal    int
	total       int
	runFn       func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error)
	events      []string        // "create", "start", "ready failed", "stdin": the order a turn saw
	removeHook  func(id string) // called before each Remove, without the lock
	observe     func(string, time.Duration)
	pingErr     error
	image       bool
	loaded      []string
	stderr      string // the worker's stderr, written before stdin
}

func newFakeDocker(cfg *config.Config) *fakeDocker {
	return &fakeDocker{cfg: cfg, live: map[string]bool{}, running: map[string]int{}, maxRunning: map[string]int{}, image: true}
}

func okRun(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
	return RunResult{Stdout: []byte(`{"ok":true,"text":"hello"}` + "\n")}, nil
}

func (f *fakeDocker) Create(ctx context.Context, spec ContainerSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return "", err
	}
	id := "id-" + spec.Name
	f.events = append(f.events, "create")
	f.created = append(f.created, spec)
	f.live[id] = true
	pf := filepath.Join(f.cfg.PolicyDir, spec.Labels[layout.LabelTurn]+".json")
	st, _ := os.Stat(pf)
	f.policyInfo = append(f.policyInfo, st)
	if p, err := policy.Load(pf); err == nil {
		f.policies = append(f.policies, p)
	} else {
		f.policies = append(f.policies, nil)
	}
	return id, nil
}

func (f *fakeDocker) event(e string) {
	f.mu.Lock()
	f.events = append(f.events, e)
	f.mu.Unlock()
}

func (f *fakeDocker) eventList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// Run behaves like container.Driver.RunGated: the container starts, ready
// gates stdin, a refusal kills the container (never removes it).
func (f *fakeDocker) Run(ctx context.Context, id string, stdin []byte, max int64, ready func(context.Context) error, stderr io.Writer) (RunResult, error) {
	f.event("start")
	if f.stderr != "" {
		if _, err := io.WriteString(stderr, f.stderr); err != nil {
			f.mu.Lock()
			f.kills = append(f.kills, id)
			f.mu.Unlock()
			return RunResult{ExitCode: -1, StderrRefused: true}, nil
		}
	}
	if ready != nil {
		if err := ready(ctx); err != nil {
			f.mu.Lock()
			f.events = append(f.events, "ready failed")
			f.kills = append(f.kills, id)
			f.mu.Unlock()
			return RunResult{ExitCode: -1}, fmt.Errorf("fake run: not ready: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		f.event("kill")
		return RunResult{ExitCode: -1}, err
	}
	f.mu.Lock()
	f.events = append(f.events, "stdin")
	var spec ContainerSpec
	for _, s := range f.created {
		if "id-"+s.Name == id {
			spec = s
		}
	}
	f.stdins = append(f.stdins, append([]byte(nil), stdin...))
	tag := spec.Labels[layout.LabelChannel]
	f.running[tag]++
	f.total++
	if f.running[tag] > f.maxRunning[tag] {
		f.maxRunning[tag] = f.running[tag]
	}
	if f.total > f.maxTotal {
		f.maxTotal = f.total
	}
	run := f.runFn
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running[tag]--
		f.total--
		f.mu.Unlock()
	}()
	if run == nil {
		run = okRun
	}
	return run(ctx, spec, stdin)
}

func (f *fakeDocker) Kill(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kills = append(f.kills, id)
	return nil
}

func (f *fakeDocker) Remove(ctx context.Context, id string) error {
	if f.removeHook != nil {
		f.removeHook(id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removes = append(f.removes, id)
	if f.removeFails != 0 {
		if f.removeFails > 0 {
			f.removeFails--
		}
		return errors.New("fake: removal failed")
	}
	f.events = append(f.events, "removed")
	delete(f.live, id)
	delete(f.live, "id-"+id)
	return nil
}

func (f *fakeDocker) Ping(ctx context.Context) error { return f.pingErr }
func (f *fakeDocker) ImagePresent(ctx context.Context, ref string) (bool, error) {
	return f.image, nil
}
func (f *fakeDocker) LoadImage(ctx context.Context, p string) error {
	f.loaded = append(f.loaded, p)
	f.image = true
	return nil
}
func (f *fakeDocker) Observe(fn func(string, time.Duration)) { f.observe = fn }
func (f *fakeDocker) Close() error                           { return nil }

func (f *fakeDocker) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

type fakeUnits struct {
	mu      sync.Mutex
	started []string
	stopped []string
	active  map[string]bool
	stopErr error
	closed  bool
	// services lists StartBrokerService calls; serviceErr fails them.
	services   []string
	serviceErr error
	// startHook, when set, runs first in StartBroker (without the lock)
	// and decides the job's result: tests block or fail the unit job.
	startHook func(ctx context.Context, turn string) error
	// explain, when set, answers ExplainBroker (systemd's account of
	// the turn's units); nil = nothing failed.
	explain func(turn string) error
	// explained lists ExplainBroker calls, each with whether the units
	// were still active (not yet stopped) when asked.
	explained []bool
}

func (u *fakeUnits) ExplainBroker(_ context.Context, turn string) error {
	u.mu.Lock()
	u.explained = append(u.explained, u.active[turn])
	u.mu.Unlock()
	if u.explain == nil {
		return nil
	}
	return u.explain(turn)
}

func newFakeUnits() *fakeUnits { return &fakeUnits{active: map[string]bool{}} }

func (u *fakeUnits) StartBroker(ctx context.Context, turn string) error {
	if u.startHook != nil {
		if err := u.startHook(ctx, turn); err != nil {
			u.mu.Lock()
			u.started = append(u.started, turn)
			u.mu.Unlock()
			return err
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.started = append(u.started, turn)
	u.active[turn] = true
	return nil
}

func (u *fakeUnits) StartBrokerService(ctx context.Context, turn string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.services = append(u.services, turn)
	return u.serviceErr
}

func (u *fakeUnits) StopBroker(ctx context.Context, turn string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stopped = append(u.stopped, turn)
	if u.stopErr != nil {
		return u.stopErr
	}
	delete(u.active, turn)
	return nil
}

func (u *fakeUnits) Close() { u.closed = true }

func (u *fakeUnits) activeCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.active)
}

// testConfig is a valid config with every root in a temp dir.
func testConfig(t testing.TB, extra string) *config.Config {
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

type rig struct {
	h      *Host
	cfg    *config.Config
	docker *fakeDocker
	units  *fakeUnits

	chownMu sync.Mutex
	chowns  []chownCall

	journal *journalRecorder
}

// journalRecorder stands in for journald.
type journalRecorder struct {
	mu      sync.Mutex
	entries []journalEntry
}

type journalEntry struct {
	msg  string
	vars map[string]string
}

func (j *journalRecorder) send(msg string, _ journal.Priority, vars map[string]string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, journalEntry{msg, vars})
	return nil
}

func (j *journalRecorder) lines(identifier string) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, e := range j.entries {
		if e.vars["SYSLOG_IDENTIFIER"] == identifier {
			out = append(out, e.msg)
		}
	}
	return out
}

type chownCall struct {
	dir      string
	uid, gid int
}

// chown records instead of changing owners (tests need not be root).
func (r *rig) chown(dir string, uid, gid int) error {
	r.chownMu.Lock()
	defer r.chownMu.Unlock()
	r.chowns = append(r.chowns, chownCall{dir, uid, gid})
	return nil
}

func (r *rig) chownCalls() []chownCall {
	r.chownMu.Lock()
	defer r.chownMu.Unlock()
	return slices.Clone(r.chowns)
}

// testMachine derives a global concurrency of 512 (config.SlotsPerCPU x 64).
var testMachine = config.Machine{CPUs: 64, MemoryMB: 1 << 20}

func newRig(t testing.TB, extra string, mutate func(*Options)) *rig {
	t.Helper()
	cfg := testConfig(t, extra)
	st, _, err := LoadState(cfg.StateFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{cfg: cfg, docker: newFakeDocker(cfg), units: newFakeUnits(), journal: &journalRecorder{}}
	o := Options{Config: cfg, Logger: testLogger(t), State: st, Containers: r.docker, Units: r.units, RemoveRetryDelay: time.Millisecond,
		PeerGroups: func(int) []int { return nil }, ChownTree: r.chown, Lchown: r.chown,
		WorkerLogs: workerlog.New(workerlog.DefaultLimits(), r.journal.send, nil),
		// A big machine, so a derived cap never depends on the test box.
		Machine: &testMachine}
	if mutate != nil {
		mutate(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	return r
}

// assertClean: no container, unit, turn dir or policy file is left.
func (r *rig) assertClean(t *testing.T) {
	t.Helper()
	if n := r.docker.liveCount(); n != 0 {
		t.Errorf("%d containers left", n)
	}
	if n := r.units.activeCount(); n != 0 {
		t.Errorf("%d broker units left", n)
	}
	for _, d := range []string{r.cfg.RunRoot, r.cfg.PolicyDir} {
		entries, _ := os.ReadDir(d)
		if len(entries) != 0 {
			t.Errorf("%s not empty: %v", d, entries)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var _ = fmt.Sprint
var _ = protocol.MaxTextChars

// testLogger keeps host logs out of passing test output.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return slog.New(slog.DiscardHandler)
}
