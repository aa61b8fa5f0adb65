package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// The pass begins at t0; objects are placed relative to it.
var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const grace = 60 * time.Second

type fakeContainers struct {
	list      []container.Info
	listErr   error
	removeErr map[string][]error // per id, one error per attempt
	calls     map[string]int
	removed   []string
}

func (f *fakeContainers) List(_ context.Context, installation string) ([]container.Info, error) {
	if installation != "test" {
		return nil, fmt.Errorf("listed installation %q", installation)
	}
	return f.list, f.listErr
}

func (f *fakeContainers) Remove(_ context.Context, id string) error {
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	n := f.calls[id]
	f.calls[id]++
	if errs := f.removeErr[id]; n < len(errs) && errs[n] != nil {
		return errs[n]
	}
	f.removed = append(f.removed, id)
	return nil
}

type fakeUnits struct {
	turns   []string
	listErr error
	stopErr map[string]error
	onStop  func(turn string)
	stopped []string
}

func (f *fakeUnits) ListBrokers(context.Context) ([]string, error) { return f.turns, f.listErr }
func (f *fakeUnits) StopBroker(_ context.Context, turn string) error {
	if f.onStop != nil {
		f.onStop(turn)
	}
	if err := f.stopErr[turn]; err != nil {
		return err
	}
	f.stopped = append(f.stopped, turn)
	return nil
}

type world struct {
	t          *testing.T
	runRoot    string
	policyDir  string
	containers *fakeContainers
	units      *fakeUnits
	active     map[string]bool
	known      bool
	activeErr  error
}

