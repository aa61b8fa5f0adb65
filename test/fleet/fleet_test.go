package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFleetFaults runs a few hundred stub turns on three namespaced boxes
// through a killed box and a paused owner, and asserts what
// was committed: nothing lost, duplicated or reordered, one reply per turn
// id. Timings are reported, never asserted.
func TestFleetFaults(t *testing.T) {
	if os.Getenv(Switch) != "1" {
		t.Skipf("fleet tests skipped: set %s=1 (root, network namespaces; test/integration.sh sets it)", Switch)
	}
	if why := Available(); why != "" {
		t.Skipf("fleet tests skipped: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := Build(ctx, filepath.Dir(strings.TrimSpace(string(root))), bin); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if keep := os.Getenv("FLEET_TEST_DIR"); keep != "" {
		dir = keep // kept after the test, for its logs
	}
	f, err := Start(ctx, Options{Dir: dir, Servers: 3, Partitions: 6, Replicas: 3, AckWait: 2 * time.Second,
		Slots: 4, Stub: 50 * time.Millisecond, Bin: bin, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	peers := []int{1, 2, 3}
	if err := f.StartBoxes(ctx, peers); err != nil {
		t.Fatal(err)
	}
	d, err := f.StartDriver(ctx, "short", 12, 2)
	if err != nil {
		t.Fatal(err)
	}
	rec := f.Recorder()
	if err := rec.Wait(ctx, func(r *Recorder) bool { return r.Replies() >= 60 }); err != nil {
		t.Fatalf("no turns committed: %v", err)
	}
	// Not CutLink: after a cut link some partitions are taken by no box and
	// their turns stay unanswered (found by this harness, open in issue 28;
	// make fleet-bench still injects it and reports it).
	for _, kind := range []string{KillBox, PauseOwner} {
		res, err := f.Fault(ctx, kind, peers, 60*time.Second, 30)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s on box%d: %d channels affected, failover p50 %v max %v, %d without a reply in the bound",
			kind, res.Box, res.Affected, Percentile(res.Failover, 50), Percentile(res.Failover, 100), res.Missed)
	}
	a, err := d.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit: %s", a.Audit)
	fmt.Printf("fleet faults: %d turns, %d lost, %d duplicated, %d reordered, %d extra commits (2 faults)\n", a.Turns, a.Lost, a.Dup, a.Reord, a.Extra)
	if a.Turns < 200 {
		t.Errorf("only %d turns ran, want at least 200", a.Turns)
	}
	if got := [4]int{a.Lost, a.Dup, a.Reord, a.Extra}; got != [4]int{} {
		t.Errorf("lost, duplicated (reply overwritten), reordered, extra commits = %v, want all 0: %s", got, a.Audit)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
