package e2e

// Precheck scripts (DESIGN.md section 14) end to end: the installed host and
// worker image, the real CLI, the fake MCP server as server "search" (tool
// "lookup") granted to channel e2e-precheck by the harness config. This
// file sorts after scenarios_test.go (see tail_egress_test.go).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

const precheckChannel = "e2e-precheck"

// precheckScript writes a script where the CLI (root) reads it.
func precheckScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "check.js")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// precheckCLI runs sandbox-host --json precheck and decodes its answer.
func precheckCLI(t *testing.T, args ...string) (precheck.Answer, string, error) {
	t.Helper()
	out, err := cli(append([]string{"--json", "precheck"}, args...)...)
	var a precheck.Answer
	if err == nil {
		if jerr := json.Unmarshal([]byte(out), &a); jerr != nil {
			t.Fatalf("precheck answer is not JSON: %v\n%s", jerr, out)
		}
	}
	return a, out, err
}

// TestPrecheckWakesWithMCPContext: a script granted search:lookup awaits
// the fake MCP tool through its broker (which inserts the MCP credential)
// and wakes with context built from it and from today in the given zone
// (just after midnight east of UTC: the local date); its log line is in the
// journal under the channel's tag; nothing is left.
func TestPrecheckWakesWithMCPContext(t *testing.T) {
	diagnose(t)
	withConfig(t, baseConfig())
	marker := "PRECHECK-" + randHex(4)
	script := precheckScript(t, `export default async ({ mcp, today, timeZone, schedule }) => {
  const r = await mcp.call("search", "lookup", { q: "`+marker+`" });
  return { wake: true, context: [r.content[0].text, today, timeZone, schedule].join(" | ") };
}`)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	start := time.Now()
	a, out, err := precheckCLI(t, "--channel", precheckChannel, "--script", script, "--grant", "search:lookup",
		"--fired-at", "2026-11-30T23:05:00Z", "--time-zone", "Europe/Berlin", "--schedule", "daily 00:05", "--target", "thread-1")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("precheck: %v\n%s", err, out)
	}
	want := "result for " + marker + " | 2026-12-01 | Europe/Berlin | daily 00:05"
	if a.Wake == nil || !*a.Wake || a.Context != want || a.Error != "" {
		t.Errorf("answer %s, want wake with context %q", out, want)
	}
	t.Logf("precheck with one MCP call answered in %v", took)
	var seen int
	for _, rec := range readRecords(env.mcpRec) {
		if !strings.Contains(rec.Raw, marker) {
			continue
		}
		seen++
		if got := rec.Header["Authorization"]; !slices.Equal(got, []string{"Bearer " + env.mcpCred}) {
			t.Errorf("MCP request Authorization = %q, want the MCP credential", got)
		}
		if strings.Contains(rec.Raw, protocol.DummyAPIKey) || strings.Contains(rec.Raw, env.credential) {
			t.Errorf("MCP request carries the dummy key or the model credential: %s", rec.Raw)
		}
	}
	if seen != 1 {
		t.Errorf("the MCP server saw %d calls for the precheck, want 1", seen)
	}
	tag := "sandbox/" + ids.ChannelTag(precheckChannel)
	if lines := journal("-t", tag, "--since", since, "-o", "cat"); !strings.Contains(lines, `"precheck done"`) {
		t.Errorf("journal under %s has no precheck line:\n%s", tag, lines)
	}
	assertNothingLeft(t, "after a precheck")
}

// TestPrecheckRefusals: a grant the operator did not allow for the channel
// is refused before anything runs (exit 1, the grant named); a script
// calling a tool not granted with it gets the runner's error answer; an
// endless loop is stopped at its deadline; nothing is left.
func TestPrecheckRefusals(t *testing.T) {
	diagnose(t)
	withConfig(t, baseConfig())
	ok := precheckScript(t, `export default async () => ({ wake: false })`)
	_, out, err := precheckCLI(t, "--channel", "e2e-other", "--script", ok, "--grant", "search:lookup")
	if exitCode(err) != 1 || !strings.Contains(out, "grant search:lookup is not allowed for this channel") {
		t.Errorf("grant for another channel: exit %d\n%s", exitCode(err), out)
	}
	sneaky := precheckScript(t, `export default async ({ mcp }) => {
  await mcp.call("search", "lookup", { q: "NOT-GRANTED" });
  return { wake: false };
}`)
	a, out, err := precheckCLI(t, "--channel", precheckChannel, "--script", sneaky)
	if err != nil || a.Error != "the script threw: mcp.call: search/lookup is not granted to this precheck" {
		t.Errorf("tool not granted: %v\n%s", err, out)
	}
	for _, rec := range readRecords(env.mcpRec) {
		if strings.Contains(rec.Raw, "NOT-GRANTED") {
			t.Errorf("the MCP server saw the call that was not granted: %s", rec.Raw)
		}
	}
	loop := precheckScript(t, `export default async () => { for (;;) {} }`)
	start := time.Now()
	a, out, err = precheckCLI(t, "--channel", precheckChannel, "--script", loop)
	took := time.Since(start)
	if err != nil || a.Error == "" || !strings.Contains(a.Error, "time") {
		t.Errorf("endless loop: %v\n%s", err, out)
	}
	if took > 20*time.Second {
		t.Errorf("endless loop answered after %v (timeoutSeconds 8)", took)
	}
	t.Logf("endless loop stopped, answered in %v: %s", took, a.Error)
	assertNothingLeft(t, "after refused and failed prechecks")
}

// TestPrecheckMemoryBound: a script that allocates without end in the real
// 256 MiB container is stopped with a memory error (the runner's heap
// bound, or the container's limit), and nothing is left.
func TestPrecheckMemoryBound(t *testing.T) {
	diagnose(t)
	withConfig(t, baseConfig())
	hog := precheckScript(t, `export default async () => {
  const a = [];
  for (let i = 0; ; i++) a.push("x".repeat(1 << 20) + i);
}`)
	start := time.Now()
	a, out, err := precheckCLI(t, "--channel", precheckChannel, "--script", hog)
	took := time.Since(start)
	if err != nil || !strings.Contains(a.Error, "memory") {
		t.Errorf("memory hog: %v\n%s", err, out)
	}
	t.Logf("memory hog stopped, answered in %v: %s", took, a.Error)
	assertNothingLeft(t, "after a memory hog")
}
