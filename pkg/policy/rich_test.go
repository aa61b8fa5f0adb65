package policy

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

func richPolicy() Policy {
	return Policy{Version: Version, TurnID: "0123456789abcdef0123456789abcdef",
		Identity:       Identity{Channel: "chan", ChannelTag: ids.ChannelTag("chan")},
		DeadlineUnixMs: 2_000_000_000_000, Limits: DefaultLimits(),
		MCP: []MCPServer{{Name: "docs", URL: "https://mcp.example", Session: SessionAuto, Tools: []string{"search"}}},
		Rich: &Rich{URL: "https://api.anthropic.com", Model: "claude-x", MaxOutputTokens: DefaultRichOutputTokens,
			Thinking: "high", Credential: "anthropic", CredentialKind: CredentialOAuth, MaxCalls: DefaultRichMaxCalls,
			Compactor: &Compactor{Kind: CompactorHTTP, URL: "https://compact.example", Credential: "jev", Engine: "jev"}}}
}

// TestRichValidate: a rich policy carries its section and no /model route
// or egress; every field of the section is bounded.
func TestRichValidate(t *testing.T) {
	p := richPolicy()
	if err := p.Validate(); err != nil {
		t.Fatalf("valid rich policy refused: %v", err)
	}
	// The broker fetches attachments through the operator's egress.allow.
	withAllow := richPolicy()
	withAllow.EgressAllow = []string{"127.0.0.1:8080"}
	if err := withAllow.Validate(); err != nil {
		t.Errorf("rich policy with egressAllow refused: %v", err)
	}
	if got, want := p.CredentialNames(), []string{"anthropic", "jev"}; !slices.Equal(got, want) {
		t.Errorf("credentials %v, want %v", got, want)
	}
	for name, mutate := range map[string]func(*Policy){
		"model route":        func(p *Policy) { p.Model = Model{Name: "m", Credential: "k"} },
		"egress":             func(p *Policy) { g := DefaultEgress(); p.Egress = &g },
		"egressOnly":         func(p *Policy) { p.EgressOnly = true },
		"precheck":           func(p *Policy) { p.Precheck = true },
		"egressAllow bad":    func(p *Policy) { p.EgressAllow = []string{"not-an-address"} },
		"http url":           func(p *Policy) { p.Rich.URL = "http://api.anthropic.com" },
		"http non-loopback":  func(p *Policy) { p.Rich.URL = "http://10.0.0.1"; p.Rich.AllowHTTP = true },
		"no model":           func(p *Policy) { p.Rich.Model = "" },
		"tokens low":         func(p *Policy) { p.Rich.MaxOutputTokens = 1024 },
		"tokens high":        func(p *Policy) { p.Rich.MaxOutputTokens = 200_001 },
		"thinking":           func(p *Policy) { p.Rich.Thinking = "max" },
		"credential":         func(p *Policy) { p.Rich.Credential = "../x" },
		"credential kind":    func(p *Policy) { p.Rich.CredentialKind = "bearer" },
		"calls zero":         func(p *Policy) { p.Rich.MaxCalls = 0 },
		"calls high":         func(p *Policy) { p.Rich.MaxCalls = 1001 },
		"compactor kind":     func(p *Policy) { p.Rich.Compactor.Kind = "grpc" },
		"compactor argv":     func(p *Policy) { p.Rich.Compactor.Argv = []string{"/bin/x"} },
		"compactor exec rel": func(p *Policy) { p.Rich.Compactor = &Compactor{Kind: CompactorExec, Argv: []string{"x"}, Engine: "e"} },
		"compactor exec url": func(p *Policy) {
			p.Rich.Compactor = &Compactor{Kind: CompactorExec, Argv: []string{"/x"}, URL: "https://a", Engine: "e"}
		},
		"compactor timeout":  func(p *Policy) { p.Rich.Compactor.TimeoutSeconds = 301 },
		"compactor size":     func(p *Policy) { p.Rich.Compactor.MaxRequestBytes = MaxCompactorRequestSize + 1 },
		"compactor engine":   func(p *Policy) { p.Rich.Compactor.Engine = "" },
		"compactor engine 2": func(p *Policy) { p.Rich.Compactor.Engine = "a b" },
		"bad tool":           func(p *Policy) { p.Tools = []Tool{{Name: "x", Kind: "nope"}} },
		"bad mcp":            func(p *Policy) { p.MCP[0].Tools = nil },
		"bad limits":         func(p *Policy) { p.Limits.MaxCalls = 0 },
	} {
		p := richPolicy()
		mutate(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestCompactorTimeout(t *testing.T) {
	c := Compactor{}
	for _, tc := range []struct {
		set        int
		turn, want time.Duration
	}{{0, 600 * time.Second, 120 * time.Second}, {0, 90 * time.Second, 30 * time.Second}, {200, 600 * time.Second, 200 * time.Second}} {
		c.TimeoutSeconds = tc.set
		if got := c.Timeout(tc.turn); got != tc.want {
			t.Errorf("Timeout(%d, %v) = %v, want %v", tc.set, tc.turn, got, tc.want)
		}
	}
}

// TestBindValidate: a bind names the policy's channel, a valid turn, a
// thinking level within the ceiling and a deadline within the session's.
func TestBindValidate(t *testing.T) {
	p := richPolicy()
	base := func() Bind {
		return Bind{Turn: richproto.Turn{ID: "fedcba9876543210fedcba9876543210", Text: "hi", Speaker: richproto.Speaker{ID: "u1"},
			Thinking: "medium", DeadlineUnixMs: 1_900_000_000_000},
			Identity: Identity{Channel: "chan", ChannelTag: ids.ChannelTag("chan"), SpeakerID: "u1"}}
	}
	b := base()
	if err := b.Validate(&p); err != nil {
		t.Fatalf("valid bind refused: %v", err)
	}
	for name, mutate := range map[string]func(*Bind){
		"other channel":  func(b *Bind) { b.Identity.Channel = "other"; b.Identity.ChannelTag = ids.ChannelTag("other") },
		"bad turn":       func(b *Bind) { b.Turn.ID = "x" },
		"above ceiling":  func(b *Bind) { b.Turn.Thinking = "xhigh" },
		"past session":   func(b *Bind) { b.Turn.DeadlineUnixMs = p.DeadlineUnixMs + 1 },
		"long principal": func(b *Bind) { b.Identity.PrincipalID = string(make([]rune, 300)) },
	} {
		b := base()
		mutate(&b)
		if err := b.Validate(&p); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	np := p
	np.Rich = nil
	if err := b.Validate(&np); !errors.Is(err, ErrInvalid) {
		t.Errorf("bind on a non-rich policy: %v", err)
	}
}
