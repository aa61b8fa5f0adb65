package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// base is a minimal valid config; tests append or replace lines.
const base = `
model:
  url: https://api.example.com/v1/chat/completions
  name: m1
credentials:
  default: model
`

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandbox.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestShippedConfigLoads(t *testing.T) {
	c, err := Load("../../packaging/sandbox.yaml")
	if err != nil {
		t.Fatalf("packaging/sandbox.yaml: %v", err)
	}
	if c.TurnDeadlineSeconds != 120 || c.Limits.MemoryMB != 512 || c.Queue.Depth != 8 || c.Credentials.Default != "model" {
		t.Errorf("shipped values: %+v", c)
	}
	if got := c.API.Clients.Groups; len(got) != 1 || got[0] != "sandbox-clients" {
		t.Errorf("api.clients.groups = %v", got)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Load(write(t, base))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"turnDeadlineSeconds", c.TurnDeadlineSeconds, 120},
		{"limits.memoryMb", c.Limits.MemoryMB, 512},
		{"limits.cpus", c.Limits.CPUs, 1.0},
		{"limits.pids", c.Limits.Pids, int64(64)},
		{"limits.tmpfsMb", c.Limits.TmpfsMB, 64},
		{"model.maxTokens", c.Model.MaxTokens, 4096},
		{"timeZone", c.TimeZone, "UTC"},
		{"prompt", c.Prompt, DefaultPrompt},
		{"queue.depth", c.Queue.Depth, 8},
		{"queue.globalConcurrency", c.Queue.GlobalConcurrency, 0},
		{"queue.startConcurrency", c.Queue.StartConcurrency, 0},
		{"queue.maxWaitSeconds", c.Queue.MaxWaitSeconds, 120},
		{"installation", c.Installation, "default"},
		{"image", c.Image, "roundtable-sandbox-worker:latest"},
		{"broker.maxCalls", c.Broker.MaxCalls, 48},
		{"broker.maxRequestBytes", c.Broker.MaxRequestBytes, int64(256 << 10)},
		{"reaper.graceSeconds", c.Reaper.GraceSeconds, 60},
		{"runRoot", c.RunRoot, "/run/roundtable-sandbox/turns"},
		{"api.admins.uids", len(c.API.Admins.UIDs), 1},
		{"guests.uidBase", c.Guests.UIDBase, 2147000000},
		{"guests.uidCount", c.Guests.UIDCount, 65536},
		{"standby.enabled", c.Standby.Enabled, true},
		{"standby.maxAgeSeconds", c.Standby.MaxAgeSeconds, 300},
		{"standby.max", c.Standby.Max, 16},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestRefusals(t *testing.T) {
	tool := func(extra string) string {
		return base + "tools:\n  - name: clock\n    description: time\n    kind: builtin\n    builtin: clock\n" + extra
	}
	long := "/" + strings.Repeat("r", 60)
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", base + "bogusKey: 1\n", "bogusKey: unknown key (line "},
		{"unknown nested key", base + "limits:\n  memoryGb: 1\n", "limits.memoryGb: unknown key (line "},
		{"unknown key in a list element", base + "tools:\n  - name: t\n    shell: true\n", "tools[0].shell: unknown key (line "},
		{"unknown key deep", base + "mcp:\n  - name: s\n    tools:\n      - name: a\n        inputSchema: x\n", "mcp[0].tools[0].inputSchema: unknown key (line "},
		{"unknown key through a merge", base + "x-defaults: &d\n  memoryMb: 128\nlimits:\n  <<: *d\n", "x-defaults: unknown key"},
		{"deadline zero", base + "turnDeadlineSeconds: 0\n", "turnDeadlineSeconds: must be 1 to 600"},
		{"deadline too long", base + "turnDeadlineSeconds: 601\n", "turnDeadlineSeconds: must be 1 to 600"},
		{"memory", base + "limits:\n  memoryMb: 10\n", "limits.memoryMb"},
		{"cpus", base + "limits:\n  cpus: 0\n", "limits.cpus"},
		{"pids", base + "limits:\n  pids: 100000\n", "limits.pids"},
		{"tmpfs", base + "limits:\n  tmpfsMb: 0\n", "limits.tmpfsMb"},
		{"http model", strings.Replace(base, "https://api.example.com", "http://127.0.0.1:8080", 1), "model.url: must use https"},
		{"http model non-loopback", strings.Replace(strings.Replace(base, "https://api.example.com", "http://api.example.com", 1), "name: m1", "name: m1\n  allowInsecureLoopbackHTTP: true", 1), "model.url: plain http is allowed only to a loopback host"},
		{"model url creds", strings.Replace(base, "https://api.example.com", "https://u:p@api.example.com", 1), "model.url"},
		{"no model name", strings.Replace(base, "name: m1", "name: \"\"", 1), "model.name"},
		{"maxTokens", strings.Replace(base, "name: m1", "name: m1\n  maxTokens: 0", 1), "model.maxTokens"},
		{"time zone", base + "timeZone: Mars/Olympus\n", "timeZone"},
		{"no default credential", strings.Replace(base, "default: model", "default: \"\"", 1), "credentials.default"},
		{"rule two selectors", strings.Replace(base, "default: model", "default: model\n  rules:\n    - channel: a\n      speaker: b\n      credential: x", 1), "credentials.rules[0]: must set exactly one"},
		{"rule bad credential", strings.Replace(base, "default: model", "default: model\n  rules:\n    - channel: a\n      credential: ../x", 1), "credentials.rules[0].credential"},
		{"tool name", tool("  - name: Bad\n    description: d\n    kind: builtin\n    builtin: clock\n"), "tools[1].name"},
		{"tool duplicate", tool("  - name: clock\n    description: d\n    kind: builtin\n    builtin: clock\n"), `tools[1].name: "clock" is not unique`},
		{"tool no params", tool(""), "tools[0].parameters"},
		{"tool remote ref", base + "tools:\n  - name: t\n    description: d\n    kind: builtin\n    builtin: clock\n    parameters: '{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"https://evil.example/s.json\"}}}'\n", "tools[0].parameters: at #/properties/a/$ref: $ref may hold only a local fragment (#...); remote references are refused"},
		{"tool remote ref in an unknown keyword's array", toolParams(`{"type":"object","x-any":[{"$ref":"https://evil.example/s.json"}]}`), "tools[0].parameters"},
		{"tool remote ref in type", toolParams(`{"type":"object","properties":{"a":{"type":[{"$ref":"https://evil.example/s.json"}]}}}`), "tools[0].parameters"},
		{"tool remote ref in extends", toolParams(`{"type":"object","extends":[{"$ref":"https://evil.example/s.json"}]}`), "tools[0].parameters"},
		{"tool remote ref in default", toolParams(`{"type":"object","default":{"$id":"https://evil.example/"}}`), "tools[0].parameters"},
		{"tool $schema of another host", toolParams(`{"type":"object","$schema":"https://evil.example/draft-07/schema#"}`), "tools[0].parameters: at #/$schema: $schema may name only a json-schema.org dialect"},
		{"tool $schema draft-03", toolParams(`{"type":"object","$schema":"http://json-schema.org/draft-03/schema#"}`), "tools[0].parameters: at #/$schema: $schema may name only a json-schema.org dialect"},
		{"tool exec relative", base + "tools:\n  - name: t\n    description: d\n    kind: exec\n    argv: [run.sh]\n    parameters: '{\"type\":\"object\"}'\n", "tools[0].argv"},
		{"tool http url", base + "tools:\n  - name: t\n    description: d\n    kind: http\n    url: ftp://x\n    parameters: '{\"type\":\"object\"}'\n", "tools[0].url"},
		{"tool kind", base + "tools:\n  - name: t\n    description: d\n    kind: shell\n    parameters: '{\"type\":\"object\"}'\n", "tools[0].kind"},
		{"tool budget", base + "tools:\n" + strings.Repeat("", 0) + bigTools(10), "tools: tool names, descriptions and parameters take"},
		{"mcp no tools", base + "mcp:\n  - name: s\n    url: https://mcp.example.com/\n", "mcp[0].tools: declare at least one tool"},
		{"mcp session", base + "mcp:\n  - name: s\n    url: https://mcp.example.com/\n    session: sticky\n    tools:\n      - name: a\n        description: d\n        parameters: '{\"type\":\"object\"}'\n", "mcp[0].session"},
		{"mcp tool name space", mcpTool("a b"), `mcp[0].tools[0].name: "a b" must be 1 to 128 characters`},
		{"mcp tool name slash", mcpTool("a/b"), `mcp[0].tools[0].name: "a/b" must be 1 to 128`},
		{"mcp tool name long", mcpTool(strings.Repeat("x", 129)), "mcp[0].tools[0].name"},
		{"mcp tool name empty", mcpTool(`""`), "mcp[0].tools[0].name"},
		{"mcp server name keeps its rule", strings.Replace(mcpTool("get-sum"), "name: s\n", "name: get-sum\n", 1), `mcp[0].name: "get-sum" must match [a-z][a-z0-9_]{0,47}`},
		{"host tool name keeps its rule", tool("  - name: get-time\n    description: d\n    kind: builtin\n    builtin: clock\n"), `tools[1].name: "get-time" must match [a-z][a-z0-9_]{0,47}`},
		{"queue depth", base + "queue:\n  depth: 0\n", "queue.depth"},
		{"global concurrency negative", base + "queue:\n  globalConcurrency: -1\n", "queue.globalConcurrency: must be 0 (derived from the machine) to 1024, got -1"},
		{"global concurrency huge", base + "queue:\n  globalConcurrency: 1025\n", "queue.globalConcurrency: must be 0 (derived from the machine) to 1024, got 1025"},
		{"start concurrency negative", base + "queue:\n  startConcurrency: -1\n", "queue.startConcurrency: must be 0 (derived from the machine) to 1024, got -1"},
		{"start concurrency huge", base + "queue:\n  startConcurrency: 1025\n", "queue.startConcurrency: must be 0 (derived from the machine) to 1024, got 1025"},
		{"queue wait zero", base + "queue:\n  maxWaitSeconds: 0\n", "queue.maxWaitSeconds: must be 1 to 600, got 0"},
		{"queue wait long", base + "queue:\n  maxWaitSeconds: 601\n", "queue.maxWaitSeconds: must be 1 to 600, got 601"},
		{"standby age short", base + "standby:\n  maxAgeSeconds: 9\n", "standby.maxAgeSeconds: must be 10 to 600, got 9"},
		{"standby age long", base + "standby:\n  maxAgeSeconds: 601\n", "standby.maxAgeSeconds: must be 10 to 600"},
		{"standby max negative", base + "standby:\n  max: -1\n", "standby.max: must be 0 (no standbys) to 4096"},
		{"standby max huge", base + "standby:\n  max: 5000\n", "standby.max"},
		{"initial channel", base + "initialChannels: [\"\"]\n", "initialChannels[0]"},
		{"broker limit", base + "broker:\n  maxCalls: 0\n", "broker.maxCalls"},
		{"relative root", base + "runRoot: run/turns\n", "runRoot: \"run/turns\" must be a clean absolute path"},
		{"nested roots", base + "runRoot: /srv/sb\nworkspaceRoot: /srv/sb/ws\n", "runRoot: /srv/sb and workspaceRoot /srv/sb/ws must not be nested"},
		{"state in root", base + "stateFile: /var/lib/roundtable-sandbox/workspaces/channels.json\n", "stateFile: /var/lib/roundtable-sandbox/workspaces/channels.json must be outside workspaceRoot"},
		{"root in docker", base + "workspaceRoot: /var/lib/docker/volumes/ws\n", "workspaceRoot: /var/lib/docker/volumes/ws must be outside Docker's data directory"},
		{"root in configured docker", base + "dockerDataRoot: /srv/docker\nworkspaceRoot: /srv/docker/ws\n", "must be outside Docker's data directory /srv/docker"},
		{"socket too long", base + "runRoot: " + long + "\n", "the limit is 100"},
		{"runtime", base + "runtime: \"runsc; rm\"\n", "runtime"},
		{"installation", base + "installation: Bad_Name\n", "installation"},
		{"loopback http allowed", strings.Replace(strings.Replace(base, "https://api.example.com", "http://localhost:9", 1), "name: m1", "name: m1\n  allowInsecureLoopbackHTTP: true", 1) + "queue:\n  depth: 0\n", "queue.depth"},
		{"api group", base + "api:\n  clients:\n    groups: [\"a b\"]\n", "api.clients.groups[0]"},
		{"guest base too low", base + "guests:\n  uidBase: 1000\n", "guests.uidBase: must be 65536 to"},
		{"guest base root", base + "guests:\n  uidBase: 0\n", "guests.uidBase"},
		{"guest count zero", base + "guests:\n  uidCount: 0\n", "guests.uidCount: must be 1 to"},
		{"guest range past 2^31-1", base + "guests:\n  uidBase: 2147483000\n  uidCount: 1000\n", "guests.uidCount"},
		{"api client is a guest", base + "api:\n  clients:\n    uids: [2147000005]\n", "api.clients.uids[0]: 2147000005 is a guest uid"},
		{"api admin is a guest", base + "guests:\n  uidBase: 100000\n  uidCount: 10\napi:\n  admins:\n    uids: [0, 100009]\n", "api.admins.uids[1]: 100009 is a guest uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(write(t, tt.yaml))
			if err == nil {
				t.Fatalf("Load accepted it, want refusal containing %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v is not ErrInvalid", err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tt.want)) {
				t.Errorf("error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// toolParams is a configuration with one builtin tool whose parameters are params.
func toolParams(params string) string {
	return base + "tools:\n  - name: t\n    description: d\n    kind: builtin\n    builtin: clock\n    parameters: '" + params + "'\n"
}

// mcpTool is a configuration with one MCP server declaring one tool called name.
func mcpTool(name string) string {
	return base + "mcp:\n  - name: s\n    url: https://mcp.example.com/\n    tools:\n      - name: " + name + "\n        description: d\n        parameters: '{\"type\":\"object\"}'\n"
}

// TestMCPToolNames: every name the MCP specification allows is accepted
// for an MCP tool (the reference server's get-sum among them), and the
// tool budget counts the function name the worker will show.
func TestMCPToolNames(t *testing.T) {
	for _, name := range []string{"get-sum", "get-tiny-image", "trigger-long-running-operation", "files.read", "A_b-C.d", strings.Repeat("x", 128)} {
		c, err := Load(write(t, mcpTool(name)))
		if err != nil {
			t.Errorf("MCP tool %q refused: %v", name, err)
			continue
		}
		if c.MCP[0].Tools[0].Name != name {
			t.Errorf("MCP tool name = %q, want %q", c.MCP[0].Tools[0].Name, name)
		}
	}
	// a.b and a_b on one server get distinct function names: both load.
	y := base + "mcp:\n  - name: s\n    url: https://mcp.example.com/\n    tools:\n" +
		"      - name: a.b\n        description: d\n        parameters: '{\"type\":\"object\"}'\n" +
		"      - name: a_b\n        description: d\n        parameters: '{\"type\":\"object\"}'\n"
	if _, err := Load(write(t, y)); err != nil {
		t.Errorf("a.b and a_b refused: %v", err)
	}
}

// TestMCPFunctionNameClashRefused: two tools of one server whose hashed
// function names collide (found by brute force: 8 hex digits) are refused,
// naming both and the key.
func TestMCPFunctionNameClashRefused(t *testing.T) {
	if raceEnabled {
		// One goroutine, about 2^16 names hashed: several seconds under -race.
		t.Skip("searches about 2^16 names for a collision: runs without -race in make unit's second pass")
	}
	prefix := strings.Repeat("p", 60)
	seen := map[string]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		if i > 1<<20 {
			t.Skip("no collision found in 2^20 names")
		}
		n := fmt.Sprintf("%s%d", prefix, i)
		fn := protocol.MCPFunctionName(0, n)
		if other, ok := seen[fn]; ok {
			a, b = other, n
		}
		seen[fn] = n
	}
	y := base + "mcp:\n  - name: s\n    url: https://mcp.example.com/\n    tools:\n" +
		"      - name: " + a + "\n        description: d\n        parameters: '{\"type\":\"object\"}'\n" +
		"      - name: " + b + "\n        description: d\n        parameters: '{\"type\":\"object\"}'\n"
	_, err := Load(write(t, y))
	if want := fmt.Sprintf("mcp[0].tools: %q and %q get the same model-facing function name", a, b); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Load = %v, want it to contain %s", err, want)
	}
}

// TestSchemaDialects: a declaration copied from a server that names its
// dialect ($schema, as @modelcontextprotocol/server-everything's do) loads,
// for every dialect accepted, and nothing is fetched (the compiler's loader
// refuses every URL, so a load attempt would fail the test).
func TestSchemaDialects(t *testing.T) {
	for _, d := range []string{
		"http://json-schema.org/draft-04/schema#",
		"http://json-schema.org/draft-06/schema#",
		"http://json-schema.org/draft-07/schema#",
		"https://json-schema.org/draft-07/schema",
		"https://json-schema.org/draft/2019-09/schema",
		"https://json-schema.org/draft/2020-12/schema",
		"http://json-schema.org/draft/2020-12/schema#",
	} {
		params := `{"type":"object","properties":{"a":{"type":"number","description":"First number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false,"$schema":"` + d + `"}`
		if err := CompileSchema(params); err != nil {
			t.Errorf("%s: %v", d, err)
		}
		if _, err := Load(write(t, mcpToolParams("get-sum", params))); err != nil {
			t.Errorf("%s: Load = %v", d, err)
		}
	}
}

// mcpToolParams is a configuration with one MCP tool called name with params.
func mcpToolParams(name, params string) string {
	return base + "mcp:\n  - name: s\n    url: https://mcp.example.com/\n    tools:\n      - name: " + name + "\n        description: d\n        parameters: '" + params + "'\n"
}

func bigTools(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString("  - name: t" + string(rune('a'+i)) + "\n    description: " + strings.Repeat("x", 4000) + "\n    kind: builtin\n    builtin: clock\n    parameters: '{\"type\":\"object\"}'\n")
	}
	return b.String()
}

func TestAcceptsGoodTools(t *testing.T) {
	y := base + `tools:
  - name: clock
    description: Read the current UTC time
    kind: builtin
    builtin: clock
    parameters: '{"type":"object","properties":{"fooBar":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}},"additionalProperties":false}'
mcp:
  - name: search
    url: https://mcp.example.com/mcp
    tools:
      - name: lookup
        description: Look up
        parameters: '{"type":"object","properties":{"q":{"type":"string","enum":["$ref"]}}}'
`
	c, err := Load(write(t, y))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Tools[0].Parameters, "fooBar") {
		t.Errorf("parameters lost their case: %s", c.Tools[0].Parameters)
	}
	if c.MCP[0].Session != "auto" {
		t.Errorf("mcp session default = %q, want auto", c.MCP[0].Session)
	}
}

func TestEnvOverride(t *testing.T) {
	t.Setenv("SANDBOX_MODEL_NAME", "from-env")
	t.Setenv("SANDBOX_LIMITS_MEMORYMB", "1024")
	t.Setenv("SANDBOX_TURNDEADLINESECONDS", "30")
	c, err := Load(write(t, base))
	if err != nil {
		t.Fatal(err)
	}
	if c.Model.Name != "from-env" || c.Limits.MemoryMB != 1024 || c.TurnDeadlineSeconds != 30 {
		t.Errorf("env overrides: name=%q memory=%d deadline=%d", c.Model.Name, c.Limits.MemoryMB, c.TurnDeadlineSeconds)
	}
	t.Setenv("SANDBOX_TURNDEADLINESECONDS", "900")
	if _, err := Load(write(t, base)); err == nil || !strings.Contains(err.Error(), "turnDeadlineSeconds") {
		t.Errorf("env override out of range: %v", err)
	}
}

func TestSelectCredential(t *testing.T) {
	y := strings.Replace(base, "default: model", `default: model
  rules:
    - speaker: s1
      credential: by-speaker
    - principal: p1
      credential: by-principal
    - channel: Guild:A
      credential: by-channel`, 1)
	c, err := Load(write(t, y))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ channel, principal, speaker, want string }{
		{"Guild:A", "p1", "s1", "by-channel"},
		{"guild:a", "p1", "s1", "by-principal"}, // channel keys are case-sensitive
		{"other", "", "s1", "by-speaker"},
		{"other", "p2", "s2", "model"},
	}
	for _, tt := range tests {
		if got := c.SelectCredential(tt.channel, tt.principal, tt.speaker); got != tt.want {
			t.Errorf("SelectCredential(%q,%q,%q) = %q, want %q", tt.channel, tt.principal, tt.speaker, got, tt.want)
		}
	}
}

// TestKeysNamedAsWritten: refusals name a key with the operator's spelling
// (viper lowercases what it reads) and its line, compared case-sensitively.
func TestKeysNamedAsWritten(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top-level", base + "turnDeadlineSecs: 30\n", "turnDeadlineSecs: unknown key (line "},
		{"unknown nested under a differently cased section", base + "Limits:\n  MemoryGB: 1\n", "Limits.MemoryGB: unknown key (line "},
		{"unknown in a list", base + "tools:\n  - Name: t\n    ShellCommand: x\n", "tools[0].ShellCommand: unknown key (line "},
		{"bad value of a known key", base + "Limits:\n  MemoryMB: lots\n", "Limits.MemoryMB (line "},
		{"bad value in a list", base + "tools:\n  - name: t\n    TimeoutSeconds: soon\n", "tools[0].TimeoutSeconds (line "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(write(t, tt.yaml))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
	// Two unknown keys: both named, each with its own line.
	_, err := Load(write(t, base+"fooBar: 1\nbazQux: 2\n"))
	n := strings.Count(base, "\n")
	for _, want := range []string{fmt.Sprintf("fooBar: unknown key (line %d)", n+1), fmt.Sprintf("bazQux: unknown key (line %d)", n+2)} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v\nwant it to contain %q", err, want)
		}
	}
	// An environment override has no line: the decoder's spelling stays.
	t.Setenv("SANDBOX_LIMITS_PIDS", "many")
	if _, err := Load(write(t, base)); err == nil || !strings.Contains(err.Error(), "limits.pids") {
		t.Errorf("env override error = %v", err)
	}
}
