package config

import (
	"strings"
	"testing"
)

const precheckMCP = base + `mcp:
  - name: search
    url: https://mcp.example.com/mcp
    tools:
      - name: lookup
        description: Look up a term
        parameters: '{"type":"object"}'
      - name: other
        description: Another tool
        parameters: '{"type":"object"}'
`

// TestPrecheckDefaults: the seed's bounds, off by default, no grants.
func TestPrecheckDefaults(t *testing.T) {
	p := validBase(t).Prechecks
	if p.Enabled || len(p.Grants) != 0 || p.MemoryMB != 256 || p.CPUs != 1 || p.Pids != 32 || p.TmpfsMB != 64 ||
		p.TimeoutSeconds != 60 || p.MaxCalls != 16 || p.MaxNoteChars != 1000 || p.MaxContextChars != 16000 {
		t.Errorf("defaults %+v", p)
	}
}

// TestPrechecksFromYAML: grants load as written and match by channel or
// "*"; every refusal names its key as written.
func TestPrechecksFromYAML(t *testing.T) {
	ok := precheckMCP + "prechecks:\n  enabled: true\n  timeoutSeconds: 30\n  grants:\n    - channel: \"*\"\n      server: search\n      tools: [lookup]\n    - channel: room-1\n      server: search\n      tools: [other]\n"
	c, err := Load(write(t, ok))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Prechecks
	if !p.Enabled || p.TimeoutSeconds != 30 || len(p.Grants) != 2 {
		t.Fatalf("loaded %+v", p)
	}
	for _, tc := range []struct {
		channel, server, tool string
		want                  bool
	}{
		{"any", "search", "lookup", true}, {"room-1", "search", "other", true}, {"room-2", "search", "other", false},
		{"room-1", "other", "lookup", false}, {"room-1", "search", "missing", false},
	} {
		if got := p.PrecheckAllows(tc.channel, tc.server, tc.tool); got != tc.want {
			t.Errorf("PrecheckAllows(%s, %s, %s) = %v, want %v", tc.channel, tc.server, tc.tool, got, tc.want)
		}
	}
	cases := []struct{ name, body, want string }{
		{"unknown key", precheckMCP + "prechecks:\n  maxRuns: 3\n", "prechecks.maxRuns: unknown key"},
		{"unknown grant key", precheckMCP + "prechecks:\n  grants:\n    - channel: a\n      server: search\n      tools: [lookup]\n      tier: 2\n", "prechecks.grants[0].tier: unknown key"},
		{"undeclared server", precheckMCP + "prechecks:\n  grants:\n    - channel: a\n      server: web\n      tools: [lookup]\n", `prechecks.grants[0].server: "web" must name a server declared under mcp`},
		{"undeclared tool", precheckMCP + "prechecks:\n  grants:\n    - channel: a\n      server: search\n      tools: [lookup, nope]\n", `prechecks.grants[0].tools[1]: "nope" is not a tool declared for mcp server "search"`},
		{"no tools", precheckMCP + "prechecks:\n  grants:\n    - channel: a\n      server: search\n      tools: []\n", "prechecks.grants[0].tools: must list 1 to"},
		{"bad channel", precheckMCP + "prechecks:\n  grants:\n    - channel: \"\"\n      server: search\n      tools: [lookup]\n", "prechecks.grants[0].channel: must be a channel key"},
		{"timeout 0", base + "prechecks:\n  timeoutSeconds: 0\n", "prechecks.timeoutSeconds: must be 2 to 600, got 0"},
		{"timeout 601", base + "prechecks:\n  timeoutSeconds: 601\n", "prechecks.timeoutSeconds: must be 2 to 600, got 601"},
		{"memory", base + "prechecks:\n  memoryMb: 32\n", "prechecks.memoryMb: must be 64 to 65536, got 32"},
		{"pids", base + "prechecks:\n  pids: 4\n", "prechecks.pids: must be 8 to 4096, got 4"},
		{"cpus", base + "prechecks:\n  cpus: 0\n", "prechecks.cpus: must be 0.01 to 64"},
		{"tmpfs over memory", base + "prechecks:\n  tmpfsMb: 256\n", "prechecks.tmpfsMb: must stay below prechecks.memoryMb"},
		{"calls", base + "prechecks:\n  maxCalls: 257\n", "prechecks.maxCalls: must be 0 to 256, got 257"},
		{"note", base + "prechecks:\n  maxNoteChars: 0\n", "prechecks.maxNoteChars: must be 1 to 16000, got 0"},
		{"context", base + "prechecks:\n  maxContextChars: 256001\n", "prechecks.maxContextChars: must be 1 to 256000, got 256001"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(write(t, tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}
