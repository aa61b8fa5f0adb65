package config

import (
	"strings"
	"testing"
)

// TestDelegationDefaults: the seed's limits, off by default.
func TestDelegationDefaults(t *testing.T) {
	d := validBase(t).Delegation
	want := Delegation{Enabled: false, MaxRunning: 2, TimeoutSeconds: 600, MaxTitleChars: 200, MaxTaskChars: 4000,
		MaxReportChars: 80000, DiagnosticChars: 600, Prompt: DefaultResearchPrompt}
	if d != want {
		t.Errorf("defaults\n got %+v\nwant %+v", d, want)
	}
}

// TestDelegationFromYAML: an enabled section naming a fetch and a search
// tool loads; each bound and name rule refuses with its key as written.
func TestDelegationFromYAML(t *testing.T) {
	tools := fetchTool("  - name: search\n    description: Web search\n    kind: exec\n    argv: [/usr/bin/search]\n    parameters: '{\"type\":\"object\"}'\n")
	ok := tools + "delegation:\n  enabled: true\n  maxRunning: 3\n  timeoutSeconds: 30\n  fetchTool: fetch\n  searchTool: search\n  prompt: Research.\n"
	c, err := Load(write(t, ok))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Delegation; !d.Enabled || d.MaxRunning != 3 || d.TimeoutSeconds != 30 || d.FetchTool != "fetch" || d.SearchTool != "search" || d.Prompt != "Research." {
		t.Errorf("loaded %+v", d)
	}
	cases := []struct {
		name, body, want string
	}{
		{"unknown key", tools + "delegation:\n  enabled: true\n  fetchTool: fetch\n  maxJobs: 3\n", "delegation.maxJobs: unknown key"},
		{"fetch required", tools + "delegation:\n  enabled: true\n", "delegation.fetchTool: is required when delegation.enabled is true"},
		{"fetch not a fetch tool", tools + "delegation:\n  fetchTool: search\n", `delegation.fetchTool: "search" must name a tool of kind fetch`},
		{"fetch undeclared", tools + "delegation:\n  fetchTool: web\n", `delegation.fetchTool: "web" must name a tool of kind fetch`},
		{"search undeclared", tools + "delegation:\n  fetchTool: fetch\n  searchTool: google\n", `delegation.searchTool: "google" must name a tool declared under tools`},
		{"search is fetch", tools + "delegation:\n  fetchTool: fetch\n  searchTool: fetch\n", `delegation.searchTool: "fetch" is delegation.fetchTool`},
		{"maxRunning 0", tools + "delegation:\n  maxRunning: 0\n", "delegation.maxRunning: must be 1 to 10, got 0"},
		{"maxRunning 11", tools + "delegation:\n  maxRunning: 11\n", "delegation.maxRunning: must be 1 to 10, got 11"},
		{"timeout 0", tools + "delegation:\n  timeoutSeconds: 0\n", "delegation.timeoutSeconds: must be 1 to 1200, got 0"},
		{"timeout 1201", tools + "delegation:\n  timeoutSeconds: 1201\n", "delegation.timeoutSeconds: must be 1 to 1200, got 1201"},
		{"title 0", tools + "delegation:\n  maxTitleChars: 0\n", "delegation.maxTitleChars: must be 1 to 1000"},
		{"task over", tools + "delegation:\n  maxTaskChars: 30001\n", "delegation.maxTaskChars: must be 1 to 30000"},
		{"report 0", tools + "delegation:\n  maxReportChars: 0\n", "delegation.maxReportChars: must be 1 to 1000000"},
		{"diagnostic 0", tools + "delegation:\n  diagnosticChars: 0\n", "delegation.diagnosticChars: must be 1 to 4000"},
		{"empty prompt", tools + "delegation:\n  prompt: \"\"\n", "delegation.prompt: must be valid UTF-8 of 1 to"},
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
