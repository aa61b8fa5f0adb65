package e2e

// Code runs (DESIGN.md section 12) end to end: the installed host, the
// toolbox image built in the namespace by `sandbox-host toolbox build`, the
// real CLI. This file sorts after scenarios_test.go (see tail_egress_test.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// needToolbox skips a run scenario when the namespace has no toolbox image
// (the stage could not build one; run.sh says why).
func needToolbox(t *testing.T) {
	t.Helper()
	if _, _, err := env.docker.ImageInspectWithRaw(t.Context(), layout.DefaultToolboxImage); err != nil {
		t.Skipf("no toolbox image %s in the namespace's dockerd (test/e2e/run.sh builds it with sandbox-host toolbox build): %v", layout.DefaultToolboxImage, err)
	}
}

// exitCode of a CLI call (0 when it succeeded).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// demoProject makes the project directory runs.projects names, readable by
// every uid (a run's user is a guest uid).
func demoProject(t *testing.T, marker string) string {
	t.Helper()
	dir := "/srv/roundtable-e2e-project-" + randHex(4)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runStatus reads one run through the CLI (as root: an admin).
func runStatus(t *testing.T, id string) runs.Status {
	t.Helper()
	out, err := cli("--json", "run", "show", id)
	if err != nil {
		t.Fatalf("run show %s: %v\n%s", id, err, out)
	}
	var st runs.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("run show %s: %v\n%s", id, err, out)
	}
	return st
}

// waitFinished polls a run until it finished.
func waitFinished(t *testing.T, id string, within time.Duration) runs.Status {
	t.Helper()
	var st runs.Status
	msg := eventually(within, func() string {
		st = runStatus(t, id)
		if st.State != runs.StateFinished {
			return "state " + st.State
		}
		return ""
	})
	if msg != "" {
		t.Fatalf("run %s did not finish within %s: %s", id, within, msg)
	}
	return st
}

// TestRunFromCLI: setup as root then the command as the run's unprivileged
// user with no capability at all; the project read-only at /workspace; an
// artifact out of /output written by the CLI; the command's exit status as
// the CLI's; output in the journal as sandbox/run-<id>; nothing left.
func TestRunFromCLI(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	marker := "PROJECT-" + randHex(4)
	c := baseConfig()
	c.RunsProject = demoProject(t, marker)
	withConfig(t, c)
	outDir := t.TempDir()
	script := `echo MAIN-UID=$(id -u) MAIN-GID=$(id -g)
grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status
cat /workspace/hello.txt
if touch /workspace/new 2>/dev/null; then echo WORKSPACE-WRITABLE; else echo WORKSPACE-READ-ONLY; fi
echo artifact-body > /output/result.txt
exit 7`
	start := time.Now()
	out, err := cli("--json", "run", "--project", "demo", "--setup", "echo SETUP-UID=$(id -u)", "--setup", "grep -qE '^[0-9]+ [0-9]+ [0-9:]+ / / rw[, ]' /proc/self/mountinfo && echo ROOT-WRITABLE-IN-SETUP", "--artifact", "result.txt",
		"--out", outDir, "--timeout", "60", "--", "bash", "-c", script)
	took := time.Since(start)
	if code := exitCode(err); code != 7 {
		t.Fatalf("run exit status %d, want the command's 7 (%v)\n%s", code, err, out)
	}
	var st runs.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("run --json output: %v\n%s", err, out)
	}
	t.Logf("run %s: %s exit %v in %s", st.ID, st.Result, st.ExitCode, took)
	if st.Result != runs.ResultFailed || st.ExitCode == nil || *st.ExitCode != 7 {
		t.Errorf("status %+v", st)
	}
	for _, want := range []string{"SETUP-UID=0", marker, "WORKSPACE-READ-ONLY", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapPrm:\t0000000000000000", "CapAmb:\t0000000000000000"} {
		if !strings.Contains(st.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, st.Stdout)
		}
	}
	if strings.Contains(st.Stdout, "MAIN-UID=0 ") || !strings.Contains(st.Stdout, "MAIN-UID=") {
		t.Errorf("the main command must run as a non-root uid:\n%s", st.Stdout)
	}
	if !strings.Contains(st.Stdout, "ROOT-WRITABLE-IN-SETUP") {
		t.Errorf("a run with setup has a writable root (package installation):\n%s", st.Stdout)
	}
	data, err := os.ReadFile(filepath.Join(outDir, "result.txt"))
	if err != nil || string(data) != "artifact-body\n" {
		t.Errorf("artifact written by the CLI: %q %v", data, err)
	}
	if j := eventually(10*time.Second, func() string {
		if !strings.Contains(journal("-t", "sandbox/run-"+st.ID), marker) {
			return "missing"
		}
		return ""
	}); j != "" {
		t.Errorf("journalctl -t sandbox/run-%s lacks the run's output", st.ID)
	}

	// Without setup: the container itself runs as the run's uid, its root
	// read-only; output streams to the CLI's stdout.
	out, err = cli("run", "--", "bash", "-c", "echo PLAIN-UID=$(id -u); grep ^CapBnd: /proc/self/status; grep -qE '^[0-9]+ [0-9]+ [0-9:]+ / / ro[, ]' /proc/self/mountinfo && echo ROOT-READ-ONLY")
	if err != nil || !strings.Contains(out, "PLAIN-UID=") || strings.Contains(out, "PLAIN-UID=0\n") ||
		!strings.Contains(out, "CapBnd:\t0000000000000000") || !strings.Contains(out, "ROOT-READ-ONLY") {
		t.Errorf("plain run: %v\n%s", err, out)
	}
	assertNothingLeft(t, "after runs from the CLI")
}

