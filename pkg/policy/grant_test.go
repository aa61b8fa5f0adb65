package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func grantsPolicy() Policy {
	return Policy{Version: Version, TurnID: "0123456789abcdef0123456789abcdef",
		Identity:       Identity{Channel: "session-0123456789abcdef", ChannelTag: "session-0123456789abcdef"},
		DeadlineUnixMs: 1, Limits: DefaultLimits(), Grants: &Grants{Credentials: []string{"gh-token"}}}
}

func validGrant() Grant {
	g := Grant{Exec: "exec-1", Revision: 1, DeadlineUnixMs: 1, Egress: DefaultEgress()}
	g.Egress.Credentials = []EgressCredential{{Name: "github", Host: "api.github.com", Port: 443, Credential: "gh-token",
		Header: "Authorization", Format: FormatBearer}}
	return g
}

// TestGrantsPolicyValidate: a session broker's policy has the proxy route
// under grants and nothing else; its credential names are what credset
// copies.
func TestGrantsPolicyValidate(t *testing.T) {
	p := grantsPolicy()
	p.Identity.ChannelTag = p.Identity.Channel
	if err := p.Validate(); err != nil {
		t.Fatalf("valid grants policy refused: %v", err)
	}
	if got := p.CredentialNames(); !slices.Equal(got, []string{"gh-token"}) {
		t.Errorf("credential names %v, want [gh-token]", got)
	}
	g := DefaultEgress()
	for name, mutate := range map[string]func(*Policy){
		"standing egress": func(p *Policy) { p.Egress = &g },
		"egressOnly":      func(p *Policy) { p.EgressOnly = true },
		"model":           func(p *Policy) { p.Model = Model{Name: "m", Credential: "k"} },
		"tool":            func(p *Policy) { p.Tools = []Tool{{Name: "clock", Kind: KindBuiltin, Builtin: "clock"}} },
		"mcp":             func(p *Policy) { p.MCP = []MCPServer{{Name: "x"}} },
		"rich":            func(p *Policy) { p.Rich = &Rich{} },
		"duplicate cred":  func(p *Policy) { p.Grants.Credentials = []string{"a", "a"} },
		"bad cred name":   func(p *Policy) { p.Grants.Credentials = []string{"../x"} },
		"bad limits":      func(p *Policy) { p.Limits.MaxCalls = 0 },
		"too many creds": func(p *Policy) {
			p.Grants.Credentials = nil
			for i := range MaxEgressCredentials + 1 {
				p.Grants.Credentials = append(p.Grants.Credentials, "c"+strings.Repeat("x", i))
			}
		},
	} {
		p := grantsPolicy()
		p.Identity.ChannelTag = p.Identity.Channel
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestGrantValidate: a grant names a valid exec, a positive revision, a
// deadline, bounds within the policy's limits, and only credentials the
// session broker may hold.
func TestGrantValidate(t *testing.T) {
	p := grantsPolicy()
	if err := validGrant().Validate(&p); err != nil {
		t.Fatalf("valid grant refused: %v", err)
	}
	for name, mutate := range map[string]func(*Grant){
		"no exec":         func(g *Grant) { g.Exec = "" },
		"exec too long":   func(g *Grant) { g.Exec = strings.Repeat("a", MaxExecIDBytes+1) },
		"exec with slash": func(g *Grant) { g.Exec = "a/b" },
		"exec with space": func(g *Grant) { g.Exec = "a b" },
		"zero revision":   func(g *Grant) { g.Revision = 0 },
		"no deadline":     func(g *Grant) { g.DeadlineUnixMs = 0 },
		"no bounds":       func(g *Grant) { g.Egress.MaxConnections = 0 },
		"over limits":     func(g *Grant) { g.Egress.MaxConnections = p.Limits.MaxConnections },
		"unlisted cred":   func(g *Grant) { g.Egress.Credentials[0].Credential = "other" },
		"invalid cred":    func(g *Grant) { g.Egress.Credentials[0].Header = "Cookie" },
	} {
		g := validGrant()
		mutate(&g)
		if err := g.Validate(&p); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	other := p
	other.Grants = nil
	if err := validGrant().Validate(&other); !errors.Is(err, ErrInvalid) {
		t.Errorf("a grant against a policy without grants: %v, want ErrInvalid", err)
	}
	if !ValidExecID(strings.Repeat("A", MaxExecIDBytes)) || ValidExecID("é") {
		t.Error("ValidExecID: the 64-byte bound or the ASCII alphabet is wrong")
	}
}
