package coderun_test

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// TestRunResultBeforeCleanup: the run's result is recorded (its result
// event, Done) as soon as the supervisor's result frame arrived, after its
// last output, while the container has not exited and still exists; the
// run's cleanup (removal, then its slot) follows, and Ended says when it
// is over. Fails on a kind that records the result only after cleanup.
func TestRunResultBeforeCleanup(t *testing.T) {
	exit := make(chan struct{}) // the supervisor's exit, after its result frame
	resulted := make(chan struct{})
	r, _ := newRunRig(t, runsExtra, func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		enc := wire.NewEncoder(stdout)
		if err := enc.Output(wire.FrameStdout, wire.PhaseMain, []byte("last output\n")); err != nil {
			return -1, err
		}
		if err := enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain, ExitCode: 3}); err != nil {
			return -1, err
		}
		if err := enc.Result(wire.Result{ExitCode: 3}); err != nil {
			return -1, err
		}
		close(resulted)
		select {
		case <-exit:
		case <-ctx.Done():
		}
		return 0, nil
	})
	defer func() {
		select {
		case <-exit:
		default:
			close(exit)
		}
	}()
	st, err := r.k.Start(runs.Params{Command: "x"}, clientUID)
	must(t, err)
	run, err := r.k.Registry().Get(st.ID)
	must(t, err)
	<-resulted
	select {
	case <-run.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("no result while the container's exit is pending: the result waits for the cleanup")
	}
	got := run.Status()
	if got.Result != runs.ResultFailed || got.ExitCode == nil || *got.ExitCode != 3 || got.Stdout != "last output\n" {
		t.Errorf("result %+v, want failed with exit 3 and the last output", got)
	}
	select {
	case <-run.Ended():
		t.Fatal("the run ended before its container exited")
	default:
	}
	if n := r.docker.LiveCount(); n != 1 {
		t.Errorf("%d containers live at the result, want the run's one", n)
	}
	if !listed(r, st.ID) {
		t.Errorf("run not listed in GET /v1/turns while its container exists: the reaper would take it")
	}
	close(exit)
	<-run.Ended()
	if listed(r, st.ID) {
		t.Errorf("run still listed once it ended")
	}
	r.assertClean(t)
}

func listed(r *rig, id string) bool {
	for _, l := range r.k.Listed() {
		if l.ID == id {
			return true
		}
	}
	return false
}

// TestRunSlotHeldUntilRemoval: with one global slot, a run whose result
// was recorded before its cleanup keeps that slot until its container is
// removed: the next run's supervisor starts only after that removal.
func TestRunSlotHeldUntilRemoval(t *testing.T) {
	var mu sync.Mutex
	var events []string
	event := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	exit := make(chan struct{})
	r, _ := newRunRigWith(t, runsExtra, func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		event("start " + job.Command)
		enc := wire.NewEncoder(stdout)
		if err := enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain}); err != nil {
			return -1, err
		}
		if err := enc.Result(wire.Result{}); err != nil {
			return -1, err
		}
		if job.Command == "first" {
			select {
			case <-exit:
			case <-ctx.Done():
			}
		}
		return 0, nil
	}, func(o *sandboxtest.KitOptions) {
		o.Config = func(c *config.Config) { c.Queue.GlobalConcurrency = 1 }
	})
	r.docker.RemoveHook = func(string) { event("remove") }
	defer func() {
		select {
		case <-exit:
		default:
			close(exit)
		}
	}()
	a, err := r.k.Start(runs.Params{Command: "first"}, clientUID)
	must(t, err)
	first, err := r.k.Registry().Get(a.ID)
	must(t, err)
	<-first.Done() // its result, its container not yet exited
	b, err := r.k.Start(runs.Params{Command: "second"}, clientUID)
	must(t, err)
	close(exit)
	waitRun(t, r, b.ID)
	mu.Lock()
	got := slices.Clone(events)
	mu.Unlock()
	if i, j := slices.Index(got, "remove"), slices.Index(got, "start second"); i < 0 || j < 0 || j < i {
		t.Errorf("events %v: want the first run's removal before the second run's start", got)
	}
	r.assertClean(t)
}
