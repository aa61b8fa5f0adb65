package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTypeScriptClient runs the integration tests of the TypeScript client
// and of the Pi extension on it (clients/*/test/integration.test.ts, built
// by their npm test) against this router on a real Unix socket, with its
// peer credentials: node runs as this process's uid, the host's own, so it
// is an admin. Runs finish through the fake supervisor (supervise).
// Skipped without node or the built client; the extension's part is
// skipped when it is not built.
func TestTypeScriptClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	var scripts []string
	for _, pkg := range []string{"typescript", "pi-extension"} {
		script, _ := filepath.Abs(filepath.Join("..", "..", "clients", pkg, "dist", "test", "integration.test.js"))
		if _, err := os.Stat(script); err != nil {
			t.Logf("clients/%s is not built (make clients-test): its integration tests are skipped", pkg)
			continue
		}
		scripts = append(scripts, script)
	}
	if len(scripts) == 0 {
		t.Skip("the TypeScript client is not built: npm ci && npm test in clients/typescript (make clients-test)")
	}
	r, _ := newRunRig(t, "", supervise(0))
	_, sock := serve(t, r) // api_test.go
	ctx := t.Context()
	for _, script := range scripts {
		cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", script)
		cmd.Env = append(os.Environ(), "SANDBOX_HOST_SOCKET="+sock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("node --test %s: %v\n%s", script, err, out)
			continue
		}
		t.Logf("%s", out)
	}
	// The client also claims Bun: its integration tests under the Bun
	// pinned in test/peers, when it is installed there.
	bun, _ := filepath.Abs(filepath.Join("..", "..", "test", "peers", "node_modules", "@oven", "bun-linux-x64-baseline", "bin", "bun"))
	if _, err := os.Stat(bun); err != nil || !strings.HasSuffix(scripts[0], filepath.Join("typescript", "dist", "test", "integration.test.js")) {
		t.Logf("Bun is not installed in test/peers (npm ci --prefix test/peers) or the client is not built: the Bun pass is skipped")
		return
	}
	cmd := exec.CommandContext(ctx, bun, "test", scripts[0])
	cmd.Env = append(os.Environ(), "SANDBOX_HOST_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("bun test %s: %v\n%s", scripts[0], err, out)
	}
	t.Logf("%s", out)
}