// TestRunTimeoutKills: a run past its timeout is killed and removed; the CLI
// exits 124.
func TestRunTimeoutKills(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	start := time.Now()
	out, err := cli("run", "--timeout", "2", "--", "sleep", "60")
	if code := exitCode(err); code != 124 {
		t.Errorf("exit %d, want 124\n%s", code, out)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the timed-out run took %s", took)
	}
	assertNothingLeft(t, "after a timed-out run")
}

// TestRunNetworkDenied: a network run waits for an admin; denied, it ends
// without a container ever existing.
func TestRunNetworkDenied(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	out, err := cli("run", "--detach", "--network", "--", "python3", "-c", "print('never')")
	if err != nil {
		t.Fatalf("run --detach --network: %v\n%s", err, out)
	}
	id := strings.TrimSpace(out)
	if st := runStatus(t, id); st.State != runs.StateAwaitingApproval {
		t.Fatalf("state %s, want awaiting_approval", st.State)
	}
	time.Sleep(500 * time.Millisecond)
	for _, c := range containers(t) {
		if c.Labels[layout.LabelTurn] == id {
			t.Fatalf("a container exists for a run awaiting approval: %v", c.Names)
		}
	}
	if out, err := cli("run", "deny", id); err != nil {
		t.Fatalf("run deny: %v\n%s", err, out)
	}
	st := waitFinished(t, id, 10*time.Second)
	if st.Result != runs.ResultDenied || st.Stdout != "" {
		t.Errorf("denied run: %+v", st)
	}
	assertNothingLeft(t, "after a denied run")
}

// TestRunNetworkApproved: once approved, the run's HTTP client reaches a
// server named in egress.allow through the proxy route and the in-container
// bridge; the metadata address and another local port stay refused, and a
// direct connection has no network at all.
func TestRunNetworkApproved(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	marker := "RUN-EGRESS-" + randHex(4)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, marker)
	}))
	defer srv.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "other") }))
	defer other.Close()
	addr := srv.Listener.Addr().String()
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())
	c := baseConfig()
	c.FetchAllow = addr
	withConfig(t, c)
	script := fmt.Sprintf(`
import urllib.request, urllib.error
def get(label, url, opener=None):
    try:
        o = opener or urllib.request.build_opener()
        print(label, o.open(url, timeout=10).read().decode())
    except urllib.error.HTTPError as e:
        print(label, "HTTP", e.code)
    except Exception as e:
        print(label, "ERR", type(e).__name__)
get("ALLOWED", "http://%s/")
get("META", "http://169.254.169.254/latest/meta-data/")
get("OTHER", "http://127.0.0.1:%s/")
get("DIRECT", "http://%s/", urllib.request.build_opener(urllib.request.ProxyHandler({})))
`, addr, otherPort, addr)
	out, err := cli("run", "--detach", "--network", "--", "python3", "-c", script)
	if err != nil {
		t.Fatalf("run --network: %v\n%s", err, out)
	}
	id := strings.TrimSpace(out)
	if out, err := cli("run", "approve", id); err != nil {
		t.Fatalf("run approve: %v\n%s", err, out)
	}
	st := waitFinished(t, id, 60*time.Second)
	t.Logf("run %s: %s\n%s%s", id, st.Result, st.Stdout, st.Stderr)
	for _, want := range []string{"ALLOWED " + marker, "META HTTP 403", "OTHER HTTP 403", "DIRECT ERR"} {
		if !strings.Contains(st.Stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if st.Result != runs.ResultOK || st.ApprovedBy == nil {
		t.Errorf("status %+v", st)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the allowed server was reached %d times, want 1 (the direct attempt must not reach it)", n)
	}
	assertNothingLeft(t, "after an approved network run")
}

// mcpClient runs the official MCP TypeScript SDK's client
// (test/peers/mcp-run-client.mjs) against `sandbox-host mcp` over stdio.
func mcpClient(t *testing.T, args ...string) map[string]any {
	t.Helper()
	peers := os.Getenv("E2E_PEERS")
	if peers == "" {
		t.Skip("E2E_PEERS unset: test/peers/node_modules missing (npm ci --prefix test/peers)")
	}
	full := append([]string{filepath.Join(peers, "mcp-run-client.mjs")}, args...)
	full = append(full, "--", "/usr/bin/sandbox-host", "mcp")
	cmd := exec.Command("node", full...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mcp-run-client: %v\nstderr: %s\nstdout: %s", err, stderr.String(), out)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("mcp-run-client output: %v\n%s", err, out)
	}
	return doc
}

// toolText joins a CallToolResult's text content.
func toolText(res map[string]any) string {
	var b strings.Builder
	content, _ := res["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "text" {
			b.WriteString(fmt.Sprint(m["text"]))
		}
	}
	return b.String()
}

