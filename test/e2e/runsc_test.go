package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// requireRunsc skips, saying why, when the namespace's dockerd cannot run
// gVisor: runsc not installed (lib/ns.sh registers it only when
// /usr/bin/runsc exists), or its default ptrace platform unusable here.
func requireRunsc(t *testing.T) {
	t.Helper()
	info, err := env.docker.Info(context.Background())
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	if _, ok := info.Runtimes["runsc"]; !ok {
		t.Skip("runsc scenarios skipped: runsc is not registered with the test dockerd (apt-get install runsc; a machine /etc/docker/daemon.json is left as it is)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "runsc", "--network=none", "do", "/bin/true").CombinedOutput(); err != nil {
		t.Skipf("runsc scenarios skipped: runsc cannot start a sandbox on this machine (ptrace platform): %v: %s", err, strings.TrimSpace(string(out)))
	}
}

// TestRunscTurnAndStandby: with runtime: runsc a turn runs in gVisor on the
// cold path, and the next one on a standby made under runsc too.
func TestRunscTurnAndStandby(t *testing.T) {
	requireRunsc(t)
	diagnose(t)
	c := baseConfig()
	c.Runtime = "runsc"
	withConfig(t, c)
	// Only doctor's runtime line: its MCP check fails on this harness's
	// config (declared lookup schema differs from the fake server's).
	if out, _ := cli("doctor"); !regexp.MustCompile(`(?m)^\s*OK\s+runtime\s+runsc registered$`).MatchString(out) {
		t.Errorf("sandbox-host doctor with runtime runsc has no ok runtime line:\n%s", out)
	}
	const ch = "e2e-runsc"
	channelOn(t, ch)
	// The fake model holds the turn until the container was inspected: a
	// runsc turn can finish in 17 ms, faster than any poll sees it.
	text := "hello runsc RUNSC-HOLD-" + randHex(4)
	release := heldTurn(t, text)
	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", text) }()
	cont := waitContainer(t, ch, 30*time.Second)
	if ins, err := env.docker.ContainerInspect(context.Background(), cont.ID); err != nil || ins.HostConfig.Runtime != "runsc" {
		t.Errorf("turn container runtime: %v, err %v; want runsc", ins.HostConfig, err)
	}
	release()
	r := <-done
	if r.Err != nil || r.Status != http.StatusOK || !strings.Contains(replyText(r), "hello runsc") {
		t.Fatalf("cold turn under runsc: %s", r)
	}
	id, sb := standbyOf(t, ch, 60*time.Second)
	if ins, err := env.docker.ContainerInspect(context.Background(), sb.ID); err != nil || ins.HostConfig.Runtime != "runsc" {
		t.Errorf("standby container runtime: err %v; want runsc", err)
	}
	r = turn(ch, "bob", "hello runsc standby")
	if r.Err != nil || r.Status != http.StatusOK || !strings.Contains(replyText(r), "hello runsc standby") {
		t.Fatalf("standby turn under runsc: %s", r)
	}
	if got, _ := r.Body["turnId"].(string); got != id {
		t.Errorf("second turn ran as %q, want the standby's turn %s", got, id)
	}
	if out, err := cli("channel", "off", ch); err != nil {
		t.Fatalf("channel off: %v\n%s", err, out)
	}
	assertNothingLeft(t, "after runsc turns")
}

// TestRunscHostileWorkerIsRefused: the hostile worker's probes under gVisor.
func TestRunscHostileWorkerIsRefused(t *testing.T) {
	requireRunsc(t)
	diagnose(t)
	c := baseConfig()
	c.Image = hostileImage
	c.Runtime = "runsc"
	withConfig(t, c)
	hostileWorkerScenario(t, "e2e-hostile-runsc", "runsc")
}

// TestRunscLatency measures runsc beside runc, cold path and standby, in
// interleaved rounds (runc cold, runc standby, runsc cold, runsc standby;
// a host restart off the clock between runtimes), client side. It runs only when
// asked: E2E_RUN=RunscLatency E2E_RUNSC_ROUNDS=7 make e2e (docs/BENCHMARKS.md).
func TestRunscLatency(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("E2E_RUNSC_ROUNDS"))
	if rounds <= 0 {
		t.Skip("runsc latency not measured: set E2E_RUNSC_ROUNDS (a hand-run measurement, not a check)")
	}
	requireRunsc(t)
	diagnose(t)
	const ch = "e2e-runsc-timing"
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the start: %s", strings.TrimSpace(string(load)))
	}
	timed := map[string][]time.Duration{}
	timeTurn := func(series, text string) {
		s := time.Now()
		if r := turn(ch, "bob", text); r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("%s turn: %s", series, r)
		}
		timed[series] = append(timed[series], time.Since(s))
	}
	t.Cleanup(func() {
		_, _ = cli("channel", "off", ch)
		if err := writeConfig(baseConfig()); err != nil {
			t.Errorf("restore config: %v", err)
		}
		restartHost(t)
	})
	for i := 0; i < rounds; i++ {
		for _, rt := range []string{"runc", "runsc"} {
			c := baseConfig()
			if rt == "runsc" {
				c.Runtime = rt
			}
			if err := writeConfig(c); err != nil {
				t.Fatal(err)
			}
			restartHost(t)
			// A channel switched on gets its first standby after its first
			// turn: that turn takes the cold path with Docker otherwise idle.
			channelOn(t, ch)
			timeTurn(rt+" cold", "cold "+strconv.Itoa(i))
			standbyOf(t, ch, 60*time.Second)
			timeTurn(rt+" standby", "warm "+strconv.Itoa(i))
			// Discard the replacement and let the discard end.
			standbyOf(t, ch, 60*time.Second)
			if out, err := cli("channel", "off", ch); err != nil {
				t.Fatalf("channel off: %v\n%s", err, out)
			}
			eventually(15*time.Second, func() string {
				for _, c := range containers(t) {
					if c.Labels[layout.LabelChannel] == ids.ChannelTag(ch) {
						return "discard running"
					}
				}
				return ""
			})
		}
	}
	for _, series := range []string{"runc cold", "runc standby", "runsc cold", "runsc standby"} {
		t.Logf("turn latency, client side, %d interleaved rounds: %-13s median %v %v", rounds, series, median(timed[series]), timed[series])
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average at the end: %s", strings.TrimSpace(string(load)))
	// An outlier is shown with the host's own account of each turn.
	for _, d := range timed {
		if slices.Max(d) > 5*time.Second {
			t.Logf("a turn took over 5 s; the host's turn phases:\n%s", journal("-u", layout.HostService, "-g", "turn phases|standby", "-o", "short-precise"))
			break
		}
	}
}
