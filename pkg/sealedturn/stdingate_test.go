package sealedturn_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// Moved from pkg/host (fastpath_test.go): a cold sealed turn's container
// starts while its broker units start, and its stdin waits for them. The
// reply-before-cleanup tests through the host's answer stay there.

var index = sandboxtest.Index

// The container is created and started while the unit job runs; its stdin
// is written only after the job succeeded.
func TestStdinWaitsForTheUnitJob(t *testing.T) {
	var mu sync.Mutex
	var phases []string
	r := newColdRig(t, "", sandboxtest.KitOptions{
		Observe: func(p string, _ time.Duration) { mu.Lock(); phases = append(phases, p); mu.Unlock() },
	})
	gate := make(chan struct{})
	r.units.StartHook = func(ctx context.Context, _ string) error {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.docker.Event("unit done")
		return nil
	}
	type result struct {
		text string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		reply, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
		res := result{err: err}
		if reply != nil {
			res.text = reply.Text
		}
		done <- res
	}()
	waitFor(t, "the container to start", func() bool { return slices.Contains(r.docker.EventList(), "start") })
	time.Sleep(20 * time.Millisecond) // give a wrong implementation time to write
	if ev := r.docker.EventList(); slices.Contains(ev, "stdin") {
		t.Fatalf("stdin written before the unit job ended: events %v", ev)
	}
	close(gate)
	res := <-done
	if res.err != nil || res.text != "hello" {
		t.Fatalf("run = %q, %v; want hello", res.text, res.err)
	}
	ev := r.docker.EventList()
	if s, u, in := index(ev, "start", 0), index(ev, "unit done", 0), index(ev, "stdin", 0); !(s >= 0 && s < u && u < in) {
		t.Errorf("events = %v, want start < unit done < stdin", ev)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(phases, sandbox.PhaseStdinGate) {
		t.Errorf("phases = %v, want %s among them", phases, sandbox.PhaseStdinGate)
	}
	r.assertClean(t)
}

// A failed unit job kills the container that already started (stdin never
// written) and the turn fails and cleans up as before.
func TestFailedUnitJobKillsTheStartedContainer(t *testing.T) {
	errJob := errors.New("job result \"failed\"")
	tests := []struct {
		name string
		hook func(r *rig) func(context.Context, string) error
	}{
		{"fails after the container started", func(r *rig) func(context.Context, string) error {
			return func(context.Context, string) error {
				for !slices.Contains(r.docker.EventList(), "start") {
					time.Sleep(time.Millisecond)
				}
				return errJob
			}
		}},
		{"fails at once", func(*rig) func(context.Context, string) error {
			return func(context.Context, string) error { return errJob }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newColdRig(t, "", sandboxtest.KitOptions{})
			r.units.StartHook = tt.hook(r)
			reply, id, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
			// The host answers it ErrTurnFailed (its TestResultOf).
			if err == nil || errors.Is(err, sandbox.ErrCleanup) || reply != nil {
				t.Fatalf("run = %v, %v; want a failed run", reply, err)
			}
			if len(r.docker.Stdins) != 0 || slices.Contains(r.docker.EventList(), "stdin") {
				t.Errorf("stdin was written: %v", r.docker.EventList())
			}
			cid := "id-" + r.docker.Created[0].Name
			if !slices.Contains(r.docker.EventList(), "ready failed") || !slices.Contains(r.docker.Kills, cid) {
				t.Errorf("events %v kills %v; want the started container killed", r.docker.EventList(), r.docker.Kills)
			}
			if !slices.Contains(r.docker.Removes, cid) || !slices.Equal(r.units.Stopped, []string{id}) {
				t.Errorf("removes %v units stopped %v; want the container removed and units %s stopped", r.docker.Removes, r.units.Stopped, id)
			}
			r.assertClean(t)
		})
	}
}

// A client leaving while the container waits for the units: killed, cleaned.
func TestClientGoneWhileStdinGated(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	r.units.StartHook = func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFor(t, "the container to start", func() bool { return slices.Contains(r.docker.EventList(), "start") })
		cancel()
	}()
	_, _, err := r.run(ctx, turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
	// The host answers it ErrClientGone (its TestResultOf).
	if err == nil || errors.Is(err, sandbox.ErrCleanup) {
		t.Fatalf("run = %v, want a failed run", err)
	}
	if len(r.docker.Stdins) != 0 {
		t.Errorf("stdin was written")
	}
	r.assertClean(t)
}