// TestRunFromMCPClient: a real MCP client (the official TypeScript SDK, no
// code of ours) lists sandbox_run with the seed's parameters and calls it
// over stdio through `sandbox-host mcp` and the host: output, an artifact as
// an embedded resource, progress; network without elicitation is refused
// with no run created; with an accepted elicitation the run goes through
// (root is an admin, so the server's approval is accepted).
func TestRunFromMCPClient(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	doc := mcpClient(t, "--progress", "--call", `{"command":"echo MCP-$((6*7)); echo art-body > /output/a.txt","artifacts":["a.txt"]}`)
	var props []string
	for _, tl := range doc["tools"].([]any) {
		m := tl.(map[string]any)
		if m["name"] == "sandbox_run" {
			for k := range m["inputSchema"].(map[string]any)["properties"].(map[string]any) {
				props = append(props, k)
			}
		}
	}
	for _, want := range []string{"command", "executable", "args", "setup", "network", "timeout_seconds", "artifacts"} {
		if !strings.Contains(strings.Join(props, ","), want) {
			t.Errorf("sandbox_run lacks %q: %v", want, props)
		}
	}
	res, _ := doc["result"].(map[string]any)
	if res == nil || res["isError"] == true || !strings.Contains(toolText(res), "MCP-42") {
		t.Fatalf("tool result %v", res)
	}
	found := false
	for _, c := range res["content"].([]any) {
		m := c.(map[string]any)
		if m["type"] == "resource" {
			r := m["resource"].(map[string]any)
			found = found || (strings.HasSuffix(fmt.Sprint(r["uri"]), "a.txt") && r["blob"] == "YXJ0LWJvZHkK")
		}
	}
	if !found {
		t.Errorf("artifact a.txt not an embedded resource: %v", res["content"])
	}

	before, _ := cli("--json", "run", "list")
	doc = mcpClient(t, "--call", `{"command":"echo never","network":true}`)
	res, _ = doc["result"].(map[string]any)
	if res == nil || res["isError"] != true {
		t.Errorf("network without elicitation: %v, want a tool error", res)
	}
	after, _ := cli("--json", "run", "list")
	if strings.Count(after, `"id"`) != strings.Count(before, `"id"`) {
		t.Errorf("a run was created for a network call the client could not approve:\n%s\n%s", before, after)
	}

	doc = mcpClient(t, "--elicit", "accept", "--call", `{"command":"echo NET-APPROVED","network":true}`)
	res, _ = doc["result"].(map[string]any)
	if el, _ := doc["elicitations"].([]any); len(el) != 1 || res == nil || res["isError"] == true || !strings.Contains(toolText(res), "NET-APPROVED") {
		t.Errorf("network with an accepted elicitation: elicitations %v result %v", doc["elicitations"], res)
	}
	assertNothingLeft(t, "after MCP runs")
}

// TestRunHostKilledThenReaped: an approved network run is running (its
// container, broker units, turn directory and policy exist) when the host is
// SIGKILLed and kept down: one reaper run leaves nothing.
func TestRunHostKilledThenReaped(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	out, err := cli("run", "--detach", "--network", "--timeout", "120", "--", "sleep", "100")
	if err != nil {
		t.Fatalf("run --detach --network: %v\n%s", err, out)
	}
	id := strings.TrimSpace(out)
	if out, err := cli("run", "approve", id); err != nil {
		t.Fatalf("run approve: %v\n%s", err, out)
	}
	if msg := eventually(30*time.Second, func() string {
		for _, c := range containers(t) {
			if c.Labels[layout.LabelTurn] == id && c.State == "running" {
				return ""
			}
		}
		return "no running container for the run"
	}); msg != "" {
		t.Fatal(msg)
	}
	if units := brokerUnits(); len(units) == 0 {
		t.Fatalf("an approved network run has no broker unit: the scenario proves nothing")
	}
	systemctl(t, "kill", "--kill-who=main", "--signal=SIGKILL", layout.HostService)
	systemctl(t, "stop", layout.HostService)
	time.Sleep(2 * time.Second)
	systemctl(t, "start", layout.ReaperUnit)
	assertEmpty(t, "after one run of the reaper")
	restartHost(t)
}
