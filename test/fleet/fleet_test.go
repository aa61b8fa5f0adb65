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

// TestFleetFaults runs stub turns on three namespaced boxes through one
// fault of each kind (kill -9 of a box and of a nats-server, a cut link, a
// paused owner, a full disk, a partial cut; FLEET_FAULTS picks some) and asserts counts only: nothing lost,
// duplicated or reordered, no extra commit, every affected channel
// answered by another box after its fault, every channel (every partition
// has some) answered again after the restore, and no commit by the paused
// owner of a turn it held when paused. The waits are bounded only to end a
// broken run; timings are reported, never asserted.
func TestFleetFaults(t *testing.T) {
	if os.Getenv(Switch) != "1" {
		t.Skipf("fleet tests skipped: set %s=1 (root, network namespaces; test/integration.sh sets it)", Switch)
	}
	if why := Available(); why != "" {
		t.Skipf("fleet tests skipped: %s", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
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
		Slots: 4, Stub: 50 * time.Millisecond, DiskBox: 3, DiskMB: 64, Bin: bin, Log: testLog{t}})
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
	// FLEET_FAULTS (comma-separated kinds) runs only those faults.
	kinds, err := SelectKinds(os.Getenv("FLEET_FAULTS"))
	if err != nil {
		t.Fatal(err)
	}
	var results []FaultResult
	for _, kind := range kinds {
		res, err := f.Fault(ctx, kind, peers, 2*time.Minute, 30)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
		t.Logf("%s on box%d: %d channels affected, failover p50 %v max %v, %d not answered by another box, %d unanswered after the restore",
			kind, res.Box, res.Affected, Percentile(res.Failover, 50), Percentile(res.Failover, 100), res.Missed, len(res.Unanswered))
	}
	a, err := d.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit: %s", a.Audit)
	fmt.Printf("fleet faults: %d turns, %d lost, %d duplicated, %d reordered, %d extra commits (%d faults)\n", a.Turns, a.Lost, a.Dup, a.Reord, a.Extra, len(results))
	if a.Turns < 40*len(kinds) {
		t.Errorf("only %d turns ran, want at least %d", a.Turns, 40*len(kinds))
	}
	if got := [4]int{a.Lost, a.Dup, a.Reord, a.Extra}; got != [4]int{} {
		t.Errorf("lost, duplicated (reply overwritten), reordered, extra commits = %v, want all 0: %s", got, a.Audit)
	}
	for _, res := range results {
		if res.Missed != 0 || len(res.Unanswered) != 0 {
			t.Errorf("%s on box%d: %d of %d affected channels never answered by another box, channels unanswered after the restore %v: want none",
				res.Kind, res.Box, res.Missed, res.Affected, res.Unanswered)
		}
		if res.Kind == PauseOwner {
			// Counted at the end: the paused box's last commits come after
			// its fault returned.
			if n := rec.StaleCommits(BoxName(res.Box), res.At, res.Restored); n != 0 {
				t.Errorf("the paused owner box%d committed %d turns it held when paused, want 0", res.Box, n)
			}
		}
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
