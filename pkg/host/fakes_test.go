package host

import (
	"os"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// The lifecycle's fakes are pkg/sandboxtest's, shared with the kinds'
// tests.
type (
	fakeDocker      = sandboxtest.Docker
	fakeUnits       = sandboxtest.Units
	journalRecorder = sandboxtest.Journal
)

var (
	newFakeDocker = sandboxtest.NewDocker
	newFakeUnits  = sandboxtest.NewUnits
	okRun         = sandboxtest.OKRun
	testConfig    = sandboxtest.Config
	must          = sandboxtest.Must
	testLogger    = sandboxtest.Logger
	waitFor       = sandboxtest.WaitFor
)

type rig struct {
	h      *Host
	cfg    *config.Config
	docker *fakeDocker
	units  *fakeUnits

	chowns sandboxtest.Chowns

	journal *journalRecorder
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
		PeerGroups: func(int) []int { return nil }, ChownTree: r.chowns.Chown, Lchown: r.chowns.Chown,
		WorkerLogs: workerlog.New(workerlog.DefaultLimits(), r.journal.Send, nil),
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
	if n := r.docker.LiveCount(); n != 0 {
		t.Errorf("%d containers left", n)
	}
	if n := r.units.ActiveCount(); n != 0 {
		t.Errorf("%d broker units left", n)
	}
	for _, d := range []string{r.cfg.RunRoot, r.cfg.PolicyDir} {
		entries, _ := os.ReadDir(d)
		if len(entries) != 0 {
			t.Errorf("%s not empty: %v", d, entries)
		}
	}
}
