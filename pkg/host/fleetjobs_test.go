package host

// The code runs' fleet tests are pkg/coderun's (fleetjobs_test.go there);
// the precheck's and the delegation's stay here, and the fleet run
// benchmark with them.

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// startFleetJobs starts h's taking of the fleet's jobs as the daemon does.
func startFleetJobs(ctx context.Context, h *Host) (func(), error) {
	return fleetjobs.StartAll(ctx, h.queue.SpareYielding, h.codeRuns().StartFleet, h.precheckRuns().StartFleet, h.delegationRuns().StartFleet)
}

// TestFleetPrecheckRunsOnAnotherBox: a precheck admitted on A (which takes
// no jobs) runs on B with B's broker and policy; A's caller gets its
// answer as from a local precheck, A made no container.
func TestFleetPrecheckRunsOnAnotherBox(t *testing.T) {
	c := fleettest.Start(t, 1)
	rigOn := func(name string, takes bool) *rig {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		f, err := fleet.Open(ctx, c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
		must(t, err)
		r := newRig(t, precheckExtra, func(o *Options) {
			o.Access.ClientUIDs = []int{clientUID}
			o.Fleet, o.Config.Fleet.Box = f, name
		})
		t.Cleanup(r.h.Shutdown)
		if takes {
			stop, err := startFleetJobs(ctx, r.h)
			must(t, err)
			t.Cleanup(stop)
		}
		return r
	}
	a, b := rigOn("box-a", false), rigOn("box-b", true)
	a.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) {
		t.Error("box A ran the precheck")
		return RunResult{ExitCode: 2}, nil
	}
	m := &mcpFake{}
	b.docker.RunFn = runnerRun(m)
	code, ans, body := postPrecheck(t, a.h, precheck.Request{Channel: "room", Script: `export default async ({ mcp }) => { const r = await mcp.json("search", "find", { q: "x" }); return { wake: true, context: "hits " + r.hits } }`,
		Grants: []precheck.Grant{{Server: "search", Tool: "find"}}})
	if code != http.StatusOK || ans.Wake == nil || !*ans.Wake || ans.Context != "hits 4" {
		t.Fatalf("precheck on A: %d %s", code, body)
	}
	if len(b.docker.Created) != 1 || !b.docker.Created[0].Precheck || len(b.docker.Policies) != 1 || len(a.docker.Created) != 0 {
		t.Errorf("containers on B %d (policies %d), on A %d; want one on B with B's policy", len(b.docker.Created), len(b.docker.Policies), len(a.docker.Created))
	}
	if len(m.Calls) != 1 {
		t.Errorf("MCP calls through B's broker: %v", m.Calls)
	}
	b.assertClean(t)
}

