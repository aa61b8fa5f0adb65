package e2e

// Run standbys (DESIGN.md section 10, runs.standby) end to end: the
// installed host keeps a started toolbox container for the declared shape
// "no project, no setup"; a run of that shape is served by it. This file
// sorts after tail_runs_test.go.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// runStandbyOf waits for the host's ready run standby (a listed standby
// whose channel tag is a run's) other than not, and returns its id and
// container.
func runStandbyOf(t *testing.T, not string, within time.Duration) (string, container.Summary) {
	t.Helper()
	var id string
	var found container.Summary
	msg := eventually(within, func() string {
		id = ""
		for turn, tag := range hostStandbys(t) {
			if turn != not && tag == "run-"+turn {
				id = turn
			}
		}
		if id == "" {
			return "the host lists no ready run standby"
		}
		for _, c := range containers(t) {
			if c.Labels[layout.LabelTurn] == id && c.State == "running" {
				found = c
				return ""
			}
		}
		return "run standby " + id + " has no running container"
	})
	if msg != "" {
		t.Fatalf("no ready run standby within %s: %s", within, msg)
	}
	return id, found
}

// runStandbyConfig declares the run shape "no project, no setup".
func runStandbyConfig() cfg {
	c := baseConfig()
	c.RunStandby = true
	return c
}

// TestRunServedByStandby: with runs.standby declaring the shape, the host
// keeps a started toolbox container for it, labelled as a standby; a run
// of that shape is served by it (its status says standby, the container
// was created before the run was sent and no other was made for it), its
// output reaches the run's own journal identifier, the shape gets its next
// standby at once, and nothing else is left.
func TestRunServedByStandby(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	withConfig(t, runStandbyConfig())
	sb, c := runStandbyOf(t, "", 60*time.Second)
	ins, err := env.docker.ContainerInspect(context.Background(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, ins.Created)
	if err != nil || ins.Config.Labels[layout.LabelStandby] == "" || ins.Config.Labels[layout.LabelDeadline] != ins.Config.Labels[layout.LabelStandby] {
		t.Fatalf("run standby container created %q (%v), labels %v", ins.Created, err, ins.Config.Labels)
	}
	sent := time.Now()
	out, err := cli("run", "--detach", "--", "echo", "WARM-RUN-OUTPUT")
	if err != nil {
		t.Fatalf("run --detach: %v\n%s", err, out)
	}
	id := strings.TrimSpace(out)
	st := waitFinished(t, id, 60*time.Second)
	if st.Result != runs.ResultOK || !strings.Contains(st.Stdout, "WARM-RUN-OUTPUT") {
		t.Fatalf("run on a standby: %+v", st)
	}
	if !st.Standby {
		t.Errorf("run %s was not served by the run standby %s (status standby false)", id, sb)
	}
	if !created.Before(sent) {
		t.Errorf("the run standby's container was created at %v, not before the run at %v", created, sent)
	}
	for _, c := range containers(t) {
		if c.Labels[layout.LabelTurn] == id {
			t.Errorf("a container %s was made for the run although a standby served it", c.ID)
		}
	}
	if msg := eventually(10*time.Second, func() string {
		if !strings.Contains(journal("-t", "sandbox/run-"+id), "WARM-RUN-OUTPUT") {
			return "the run's output is not in the journal as sandbox/run-" + id
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	runStandbyOf(t, sb, 60*time.Second)
	if out, err := cli("run", "show", id); err != nil || !strings.Contains(out, "standby") {
		t.Errorf("sandbox-host run show does not say standby: %v\n%s", err, out)
	}
	assertNothingLeft(t, "after a run on a standby")
}

// TestRunStandbyDiscardedThenReaped: a configuration change (the host
// restarts to read it) discards the ready run standby (the host logs its
// discard at stop; its container is gone) and the new configuration gets
// a standby of its own; then the host is SIGKILLed and kept down with that
// standby left behind, and one reaper run leaves nothing.
func TestRunStandbyDiscardedThenReaped(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	withConfig(t, runStandbyConfig())
	first, _ := runStandbyOf(t, "", 60*time.Second)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	changed := runStandbyConfig()
	changed.RunStandbyAge = 120
	withConfig(t, changed)
	second, c := runStandbyOf(t, first, 60*time.Second)
	for _, c := range containers(t) {
		if c.Labels[layout.LabelTurn] == first {
			t.Errorf("the first run standby's container %s outlived the configuration change", c.ID)
		}
	}
	if msg := eventually(10*time.Second, func() string {
		logs := journal("-u", layout.HostService, "--since", since, "-g", "standby discarded", "-o", "cat")
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "turn="+first) && strings.Contains(l, "reason=stopped") {
				return ""
			}
		}
		return "no \"standby discarded ... reason=stopped\" line for " + first + ":\n" + logs
	}); msg != "" {
		t.Error(msg)
	}

	systemctl(t, "kill", "--kill-who=main", "--signal=SIGKILL", layout.HostService)
	systemctl(t, "stop", layout.HostService)
	// The supervisor exits once the killed host's attach is gone (its
	// stdin ends: fail closed); the container stays for the reaper.
	left := false
	for _, x := range containers(t) {
		left = left || x.Labels[layout.LabelTurn] == second
	}
	if !left {
		t.Fatalf("the killed host left no container of the run standby %s: the scenario proves nothing", second)
	}
	// The reaper leaves what was created during its pass (Created has
	// one-second resolution): start it only once the standby is older.
	if wait := time.Until(time.Unix(c.Created, 0).Add(2 * time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	systemctl(t, "start", layout.ReaperUnit)
	assertEmpty(t, "after one run of the reaper")
	restartHost(t)
}
