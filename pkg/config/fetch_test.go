package config

import (
	"errors"
	"strings"
	"testing"
)

const fetchParams = `'{"type":"object","properties":{"url":{"type":"string","description":"http or https URL"}},"required":["url"],"additionalProperties":false}'`

func fetchTool(extra string) string {
	return base + "tools:\n  - name: fetch\n    description: Fetch a public web page as text\n    kind: fetch\n    parameters: " + fetchParams + "\n" + extra
}

func TestFetchToolAccepted(t *testing.T) {
	c, err := Load(write(t, fetchTool("    timeoutSeconds: 30\n    maxBytes: 1048576\n    maxTextBytes: 8192\negress:\n  allow: [\"10.0.0.5:3142\", \"[fd00::5]:443\"]\n")))
	if err != nil {
		t.Fatal(err)
	}
	tl := c.Tools[0]
	if tl.Kind != "fetch" || tl.TimeoutSeconds != 30 || tl.MaxBytes != 1<<20 || tl.MaxTextBytes != 8192 {
		t.Errorf("fetch tool %+v", tl)
	}
	if got := c.Egress.Allow; len(got) != 2 || got[1] != "[fd00::5]:443" {
		t.Errorf("egress.allow = %v", got)
	}
	d, err := Load(write(t, base))
	if err != nil || len(d.Egress.Allow) != 0 {
		t.Errorf("egress.allow default = %v, %v; want empty", d.Egress.Allow, err)
	}
}

func TestFetchToolRefusals(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"url", fetchTool("    url: https://example.com/\n"), "tools[0]: a fetch tool takes no argv, url"},
		{"argv", fetchTool("    argv: [/bin/true]\n"), "tools[0]: a fetch tool takes no argv"},
		{"credential", fetchTool("    credential: web\n"), "tools[0]: a fetch tool takes no"},
		{"builtin", fetchTool("    builtin: clock\n"), "tools[0]: a fetch tool takes no"},
		{"insecure http", fetchTool("    allowInsecureLoopbackHTTP: true\n"), "tools[0]: a fetch tool takes no"},
		{"timeout over 120", fetchTool("    timeoutSeconds: 121\n"), "tools[0].timeoutSeconds: must be 0 (60 s) to 120"},
		{"maxBytes over 32 MiB", fetchTool("    maxBytes: 33554433\n"), "tools[0].maxBytes: must be 0"},
		{"maxBytes negative", fetchTool("    maxBytes: -1\n"), "tools[0].maxBytes"},
		{"maxTextBytes over", fetchTool("    maxTextBytes: 262145\n"), "tools[0].maxTextBytes: must be 0"},
		{"maxTextBytes negative", fetchTool("    maxTextBytes: -5\n"), "tools[0].maxTextBytes"},
		{"params without url", strings.Replace(fetchTool(""), fetchParams, `'{"type":"object","properties":{"q":{"type":"string"}}}'`, 1), `tools[0].parameters: a fetch tool's parameters must require a string property "url"`},
		{"url not required", strings.Replace(fetchTool(""), `,"required":["url"]`, "", 1), "tools[0].parameters"},
		{"url not a string", strings.Replace(fetchTool(""), `"url":{"type":"string"`, `"url":{"type":"number"`, 1), "tools[0].parameters"},
		{"maxBytes on an exec tool", base + "tools:\n  - name: e\n    description: d\n    kind: exec\n    argv: [/bin/true]\n    parameters: '{\"type\":\"object\"}'\n    maxBytes: 10\n", "tools[0]: maxBytes and maxTextBytes are for fetch tools"},
		{"unknown kind", strings.Replace(fetchTool(""), "kind: fetch", "kind: fetchy", 1), "tools[0].kind: must be builtin, exec, http or fetch"},
		{"allow without port", fetchTool("egress:\n  allow: [\"10.0.0.5\"]\n"), "egress.allow[0]"},
		{"allow port zero", fetchTool("egress:\n  allow: [\"10.0.0.5:0\"]\n"), "egress.allow[0]"},
		{"allow a name", fetchTool("egress:\n  allow: [\"mirror.lan:80\"]\n"), "egress.allow[0]"},
		{"allow unspecified", fetchTool("egress:\n  allow: [\"0.0.0.0:80\"]\n"), "egress.allow[0]"},
		{"allow metadata", fetchTool("egress:\n  allow: [\"10.0.0.5:80\", \"169.254.169.254:80\"]\n"), "egress.allow[1]"},
		{"allow multicast", fetchTool("egress:\n  allow: [\"[ff02::1]:80\"]\n"), "egress.allow[0]"},
		{"allow non-canonical", fetchTool("egress:\n  allow: [\"[fd00:0::5]:443\"]\n"), "egress.allow[0]"},
		{"allow a CIDR", fetchTool("egress:\n  allow: [\"10.0.0.0/8\"]\n"), "egress.allow[0]"},
		{"egress unknown key", fetchTool("egress:\n  deny: []\n"), "egress.deny: unknown key"},
	}
	for _, tc := range cases {
		_, err := Load(write(t, tc.yaml))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
