package precheckrun_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// Moved from pkg/host (fleetjobs_test.go): prechecks across an in-process
// cluster, each box the precheck kind over its own kit.

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
		r := newRig(t, precheckExtra, sandboxtest.KitOptions{Fleet: f, Config: func(c *config.Config) { c.Fleet.Box = name }})
		if takes {
			// As the daemon starts the taking of every kind's jobs.
			stop, err := fleetjobs.StartAll(ctx, r.Host.SpareYielding, r.k.StartFleet)
			must(t, err)
			t.Cleanup(stop)
		}
		return r
	}
	a, b := rigOn("box-a", false), rigOn("box-b", true)
	a.Docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) {
		t.Error("box A ran the precheck")
		return RunResult{ExitCode: 2}, nil
	}
	m := &sandboxtest.PrecheckMCP{}
	b.Docker.RunFn = sandboxtest.PrecheckRunner(m)
	code, ans, body := postPrecheck(t, a, precheck.Request{Channel: "room", Script: `export default async ({ mcp }) => { const r = await mcp.json("search", "find", { q: "x" }); return { wake: true, context: "hits " + r.hits } }`,
		Grants: []precheck.Grant{{Server: "search", Tool: "find"}}})
	if code != http.StatusOK || ans.Wake == nil || !*ans.Wake || ans.Context != "hits 4" {
		t.Fatalf("precheck on A: %d %s", code, body)
	}
	if len(b.Docker.Created) != 1 || !b.Docker.Created[0].Precheck || len(b.Docker.Policies) != 1 || len(a.Docker.Created) != 0 {
		t.Errorf("containers on B %d (policies %d), on A %d; want one on B with B's policy", len(b.Docker.Created), len(b.Docker.Policies), len(a.Docker.Created))
	}
	if len(m.Calls) != 1 {
		t.Errorf("MCP calls through B's broker: %v", m.Calls)
	}
	b.AssertClean(t)
}
