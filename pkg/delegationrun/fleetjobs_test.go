package delegationrun_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// Moved from pkg/host (fleetjobs_test.go): delegated jobs across an
// in-process cluster, each box the delegation kind (and the sealed turn
// that runs its research) over its own kit.

// TestFleetDelegationRunsOnAnotherBox: a delegated job admitted on A (its
// record and finished-jobs stream there) runs its research turn on B; its
// report, larger than one frame, comes back whole; turning A's channel
// off cancels a job running on B.
func TestFleetDelegationRunsOnAnotherBox(t *testing.T) {
	c := fleettest.Start(t, 1)
	fleets := map[string]*fleet.Fleet{}
	rigOn := func(name string, takes bool) *rig {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		f, err := fleet.Open(ctx, c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
		must(t, err)
		fleets[name] = f
		r2 := newRigWith(t, true, func(d *config.Delegation) { d.MaxReportChars = 100000 },
			sandboxtest.KitOptions{Fleet: f, Config: func(c *config.Config) { c.Fleet.Box = name }})
		if takes {
			// As the daemon starts the taking of every kind's jobs.
			stop, err := fleetjobs.StartAll(ctx, r2.kit.Host.SpareYielding, r2.k.StartFleet)
			must(t, err)
			t.Cleanup(stop)
		}
		return r2
	}
	a, b := rigOn("box-a", false), rigOn("box-b", true)
	a.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) {
		t.Error("box A ran the research turn")
		return RunResult{ExitCode: 2}, nil
	}
	// 360,001 bytes: two frames, cut inside a character's bytes unless
	// the cut moves to a character's start.
	report := "x" + strings.Repeat("\U0001F600", 90000)
	b.docker.RunFn = replyRun(`{"ok":true,"text":"`+report+`"}`, 0)
	id := startJob(t, a, "c", delegate("T", "find"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done, err := a.k.Registry().Wait(ctx, "c", clientUID, false)
	must(t, err)
	if len(done) != 1 || done[0].ID != id || done[0].Result != delegation.ResultOK || done[0].Report != report {
		t.Fatalf("job on A: %+v", done)
	}
	a.k.Registry().Collected(id, clientUID)
	if len(b.docker.Created) != 1 || len(a.docker.Created) != 0 {
		t.Errorf("containers on B %d, on A %d; want the research turn on B", len(b.docker.Created), len(a.docker.Created))
	}
	b.assertClean(t)

	started := make(chan string, 1)
	b.docker.RunFn = blockJob(started)
	id2 := startJob(t, a, "c", delegate("T2", "find"))
	<-started
	// As A's mode route does (PUT mode off): the fleet first, then A's
	// state, then the kinds.
	_, err = fleets["box-a"].SetMode(ctx, "c", chanstate.ModeOff, "", "box-a")
	must(t, err)
	must(t, a.kit.Host.State.SetMode("c", chanstate.ModeOff))
	a.sealed.ChannelMode("c", chanstate.ModeOff, "")
	a.k.ChannelMode("c", chanstate.ModeOff, "")
	done, err = a.k.Registry().Wait(ctx, "c", clientUID, false)
	must(t, err)
	if len(done) != 1 || done[0].ID != id2 || done[0].Result != delegation.ResultCancelled {
		t.Fatalf("job on A after its channel was turned off: %+v", done)
	}
	// B's record of the job ends only after its cleanup.
	sandboxtest.WaitFor(t, "B's research turn cleaned up", func() bool { return len(b.k.Listed()) == 0 })
	b.assertClean(t)
}
