package e2e

// The MCP Inspector's CLI mode (npm @modelcontextprotocol/inspector,
// pinned in test/peers) drives a session through `sandbox-host mcp`
// (issue 36: "a real MCP client ... and the MCP Inspector CLI"). Each call
// is one `npx mcp-inspector --cli` run, a fresh MCP server process: the
// session lives in the host between them. This file sorts after
// tail_sessions_test.go.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// inspectorCLI runs one Inspector CLI call against `sandbox-host mcp` and
// returns its JSON answer.
func inspectorCLI(t *testing.T, peers string, args ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"--no-install", "mcp-inspector", "--cli", "/usr/bin/sandbox-host", "mcp"}, args...)
	cmd := exec.CommandContext(ctx, "npx", argv...)
	cmd.Dir = peers // node_modules/.bin; --no-install: never the registry
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("npx mcp-inspector --cli %v: %v\nstderr: %s\nstdout: %s", args, err, stderr.String(), out)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("mcp-inspector --cli %v answered no JSON: %v\n%s", args, err, out)
	}
	return doc
}

// TestSessionFromMCPInspector: the Inspector's CLI lists the session
// tools, starts a session, runs an exec in it and closes it, one call per
// run, through `sandbox-host mcp`; nothing is left.
func TestSessionFromMCPInspector(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	peers := os.Getenv("E2E_PEERS")
	if peers == "" {
		t.Skip("E2E_PEERS unset: test/peers/node_modules missing (npm ci --prefix test/peers)")
	}
	if _, err := os.Stat(filepath.Join(peers, "node_modules", "@modelcontextprotocol", "inspector", "package.json")); err != nil {
		t.Skip("the MCP Inspector is not installed in test/peers (npm ci --prefix test/peers)")
	}
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx not found (it comes with Node.js's npm; README Quick start)")
	}
	list := inspectorCLI(t, peers, "--method", "tools/list")
	var names []string
	tools, _ := list["tools"].([]any)
	for _, tl := range tools {
		if m, ok := tl.(map[string]any); ok {
			names = append(names, strings.TrimSpace(m["name"].(string)))
		}
	}
	for _, want := range []string{"sandbox_session_start", "sandbox_exec", "sandbox_session_close"} {
		if !strings.Contains(","+strings.Join(names, ",")+",", ","+want+",") {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	started := inspectorCLI(t, peers, "--method", "tools/call", "--tool-name", "sandbox_session_start")
	id := regexp.MustCompile(`\b[0-9a-f]{32}\b`).FindString(toolText(started))
	if id == "" || started["isError"] == true {
		t.Fatalf("sandbox_session_start: %v", started)
	}
	t.Cleanup(func() { _, _ = cli("session", "close", id) })
	ran := inspectorCLI(t, peers, "--method", "tools/call", "--tool-name", "sandbox_exec",
		"--tool-arg", "session_id="+id, "--tool-arg", "command=echo INSPECTOR-$((6*7))")
	if got := toolText(ran); !strings.Contains(got, "INSPECTOR-42") || ran["isError"] == true {
		t.Errorf("sandbox_exec: isError %v %q, want INSPECTOR-42", ran["isError"], got)
	}
	closed := inspectorCLI(t, peers, "--method", "tools/call", "--tool-name", "sandbox_session_close", "--tool-arg", "session_id="+id)
	if got := toolText(closed); !strings.Contains(got, "session closed") || closed["isError"] == true {
		t.Errorf("sandbox_session_close: isError %v %q", closed["isError"], got)
	}
	assertNothingLeft(t, "after an Inspector-driven session")
}
