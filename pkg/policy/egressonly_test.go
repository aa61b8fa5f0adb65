package policy

import (
	"errors"
	"testing"
)

// TestEgressOnlyValidate: an egressOnly policy needs its grant and may
// carry no model, tool or MCP server (so no credential); a valid one
// names no credential at all.
func TestEgressOnlyValidate(t *testing.T) {
	g := DefaultEgress()
	base := func() Policy {
		return Policy{Version: Version, TurnID: "0123456789abcdef0123456789abcdef",
			Identity:       Identity{Channel: "run-0123456789abcdef0123456789abcdef", ChannelTag: "run-0123456789abcdef0123456789abcdef"},
			DeadlineUnixMs: 1, Limits: DefaultLimits(), Egress: &g, EgressOnly: true, EgressAllow: []string{"127.0.0.1:8080"}}
	}
	p := base()
	if err := p.Validate(); err != nil {
		t.Fatalf("valid egressOnly policy refused: %v", err)
	}
	if n := p.CredentialNames(); len(n) != 0 {
		t.Errorf("credentials %v, want none", n)
	}
	for name, mutate := range map[string]func(*Policy){
		"no grant":   func(p *Policy) { p.Egress = nil },
		"model":      func(p *Policy) { p.Model = Model{Name: "m", Credential: "k"} },
		"tool":       func(p *Policy) { p.Tools = []Tool{{Name: "clock", Kind: KindBuiltin, Builtin: "clock"}} },
		"mcp":        func(p *Policy) { p.MCP = []MCPServer{{Name: "x"}} },
		"bad limits": func(p *Policy) { p.Limits.MaxCalls = 0 },
	} {
		p := base()
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