// TestFleetDelegationRunsOnAnotherBox: a delegated job admitted on A (its
// record and finished-jobs stream there) runs its research turn on B; its
// report, larger than one frame, comes back whole; turning A's channel
// off cancels a job running on B.
func TestFleetDelegationRunsOnAnotherBox(t *testing.T) {
	c := fleettest.Start(t, 1)
	rigOn := func(name string, takes bool) *rig {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		f, err := fleet.Open(ctx, c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
		must(t, err)
		r2 := newRig(t, "", func(o *Options) {
			o.Config.Tools = append(o.Config.Tools, config.Tool{Name: "fetch", Description: "Fetch a public page", Kind: "fetch",
				Parameters: `{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`})
			o.Config.Delegation = config.Delegation{Enabled: true, MaxRunning: 2, TimeoutSeconds: 600, MaxTitleChars: 200,
				MaxTaskChars: 4000, MaxReportChars: 100000, DiagnosticChars: 600, FetchTool: "fetch", SearchTool: "lookup", Prompt: "Research."}
			o.Access = config.ResolvedAccess{ClientUIDs: []int{clientUID, otherUID}, Guests: o.Config.Guests}
			o.Fleet, o.Config.Fleet.Box = f, name
		})
		t.Cleanup(r2.h.Shutdown)
		must(t, r2.h.state.SetMode("c", ModeOn))
		if takes {
			stop, err := startFleetJobs(ctx, r2.h)
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
	done, err := a.h.delegationRuns().Registry().Wait(ctx, "c", clientUID, false)
	must(t, err)
	if len(done) != 1 || done[0].ID != id || done[0].Result != delegation.ResultOK || done[0].Report != report {
		t.Fatalf("job on A: %+v", done)
	}
	a.h.delegationRuns().Registry().Collected(id, clientUID)
	if len(b.docker.Created) != 1 || len(a.docker.Created) != 0 {
		t.Errorf("containers on B %d, on A %d; want the research turn on B", len(b.docker.Created), len(a.docker.Created))
	}
	b.assertClean(t)

	started := make(chan string, 1)
	b.docker.RunFn = blockJob(started)
	id2 := startJob(t, a, "c", delegate("T2", "find"))
	<-started
	code, body := apiAs(t, a.h, os.Getuid(), "PUT", "/v1/channels/c/mode", map[string]string{"mode": "off"})
	if code != http.StatusOK {
		t.Fatalf("mode off on A: %d %s", code, body)
	}
	done, err = a.h.delegationRuns().Registry().Wait(ctx, "c", clientUID, false)
	must(t, err)
	if len(done) != 1 || done[0].ID != id2 || done[0].Result != delegation.ResultCancelled {
		t.Fatalf("job on A after its channel was turned off: %+v", done)
	}
	// B's record of the job ends only after its cleanup.
	waitFor(t, "B's research turn cleaned up", func() bool { return len(b.h.delegationRuns().Listed()) == 0 })
	b.assertClean(t)
}

// BenchmarkFleetRun: a trivial run (the fake engine's) from admission to
// its result, here without a fleet, through the fleet on its own box, and
// admitted on A run on B: the engine's cost per run (go test -bench
// FleetRun -benchtime 100x ./pkg/host).
func BenchmarkFleetRun(b *testing.B) {
	rigOn := func(f *fleet.Fleet, name string, takes bool) *rig {
		rd := &runDocker{StreamFn: supervise(0)}
		r := newRig(b, runsExtra, func(o *Options) {
			rd.Docker = o.Containers.(*fakeDocker)
			o.Containers = rd
			o.Access = config.ResolvedAccess{ClientUIDs: []int{clientUID}, Guests: o.Config.Guests}
			o.Fleet, o.Config.Fleet.Box = f, name
		})
		b.Cleanup(r.h.Shutdown)
		if takes {
			stop, err := startFleetJobs(context.Background(), r.h)
			must(b, err)
			b.Cleanup(stop)
		}
		return r
	}
	open := func(c *fleettest.Cluster, name string) *fleet.Fleet {
		f, err := fleet.Open(context.Background(), c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
		must(b, err)
		return f
	}
	run := func(b *testing.B, a *rig) {
		for b.Loop() {
			st, err := a.h.codeRuns().Start(runs.Params{Command: "true"}, clientUID)
			must(b, err)
			r, err := a.h.codeRuns().Registry().Get(st.ID)
			must(b, err)
			<-r.Done()
			if s := r.Summary(); s.Result != runs.ResultOK {
				b.Fatalf("run %+v", s)
			}
		}
	}
	b.Run("local", func(b *testing.B) { run(b, rigOn(nil, "", false)) })
	b.Run("fleet-own-box", func(b *testing.B) {
		c := fleettest.Start(b, 1)
		run(b, rigOn(open(c, "box-a"), "box-a", true))
	})
	b.Run("fleet-other-box", func(b *testing.B) {
		c := fleettest.Start(b, 1)
		a := rigOn(open(c, "box-a"), "box-a", false)
		rigOn(open(c, "box-b"), "box-b", true)
		run(b, a)
	})
}