func newWorld(t *testing.T) *world {
	root := t.TempDir()
	w := &world{t: t, runRoot: filepath.Join(root, "turns"), policyDir: filepath.Join(root, "policies"),
		containers: &fakeContainers{}, units: &fakeUnits{}}
	for _, d := range []string{w.runRoot, w.policyDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// addTurn places every object of a turn: a container created at created, its
// broker units, its directory and policy file with mtime created, and the
// deadline in both the label and the policy.
func (w *world) addTurn(turn string, created, deadline time.Time) {
	w.t.Helper()
	name, _ := ids.ContainerName("c", turn)
	w.containers.list = append(w.containers.list, container.Info{
		ID: "id-" + turn, Name: name, Created: created.Truncate(time.Second), State: "running",
		Labels: map[string]string{
			layout.LabelInstallation: "test", layout.LabelTurn: turn,
			layout.LabelDeadline: strconv.FormatInt(deadline.Unix(), 10),
		},
	})
	w.units.turns = append(w.units.turns, turn)
	w.addDir(turn, created)
	w.addPolicy(turn, created, fmt.Sprintf(`{"turn":%q,"deadlineUnixMs":%d}`, turn, deadline.UnixMilli()))
}

func (w *world) addDir(turn string, mtime time.Time) {
	w.t.Helper()
	dir := filepath.Join(w.runRoot, turn)
	if err := os.Mkdir(dir, 0o700); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broker.sock"), nil, 0o600); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chtimes(dir, mtime, mtime); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) addPolicy(turn string, mtime time.Time, content string) {
	w.t.Helper()
	path := filepath.Join(w.policyDir, turn+".json")
	if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) reaper() *Reaper {
	return &Reaper{
		Installation: "test", RunRoot: w.runRoot, PolicyDir: w.policyDir, Grace: grace,
		Containers: w.containers, Units: w.units,
		Active: func(context.Context) (map[string]bool, bool, error) {
			return w.active, w.known, w.activeErr
		},
		Backoff: time.Millisecond,
		Now:     func() time.Time { return t0 },
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func (w *world) exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// left reports which of the turn's objects survived the pass.
func (w *world) left(turn string) (container, unit, dir, policy bool) {
	container = !slices.Contains(w.containers.removed, "id-"+turn)
	unit = !slices.Contains(w.units.stopped, turn)
	dir = w.exists(filepath.Join(w.runRoot, turn))
	policy = w.exists(filepath.Join(w.policyDir, turn+".json"))
	return
}

func turnID(n int) string { return fmt.Sprintf("%032x", n+1) }

func TestReapDecisions(t *testing.T) {
	live, expired, unknownOld, fresh := turnID(1), turnID(2), turnID(3), turnID(4)
	tests := []struct {
		name      string
		known     bool
		active    []string
		setup     func(w *world)
		turn      string
		wantLeft  bool // all four objects stay (true) or all go (false)
		wantCount Summary
	}{
		{"within deadline, host lists it", true, []string{live},
			func(w *world) { w.addTurn(live, t0.Add(-30*time.Second), t0.Add(90*time.Second)) }, live, true, Summary{HostKnown: true}},
		{"within deadline, no host knowledge", false, nil,
			func(w *world) { w.addTurn(live, t0.Add(-30*time.Second), t0.Add(90*time.Second)) }, live, true, Summary{}},
		{"past deadline but within grace", false, nil,
			func(w *world) { w.addTurn(live, t0.Add(-150*time.Second), t0.Add(-30*time.Second)) }, live, true, Summary{}},
		{"expired, no host knowledge", false, nil,
			func(w *world) { w.addTurn(expired, t0.Add(-300*time.Second), t0.Add(-61*time.Second)) }, expired, false,
			Summary{Containers: 1, Units: 1, Dirs: 1, Policies: 1}},
		{"expired even though the host lists it", true, []string{expired},
			func(w *world) { w.addTurn(expired, t0.Add(-300*time.Second), t0.Add(-61*time.Second)) }, expired, false,
			Summary{Containers: 1, Units: 1, Dirs: 1, Policies: 1, HostKnown: true}},
		{"unknown to the running host and old", true, nil,
			func(w *world) { w.addTurn(unknownOld, t0.Add(-10*time.Second), t0.Add(100*time.Second)) }, unknownOld, false,
			Summary{Containers: 1, Units: 1, Dirs: 1, Policies: 1, HostKnown: true}},
		{"unknown but host state unknown", false, nil,
			func(w *world) { w.addTurn(unknownOld, t0.Add(-10*time.Second), t0.Add(100*time.Second)) }, unknownOld, true, Summary{}},
		{"created during the pass (same second)", true, nil,
			func(w *world) { w.addTurn(fresh, t0.Add(400*time.Millisecond), t0.Add(100*time.Second)) }, fresh, true, Summary{HostKnown: true}},
		{"created during the pass (later)", true, nil,
			func(w *world) { w.addTurn(fresh, t0.Add(2*time.Second), t0.Add(100*time.Second)) }, fresh, true, Summary{HostKnown: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.known = tt.known
			w.active = map[string]bool{}
			for _, a := range tt.active {
				w.active[a] = true
			}
			tt.setup(w)
			sum, err := w.reaper().Reap(context.Background())
			if err != nil {
				t.Fatalf("Reap: %v", err)
			}
			if sum != tt.wantCount {
				t.Errorf("summary = %+v, want %+v", sum, tt.wantCount)
			}
			c, u, d, p := w.left(tt.turn)
			if c != tt.wantLeft || u != tt.wantLeft || d != tt.wantLeft || p != tt.wantLeft {
				t.Errorf("left container=%v unit=%v dir=%v policy=%v, want all %v", c, u, d, p, tt.wantLeft)
			}
		})
	}
}

// Several turns in one pass: each is decided on its own.
func TestReapMixed(t *testing.T) {
	w := newWorld(t)
	live, expired, unknown := turnID(10), turnID(11), turnID(12)
	w.addTurn(live, t0.Add(-30*time.Second), t0.Add(90*time.Second))
	w.addTurn(expired, t0.Add(-300*time.Second), t0.Add(-100*time.Second))
	w.addTurn(unknown, t0.Add(-5*time.Second), t0.Add(115*time.Second))
	w.known, w.active = true, map[string]bool{live: true}
	sum, err := w.reaper().Reap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Summary{Containers: 2, Units: 2, Dirs: 2, Policies: 2, HostKnown: true}); sum != want {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
	if c, u, d, p := w.left(live); !c || !u || !d || !p {
		t.Errorf("live turn lost objects: container=%v unit=%v dir=%v policy=%v", c, u, d, p)
	}
}

func TestReapPolicyDeadlineAndMtime(t *testing.T) {
	turn := turnID(20)
	tests := []struct {
		name     string
		mtime    time.Time
		content  string
		wantGone bool
	}{
		{"readable deadline in the future keeps an old file", t0.Add(-2 * time.Hour),
			fmt.Sprintf(`{"deadlineUnixMs":%d}`, t0.Add(time.Minute).UnixMilli()), false},
		{"readable deadline past grace removes a new file", t0.Add(-time.Second),
			fmt.Sprintf(`{"deadlineUnixMs":%d}`, t0.Add(-2*time.Minute).UnixMilli()), true},
		{"unreadable, mtime older than max deadline + grace", t0.Add(-MaxTurnDeadline - grace - time.Second), "not json", true},
		{"unreadable, mtime recent", t0.Add(-100 * time.Second), "not json", false},
		{"zero deadline counts as unreadable", t0.Add(-100 * time.Second), `{"deadlineUnixMs":0}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.addPolicy(turn, tt.mtime, tt.content)
			sum, err := w.reaper().Reap(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, _, _, left := w.left(turn)
			if left == tt.wantGone || (sum.Policies == 1) != tt.wantGone {
				t.Errorf("policy left=%v (summary %+v), want removed=%v", left, sum, tt.wantGone)
			}
		})
	}
}

func TestReapUnits(t *testing.T) {
	orphan, activeNoPolicy, withPolicy := turnID(30), turnID(31), turnID(32)
	w := newWorld(t)
	w.units.turns = []string{orphan, activeNoPolicy, withPolicy}
	w.addPolicy(withPolicy, t0.Add(-10*time.Second), fmt.Sprintf(`{"deadlineUnixMs":%d}`, t0.Add(time.Minute).UnixMilli()))
	w.known, w.active = false, nil
	sum, err := w.reaper().Reap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// No host knowledge: the orphan (no policy file) and the turn listed as
	// active by nobody but without a policy both go; the unit whose policy is
	// within its deadline stays.
	if want := []string{orphan, activeNoPolicy}; !slices.Equal(w.units.stopped, want) || sum.Units != 2 {
		t.Errorf("stopped %v (summary %+v), want %v", w.units.stopped, sum, want)
	}

	w = newWorld(t)
	w.units.turns = []string{orphan, activeNoPolicy}
	w.known, w.active = true, map[string]bool{activeNoPolicy: true}
	if _, err := w.reaper().Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{orphan}; !slices.Equal(w.units.stopped, want) {
		t.Errorf("with the host listing %s: stopped %v, want %v", activeNoPolicy, w.units.stopped, want)
	}
}

// The host cleaned up between the listing and the removal: a missing object
// counts as removed, not as a failure.
func TestReapMissingCountsAsRemoved(t *testing.T) {
	w := newWorld(t)
	turn := turnID(40)
	w.addTurn(turn, t0.Add(-300*time.Second), t0.Add(-100*time.Second))
	w.units.onStop = func(turn string) {
		os.RemoveAll(filepath.Join(w.runRoot, turn))
		os.Remove(filepath.Join(w.policyDir, turn+".json"))
	}
	sum, err := w.reaper().Reap(context.Background())
	if err != nil {
		t.Fatalf("Reap: %v", err)
	}
	if want := (Summary{Containers: 1, Units: 1, Dirs: 1, Policies: 1}); sum != want {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
}

func TestReapRetries(t *testing.T) {
	boom := errors.New("daemon busy")
	tests := []struct {
		name       string
		errs       []error
		wantCalls  int
		wantFailed int
	}{
		{"succeeds on the third attempt", []error{boom, boom, nil}, 3, 0},
		{"fails every attempt", []error{boom, boom, boom, nil}, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			turn := turnID(50)
			w.addTurn(turn, t0.Add(-300*time.Second), t0.Add(-100*time.Second))
			w.containers.removeErr = map[string][]error{"id-" + turn: tt.errs}
			w.units.stopErr = map[string]error{}
			sum, err := w.reaper().Reap(context.Background())
			if got := w.containers.calls["id-"+turn]; got != tt.wantCalls {
				t.Errorf("Remove called %d times, want %d", got, tt.wantCalls)
			}
			if sum.Failed != tt.wantFailed || (err != nil) != (tt.wantFailed > 0) {
				t.Errorf("summary %+v, err %v; want %d failed", sum, err, tt.wantFailed)
			}
			if tt.wantFailed > 0 && !errors.Is(err, ErrIncomplete) {
				t.Errorf("err = %v, want ErrIncomplete", err)
			}
			// A failed container removal does not stop the rest of the turn's cleanup.
			if sum.Units != 1 || sum.Dirs != 1 || sum.Policies != 1 {
				t.Errorf("summary %+v: other objects were not removed", sum)
			}
		})
	}
}

func TestReapSkipsUnexpectedEntries(t *testing.T) {
	w := newWorld(t)
	w.known = true // the host lists nothing: every valid old entry would go
	old := t0.Add(-time.Hour)
	outside := t.TempDir()
	secret := filepath.Join(outside, "keep")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	linkTurn, fileTurn := turnID(60), turnID(61)
	skipped := []string{
		filepath.Join(w.runRoot, "not-a-turn"),
		filepath.Join(w.runRoot, "ABCDEF0123456789ABCDEF0123456789"),
		filepath.Join(w.runRoot, ".."+turnID(62)),
		filepath.Join(w.policyDir, "notes.json"),
		filepath.Join(w.policyDir, turnID(63)+".json.tmp"),
		filepath.Join(w.policyDir, turnID(64)),
	}
	for _, p := range skipped {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, old, old)
	}
	// A symlink named like a turn, in both directories, pointing outside.
	links := []string{filepath.Join(w.runRoot, linkTurn), filepath.Join(w.policyDir, linkTurn+".json")}
	if err := os.Symlink(outside, links[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, links[1]); err != nil {
		t.Fatal(err)
	}
	// A regular file where a turn directory would be.
	plain := filepath.Join(w.runRoot, fileTurn)
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A container whose turn label is not a turn id.
	w.containers.list = []container.Info{{ID: "odd", Name: ids.ContainerPrefix + "x", Created: old,
		Labels: map[string]string{layout.LabelInstallation: "test", layout.LabelTurn: "../etc"}}}

	sum, err := w.reaper().Reap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := len(skipped) + len(links) + 1 + 1; sum.Skipped != want {
		t.Errorf("skipped = %d, want %d", sum.Skipped, want)
	}
	if sum.Dirs != 0 || sum.Policies != 0 || sum.Containers != 0 {
		t.Errorf("summary %+v: removed something unexpected", sum)
	}
	for _, p := range append(append(skipped, links...), plain, secret) {
		if !w.exists(p) {
			t.Errorf("%s was removed, want left alone", p)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "x" {
		t.Errorf("symlink target changed: %q, %v", b, err)
	}
}

// A symlink inside a turn directory is unlinked, never followed.
func TestReapDoesNotFollowLinksInsideTurnDir(t *testing.T) {
	w := newWorld(t)
	turn := turnID(70)
	w.addTurn(turn, t0.Add(-300*time.Second), t0.Add(-100*time.Second))
	outside := t.TempDir()
	secret := filepath.Join(outside, "keep")
	os.WriteFile(secret, []byte("x"), 0o600)
	if err := os.Symlink(outside, filepath.Join(w.runRoot, turn, "escape")); err != nil {
		t.Fatal(err)
	}
	old := t0.Add(-300 * time.Second)
	os.Chtimes(filepath.Join(w.runRoot, turn), old, old)
	if _, err := w.reaper().Reap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.exists(filepath.Join(w.runRoot, turn)) {
		t.Error("turn directory not removed")
	}
	if !w.exists(secret) {
		t.Error("removal followed a symlink out of the turn directory")
	}
}

func TestReapListingFailures(t *testing.T) {
	w := newWorld(t)
	turn := turnID(80)
	w.addTurn(turn, t0.Add(-300*time.Second), t0.Add(-100*time.Second))
	w.containers.listErr = errors.New("docker down")
	w.units.listErr = errors.New("bus down")
	sum, err := w.reaper().Reap(context.Background())
	if !errors.Is(err, ErrIncomplete) || sum.Failed != 2 {
		t.Errorf("Reap = %+v, %v; want 2 failures and ErrIncomplete", sum, err)
	}
	// Files are still handled.
	if sum.Dirs != 1 || sum.Policies != 1 {
		t.Errorf("summary %+v: files not reaped after listing failures", sum)
	}
}

func TestReapActiveErrorMeansDeadlinesOnly(t *testing.T) {
	w := newWorld(t)
	turn := turnID(90)
	w.addTurn(turn, t0.Add(-10*time.Second), t0.Add(100*time.Second))
	w.known, w.active, w.activeErr = true, map[string]bool{}, errors.New("host socket timeout")
	sum, err := w.reaper().Reap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.HostKnown || sum.Containers+sum.Units+sum.Dirs+sum.Policies != 0 {
		t.Errorf("summary %+v: want nothing removed without host knowledge", sum)
	}
}

// The host's startup reap: an empty, known set removes everything older
// than the pass.
func TestReapStartup(t *testing.T) {
	w := newWorld(t)
	a, b := turnID(100), turnID(101)
	w.addTurn(a, t0.Add(-2*time.Second), t0.Add(118*time.Second))
	w.addTurn(b, t0.Add(-200*time.Second), t0.Add(-80*time.Second))
	r := w.reaper()
	r.Active = func(context.Context) (map[string]bool, bool, error) { return map[string]bool{}, true, nil }
	sum, err := r.Reap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Summary{Containers: 2, Units: 2, Dirs: 2, Policies: 2, HostKnown: true}); sum != want {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
}

func TestReapConfig(t *testing.T) {
	w := newWorld(t)
	for name, mutate := range map[string]func(*Reaper){
		"bad installation":  func(r *Reaper) { r.Installation = "Bad Name" },
		"relative run root": func(r *Reaper) { r.RunRoot = "turns" },
		"root policy dir":   func(r *Reaper) { r.PolicyDir = "/" },
		"negative grace":    func(r *Reaper) { r.Grace = -time.Second },
		"no containers":     func(r *Reaper) { r.Containers = nil },
	} {
		r := w.reaper()
		mutate(r)
		if _, err := r.Reap(context.Background()); err == nil || errors.Is(err, ErrIncomplete) {
			t.Errorf("%s: Reap = %v, want a configuration error", name, err)
		}
	}
	// Missing directories are simply empty.
	r := w.reaper()
	r.RunRoot, r.PolicyDir = filepath.Join(w.runRoot, "absent"), filepath.Join(w.policyDir, "absent")
	if sum, err := r.Reap(context.Background()); err != nil || sum.Failed != 0 {
		t.Errorf("Reap with missing dirs = %+v, %v; want no failure", sum, err)
	}
}

// A turn whose unit stop failed in the host's cleanup (sandbox.StopUnits
// hands it over: "left to sandbox-reaper") leaves its broker units, and
// maybe a file the cleanup could not remove, behind a turn the host no
// longer lists. The reaper stops those units at its next pass, whether the
// host runs or not; while the host still lists the turn (its cleanup is
// still retrying) they stay.
func TestReapTakesOverAFailedUnitStop(t *testing.T) {
	turn := turnID(60)
	before := t0.Add(-30 * time.Second)  // the turn ran just now
	deadline := t0.Add(90 * time.Second) // and its deadline is still ahead
	policy := fmt.Sprintf(`{"deadlineUnixMs":%d}`, deadline.UnixMilli())
	tests := []struct {
		name     string
		known    bool
		listed   bool
		dir, pol bool // left behind by the cleanup as well
		wantStop bool
	}{
		{"host running, only the units left", true, false, false, false, true},
		{"host not running, only the units left", false, false, false, false, true},
		{"host running, the turn directory left too", true, false, true, false, true},
		{"host running, the policy file left too", true, false, false, true, true},
		{"host still lists the turn: its cleanup goes on", true, true, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.units.turns = []string{turn}
			if tt.dir {
				w.addDir(turn, before)
			}
			if tt.pol {
				w.addPolicy(turn, before, policy)
			}
			w.known = tt.known
			w.active = map[string]bool{}
			if tt.listed {
				w.active[turn] = true
			}
			sum, err := w.reaper().Reap(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(w.units.stopped, turn); got != tt.wantStop {
				t.Errorf("units stopped: %v, want %v (summary %+v)", got, tt.wantStop, sum)
			}
			if tt.wantStop && tt.dir && w.exists(filepath.Join(w.runRoot, turn)) {
				t.Errorf("the turn directory was left")
			}
			if tt.wantStop && tt.pol && w.exists(filepath.Join(w.policyDir, turn+".json")) {
				t.Errorf("the policy file was left")
			}
		})
	}
}
