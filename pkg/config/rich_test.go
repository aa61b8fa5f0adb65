package config

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

const richTools = base + `tools:
  - name: clock
    description: The time
    parameters: '{"type":"object"}'
    kind: builtin
    builtin: clock
mcp:
  - name: search
    url: https://mcp.example.com/mcp
    tools:
      - name: lookup
        description: Look up a term
        parameters: '{"type":"object"}'
`

// TestRichDefaults: the seed's rich bounds, off, no profiles.
func TestRichDefaults(t *testing.T) {
	c := validBase(t)
	r := c.Rich
	if r.Enabled || r.AnthropicURL != "https://api.anthropic.com" || r.IdleSeconds != 900 || r.StartTimeoutSeconds != 90 ||
		r.TurnTimeoutSeconds != 600 || r.MemoryMB != 1536 || r.CPUs != 1 || r.Pids != 256 || r.TmpfsMB != 512 ||
		r.MaxCalls != 128 || r.Compaction.Kind != "" || len(c.Profiles) != 0 {
		t.Errorf("defaults %+v profiles %v", r, c.Profiles)
	}
}

// TestRichFromYAML: profiles load with their element defaults and turn
// into a valid policy section; every refusal names its key as written.
func TestRichFromYAML(t *testing.T) {
	ok := richTools + `rich:
  enabled: true
  idleSeconds: 60
  compaction:
    kind: http
    url: https://compact.example.com/
    engine: jev
    timeoutSeconds: 100
profiles:
  - name: assistant
    model: claude-sonnet-4-5
    tools: [clock]
    mcp: [search]
    credential: anthropic
    credentialKind: oauth
  - name: plain
    model: claude-haiku
    thinking: "off"
`
	c, err := Load(write(t, ok))
	if err != nil {
		t.Fatal(err)
	}
	p, found := c.Profile("assistant")
	if !found || p.MaxOutputTokens != 128_000 || p.Thinking != "medium" || p.CredentialKind != "oauth" {
		t.Fatalf("assistant %+v", p)
	}
	r := c.RichPolicy(p, "room")
	if err := r.Validate(); err != nil {
		t.Errorf("RichPolicy does not validate: %v", err)
	}
	if r.Credential != "anthropic" || r.Compactor == nil || r.Compactor.Engine != "jev" || r.MaxCalls != 128 {
		t.Errorf("policy section %+v", r)
	}
	plain, _ := c.Profile("plain")
	if got := c.RichPolicy(plain, "room"); got.Credential != "model" || got.CredentialKind != policy.CredentialAPIKey || got.Compactor == nil {
		t.Errorf("plain: credential %q kind %q (want the credentials.default and apiKey)", got.Credential, got.CredentialKind)
	}
	if c.RichIdle().Seconds() != 60 {
		t.Errorf("idle %v", c.RichIdle())
	}
	prof := func(extra string) string {
		return richTools + "profiles:\n  - name: a\n    model: m\n" + extra
	}
	cases := []struct{ name, body, want string }{
		{"unknown rich key", base + "rich:\n  idleSecs: 3\n", "rich.idleSecs: unknown key"},
		{"unknown profile key", prof("    temperature: 1\n"), "profiles[0].temperature: unknown key"},
		{"unknown compaction key", base + "rich:\n  compaction:\n    command: x\n", "rich.compaction.command: unknown key"},
		{"http url", base + "rich:\n  anthropicUrl: http://api.anthropic.com\n", "rich.anthropicUrl: must use https"},
		{"http non loopback", base + "rich:\n  anthropicUrl: http://10.0.0.1\n  allowInsecureLoopbackHTTP: true\n", "rich.anthropicUrl: plain http is allowed only to a loopback host"},
		{"idle", base + "rich:\n  idleSeconds: 5\n", "rich.idleSeconds: must be 10 to 86400, got 5"},
		{"start", base + "rich:\n  startTimeoutSeconds: 0\n", "rich.startTimeoutSeconds: must be 1 to 600, got 0"},
		{"turn 0", base + "rich:\n  turnTimeoutSeconds: 0\n", "rich.turnTimeoutSeconds: must be 1 to 600, got 0"},
		{"turn 601", base + "rich:\n  turnTimeoutSeconds: 601\n", "rich.turnTimeoutSeconds: must be 1 to 600, got 601"},
		{"memory", base + "rich:\n  memoryMb: 100\n", "rich.memoryMb: must be 256 to 65536, got 100"},
		{"cpus", base + "rich:\n  cpus: 0\n", "rich.cpus: must be 0.01 to 64"},
		{"pids", base + "rich:\n  pids: 5000\n", "rich.pids: must be 8 to 4096, got 5000"},
		{"tmpfs", base + "rich:\n  tmpfsMb: 2000\n", "rich.tmpfsMb: must be 1 to 4096 and below rich.memoryMb"},
		{"calls", base + "rich:\n  maxCalls: 1001\n", "rich.maxCalls: must be 1 to 1000, got 1001"},
		{"reply budget below a packet", base + "rich:\n  replyBudgetBytes: 75497471\n", "rich.replyBudgetBytes: must be one reply packet at its bound (75497472) to 274877906944, got 75497471"},
		{"reply budget over", base + "rich:\n  replyBudgetBytes: 274877906945\n", "rich.replyBudgetBytes: must be one reply packet"},
		{"compaction kind", base + "rich:\n  compaction:\n    kind: grpc\n", "rich.compaction.kind: must be empty (no compactor), exec or http"},
		{"compaction no kind", base + "rich:\n  compaction:\n    url: https://x\n", "rich.compaction.kind: must be exec or http when"},
		{"compaction exec relative", base + "rich:\n  compaction:\n    kind: exec\n    argv: [compact]\n    engine: e\n", "rich.compaction.argv: argv[0] must be an absolute path"},
		{"compaction exec url", base + "rich:\n  compaction:\n    kind: exec\n    argv: [/bin/c]\n    url: https://x\n    engine: e\n", "rich.compaction: an exec compactor takes no url"},
		{"compaction engine", base + "rich:\n  compaction:\n    kind: exec\n    argv: [/bin/c]\n", "rich.compaction.engine:"},
		{"compaction timeout", base + "rich:\n  turnTimeoutSeconds: 100\n  compaction:\n    kind: exec\n    argv: [/bin/c]\n    engine: e\n    timeoutSeconds: 60\n", "rich.compaction.timeoutSeconds: must be 0"},
		{"compaction size", base + "rich:\n  compaction:\n    kind: exec\n    argv: [/bin/c]\n    engine: e\n    maxRequestBytes: 200000000\n", "rich.compaction.maxRequestBytes: must be 0"},
		{"enabled without profiles", base + "rich:\n  enabled: true\n", "profiles: rich.enabled needs at least one profile"},
		{"profile name", richTools + "profiles:\n  - name: \"a b\"\n    model: m\n", "profiles[0].name:"},
		{"profile dup", prof("  - name: a\n    model: m\n"), `profiles[1].name: "a" is not unique`},
		{"profile model", richTools + "profiles:\n  - name: a\n", "profiles[0].model: must be 1 to"},
		{"tokens low", prof("    maxOutputTokens: 1024\n"), "profiles[0].maxOutputTokens: must be 1025 to 200000, got 1024"},
		{"tokens high", prof("    maxOutputTokens: 200001\n"), "profiles[0].maxOutputTokens: must be 1025 to 200000, got 200001"},
		{"thinking", prof("    thinking: max\n"), "profiles[0].thinking: must be one of"},
		{"credential", prof("    credential: ../k\n"), "profiles[0].credential: must name a credential file"},
		{"credential kind", prof("    credentialKind: bearer\n"), `profiles[0].credentialKind: must be apiKey or oauth, got "bearer"`},
		{"unknown mcp", prof("    mcp: [web]\n"), `profiles[0].mcp[0]: "web" must name an entry of mcp`},
		{"mcp twice", prof("    mcp: [search, search]\n"), `profiles[0].mcp[1]: "search" must name an entry of mcp, once`},
		{"unknown tool", prof("    tools: [clock, shell]\n"), `profiles[0].tools[1]: "shell" must name an entry of tools`},
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
