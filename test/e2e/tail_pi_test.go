package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunFromPi: the real Pi coding agent (test/peers, pinned) in print
// mode, with the Pi extension (clients/pi-extension) installed from its
// tarball and a scripted loopback model of ours calling sandbox_run,
// against the installed host: a shell run, an argv run with an artifact
// written under the project's folder, a setup run, a network run refused
// (print mode has no UI) with no run created, a run the host refuses as a
// clear tool error, and a session across tool calls (start, an exec writing
// a file, an exec reading it, close; it must run here, never skip)
// (test/peers/pi-sandbox-run.mjs checks the tool results Pi records in its
// session file).
func TestRunFromPi(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	peers, clients := os.Getenv("E2E_PEERS"), os.Getenv("E2E_CLIENTS")
	if peers == "" || clients == "" {
		t.Skip("E2E_PEERS or E2E_CLIENTS unset: npm ci --prefix test/peers, and make clients (the built extension)")
	}
	if _, err := os.Stat(filepath.Join(peers, "node_modules", ".bin", "pi")); err != nil {
		t.Skip("Pi is not installed in test/peers: npm ci --prefix test/peers")
	}
	cmd := exec.Command("node", filepath.Join(peers, "pi-sandbox-run.mjs"), hostSocket)
	cmd.Env = append(os.Environ(), "PI_EXTENSION_DIR="+filepath.Join(clients, "pi-extension"))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 2 {
			t.Skipf("pi-sandbox-run could not start: %s", out)
		}
		t.Errorf("pi-sandbox-run: %v", err)
	}
	passed := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "ok ") {
			passed++
		}
	}
	if err == nil && passed != 6 {
		t.Errorf("%d scenarios passed, want 6", passed)
	}
	assertNothingLeft(t, "after Pi's runs")
}

// TestTypeScriptClientOnTheHost: the TypeScript client's integration tests
// (clients/typescript/test/integration.test.ts, as pkg/host's
// TestTypeScriptClient runs them against the router with fakes) against
// the installed host, as root (an admin): the served OpenAPI document is
// the one the package ships. Under Node, then under Bun (test/peers).
func TestTypeScriptClientOnTheHost(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	clients := os.Getenv("E2E_CLIENTS")
	if clients == "" {
		t.Skip("E2E_CLIENTS unset: make clients (the built client)")
	}
	cmd := exec.Command("node", "--test", "--test-reporter=tap", filepath.Join(clients, "typescript", "dist", "test", "integration.test.js"))
	// SANDBOX_SESSIONS=required: the installed host has sessions and its
	// toolbox, so the client's session tests run here, never skip.
	cmd.Env = append(os.Environ(), "SANDBOX_HOST_SOCKET="+hostSocket, "SANDBOX_OPENAPI=/usr/share/roundtable-sandbox/openapi.json", "SANDBOX_SESSIONS=required")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	// The client also claims Bun: the same tests under the Bun pinned in
	// test/peers, when it is installed there.
	if peers := os.Getenv("E2E_PEERS"); peers != "" {
		bun := filepath.Join(peers, "node_modules", "@oven", "bun-linux-x64-baseline", "bin", "bun")
		if _, err := os.Stat(bun); err != nil {
			t.Logf("Bun is not installed in test/peers: the Bun pass is skipped")
		} else {
			cmd := exec.Command(bun, "test", filepath.Join(clients, "typescript", "dist", "test", "integration.test.js"))
			cmd.Env = append(os.Environ(), "SANDBOX_HOST_SOCKET="+hostSocket, "SANDBOX_OPENAPI=/usr/share/roundtable-sandbox/openapi.json", "SANDBOX_SESSIONS=required")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("bun test: %v\n%s", err, out)
			}
			t.Logf("%s", out)
		}
	}
	assertNothingLeft(t, "after the client's runs")
}
