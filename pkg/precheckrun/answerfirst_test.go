package precheckrun_test

import (
	"context"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
)

// TestPrecheckAnswersBeforeCleanup: the runner's answer is given as soon
// as its result line is whole: the runner's exit not awaited, its
// container and broker units still there; RunAnswering returns once the
// cleanup removed them. A failed cleanup after that answer is still the
// system's failure, for the log and the metric. Fails on a kind that
// answers only after the cleanup.
func TestPrecheckAnswersBeforeCleanup(t *testing.T) {
	for _, failCleanup := range []bool{false, true} {
		name := map[bool]string{false: "clean", true: "cleanup fails"}[failCleanup]
		t.Run(name, func(t *testing.T) {
			r, _ := newPrecheckRig(t, precheckExtra)
			if failCleanup {
				r.Docker.RemoveFails = -1
			}
			type seen struct {
				answered, exited, live bool
				units                  int
				ans                    precheck.Answer
			}
			var at seen
			ans, err := r.k.RunAnswering(context.Background(), precheck.Request{Channel: "room", Script: `export default async () => ({ wake: true, context: "go" })`},
				func(a precheck.Answer) {
					id := "id-" + r.Docker.Created[0].Name
					at = seen{answered: true, exited: r.Docker.HasExited(id), live: r.Docker.IsLive(id), units: r.Units.ActiveCount(), ans: a}
				})
			if !at.answered || at.exited || !at.live || at.units != 1 {
				t.Fatalf("at the answer %+v; want it before the runner's exit, the container and units still there", at)
			}
			if at.ans.Wake == nil || !*at.ans.Wake || at.ans.Context != "go" {
				t.Errorf("early answer %+v, want wake with context go", at.ans)
			}
			if failCleanup {
				if err == nil {
					t.Errorf("RunAnswering = %+v, nil; want the failed cleanup as the system's failure", ans)
				}
				return
			}
			if err != nil || ans.Wake == nil || !*ans.Wake {
				t.Errorf("RunAnswering = %+v, %v", ans, err)
			}
			r.AssertClean(t)
		})
	}
}
