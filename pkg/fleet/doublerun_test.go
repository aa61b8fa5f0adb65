package fleet

import (
	"testing"
)

// TestDoubleRunsCounted: a turn the paused owner was running runs again on
// the box that takes it over; the audit and the metric count that second
// run (execution is at least once: the count says how often it was more).
func TestDoubleRunsCounted(t *testing.T) {
	r := newRig(t, 3, 2)
	bl := newBlocker()
	boxA, _ := r.box("a", bl.on("a"))
	boxB, _ := r.box("b", bl.on("b"))
	client, _ := r.fleet("client")
	ctx := r.ctx()
	tn := newTurn("chan-double", "x")
	if _, err := client.Submit(ctx, tn); err != nil {
		t.Fatal(err)
	}
	zombie := boxA
	if <-bl.started == "b" {
		zombie = boxB
	}
	zombie.Detach()
	r.waitEvent("the other box commits", func(e Event) bool { return e.Kind == EventCommitted && e.TurnID == tn.ID })
	close(bl.release)
	r.waitEvent("the zombie's commit refused", func(e Event) bool { return e.Kind == EventRefused && e.TurnID == tn.ID })

	a, err := client.Audit(ctx, []Turn{tn})
	if err != nil {
		t.Fatal(err)
	}
	if a.DoubleRuns != 1 || !a.Clean() {
		t.Errorf("audit %s: want 1 double run and nothing lost, duplicated or reordered", a)
	}
	// What sandbox_fleet_double_runs_total counts (pkg/fleetmetrics'
	// TestDoubleRunsMetric): takes whose claim counted a run before.
	taken := 0
	for _, e := range r.snapshot() {
		if e.Kind == EventTaken && e.Runs > 1 {
			taken++
		}
	}
	if taken != 1 {
		t.Errorf("%d takes reported a run before, want 1 (sandbox_fleet_double_runs_total)", taken)
	}
}
