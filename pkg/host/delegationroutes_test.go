package host

import (
	"context"
	"encoding/json"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"net/http"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
)

// Delegated jobs are tested beside their kind (pkg/delegationrun); what
// stays here is the host's side of them: the router's refusal of a peer
// that is no client, and the channel list during a job.

// delegationRig is a rig whose config adds a fetch tool and enables
// delegation (fetch: "fetch", search: the test config's "lookup").
func delegationRig(t *testing.T, mutate func(*config.Delegation)) *rig {
	t.Helper()
	r := newRig(t, "", func(o *Options) {
		o.Config.Tools = append(o.Config.Tools, config.Tool{Name: "fetch", Description: "Fetch a public page", Kind: "fetch",
			Parameters: `{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`})
		o.Config.Delegation = config.Delegation{Enabled: true, MaxRunning: 2, TimeoutSeconds: 600, MaxTitleChars: 200,
			MaxTaskChars: 4000, MaxReportChars: 80000, DiagnosticChars: 600, FetchTool: "fetch", SearchTool: "lookup", Prompt: "Research."}
		if mutate != nil {
			mutate(&o.Config.Delegation)
		}
		o.Access = config.ResolvedAccess{ClientUIDs: []int{clientUID, otherUID}, Guests: o.Config.Guests}
	})
	t.Cleanup(r.h.Shutdown)
	must(t, r.h.state.SetMode("c", ModeOn))
	return r
}

func delegate(title, task string) delegation.Request {
	return delegation.Request{Title: title, Task: task, Author: delegation.Author{ID: "u1", Name: "Ann", PrincipalID: "p-special"}}
}

// blockJob blocks each run until its context ends; started gets one value
// per run.
func blockJob(started chan<- string) func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
	return func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		started <- spec.Name
		<-ctx.Done()
		return RunResult{ExitCode: -1}, ctx.Err()
	}
}

// TestDelegationRouteRefusals: the router refuses the delegations route
// to a peer that is no client (the kind's own refusals are its tests).
func TestDelegationRouteRefusals(t *testing.T) {
	r := delegationRig(t, nil)
	if code, _ := apiAs(t, r.h, 777, "POST", "/v1/channels/c/delegations", delegate("T", "x")); code != http.StatusForbidden {
		t.Errorf("stranger: %d, want 403", code)
	}
}

// TestDelegationJobNotAChannel: GET /v1/channels during a job lists the
// channel, not the job's own queue entry.
func TestDelegationJobNotAChannel(t *testing.T) {
	r := delegationRig(t, nil)
	started := make(chan string, 1)
	r.docker.RunFn = blockJob(started)
	// The 202 answer's fields are pkg/delegationrun's tests (startJob).
	if code, body := apiAs(t, r.h, clientUID, "POST", "/v1/channels/c/delegations", delegate("T", "x")); code != http.StatusAccepted {
		t.Fatalf("POST delegations: %d %s", code, body)
	}
	<-started
	_, body := apiAs(t, r.h, clientUID, "GET", "/v1/channels", nil)
	var list apiwire.ChannelList
	json.Unmarshal(body, &list)
	if len(list.Channels) != 1 || list.Channels[0].Channel != "c" {
		t.Errorf("GET /v1/channels during a job: %s", body)
	}
}
