package broker

import (
	"net/http"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// TestPrecheckPolicy: a precheck's broker calls the granted MCP tools and
// refuses the model route, host tools, other servers and other tools; no
// upstream but the MCP server is reached.
func TestPrecheckPolicy(t *testing.T) {
	h := newHarness(t, func(p *policy.Policy) {
		p.Precheck = true
		p.Model = policy.Model{}
		p.Tools = nil
	})
	code, body, _ := h.do("/mcp/docs", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"x"}}}`)
	if code != http.StatusOK || !strings.Contains(body, `"found"`) {
		t.Fatalf("granted tool: %d %s", code, body)
	}
	for _, c := range []struct{ route, body string }{
		{"/model", `{"messages":[{"role":"user","content":"hi"}]}`},
		{"/tools/clock", `{}`},
		{"/mcp/other", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search"}}`},
	} {
		if code, body := h.raw("POST", rawPost(c.route, c.body, nil)); code != http.StatusNotFound {
			t.Errorf("POST %s: %d %s, want 404", c.route, code, body)
		}
	}
	if code, _, _ := h.do("/mcp/docs", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"secret"}}`); code < 400 || code >= 500 {
		t.Errorf("tool not granted: %d, want a refusal", code)
	}
	if n := h.model.hits.Load() + h.web.hits.Load(); n != 0 {
		t.Errorf("model or tool upstream reached %d times", n)
	}
	if n := h.mcp.calls.Load(); n != 1 {
		t.Errorf("MCP upstream reached %d times, want 1", n)
	}
}

// TestPrecheckPolicyValidate: a precheck policy carries MCP servers only.
func TestPrecheckPolicyValidate(t *testing.T) {
	for name, mutate := range map[string]func(*policy.Policy){
		"model": func(p *policy.Policy) { p.Tools = nil },
		"tools": func(p *policy.Policy) { p.Model = policy.Model{} },
		"egress": func(p *policy.Policy) {
			p.Model, p.Tools = policy.Model{}, nil
			g := policy.DefaultEgress()
			p.Egress = &g
		},
		"egressAllow": func(p *policy.Policy) {
			p.Model, p.Tools = policy.Model{}, nil
			p.EgressAllow = []string{"10.0.0.1:80"}
		},
	} {
		p := basePolicy("https://m.example/v1", "https://w.example/hook", "/bin/true")
		p.Precheck = true
		mutate(p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "a precheck policy has MCP servers only") {
			t.Errorf("%s: got %v", name, err)
		}
	}
	p := basePolicy("https://m.example/v1", "https://w.example/hook", "/bin/true")
	p.Precheck, p.Model, p.Tools, p.MCP = true, policy.Model{}, nil, nil
	if err := p.Validate(); err != nil {
		t.Errorf("a precheck with no grant: %v", err)
	}
	if names := p.CredentialNames(); len(names) != 0 {
		t.Errorf("credentials %v", names)
	}
}
