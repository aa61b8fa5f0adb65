package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPiAgentScenarios: the real Pi coding agent (test/peers) in print mode
// with the Pi extension installed from its tarball, a scripted loopback
// model calling sandbox_run, against this router on a Unix socket (fake
// Docker and systemd, the fake run supervisor): a shell run, an argv run
// with an artifact, a setup run, a network run refused without a UI with
// no run created, a run the host refuses (test/peers/pi-sandbox-run.mjs
// checks the tool results Pi records in its session file). Its session
// scenario skips here: fake Docker cannot attach, so no session can be
// created (test/e2e runs it). About 35 s of
// Pi start-ups, so only with SANDBOX_PI=1 (make clients-test sets it);
// test/e2e's TestRunFromPi runs the same against the installed host.
func TestPiAgentScenarios(t *testing.T) {
	if os.Getenv("SANDBOX_PI") != "1" {
		t.Skip("SANDBOX_PI=1 unset (make clients-test sets it)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	script, _ := filepath.Abs(filepath.Join("..", "..", "test", "peers", "pi-sandbox-run.mjs"))
	r, _ := newRunRig(t, "", supervise(0))
	_, sock := serve(t, r) // api_test.go
	out, err := exec.CommandContext(t.Context(), node, script, sock).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 2 {
		t.Skipf("pi-sandbox-run could not start: %s", out)
	}
	if err != nil {
		t.Fatalf("pi-sandbox-run: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	var passed, skipped int
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "ok "):
			passed++
		case strings.HasPrefix(line, "skip "):
			skipped++
		}
	}
	if passed != 5 || skipped != 1 {
		t.Errorf("%d scenarios passed and %d skipped, want 5 and the session's 1", passed, skipped)
	}
}
