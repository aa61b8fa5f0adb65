package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

func sample() *Policy {
	return &Policy{
		Version:        Version,
		TurnID:         ids.NewTurnID(),
		Identity:       Identity{Channel: "guild:1", ChannelTag: "guild:1", SpeakerID: "u1", SpeakerName: "Ann", PrincipalID: "p1"},
		DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
		Model:          Model{URL: "https://api.example.com/v1/chat/completions", Name: "m", MaxTokens: 4096, Credential: "openai"},
		Tools:          []Tool{{Name: "clock", Kind: KindBuiltin, Builtin: "clock"}, {Name: "lookup", Kind: KindExec, Argv: []string{"/usr/bin/true"}}},
		MCP:            []MCPServer{{Name: "docs", URL: "https://mcp.example.com/mcp", Session: SessionAuto, Tools: []string{"search"}}},
		Limits:         DefaultLimits(),
	}
}

func TestRoundTrip(t *testing.T) {
	p := sample()
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), p.TurnID+".json")
	if err := atomicfile.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if got.Identity != p.Identity || got.Model != p.Model {
		t.Errorf("Load = %+v, want %+v", got, p)
	}
}

func TestValidateRefusals(t *testing.T) {
	tests := map[string]func(*Policy){
		"version":        func(p *Policy) { p.Version = 2 },
		"turn id":        func(p *Policy) { p.TurnID = "../x" },
		"tag mismatch":   func(p *Policy) { p.Identity.ChannelTag = "other" },
		"no deadline":    func(p *Policy) { p.DeadlineUnixMs = 0 },
		"http model":     func(p *Policy) { p.Model.URL = "http://api.example.com/" },
		"http remote":    func(p *Policy) { p.Model.URL = "http://10.0.0.1/"; p.Model.AllowHTTP = true },
		"userinfo":       func(p *Policy) { p.Model.URL = "https://a:b@api.example.com/" },
		"no credential":  func(p *Policy) { p.Model.Credential = "" },
		"cred traversal": func(p *Policy) { p.Model.Credential = "../x" },
		"max tokens":     func(p *Policy) { p.Model.MaxTokens = 0 },
		"tool name":      func(p *Policy) { p.Tools[0].Name = "Clock" },
		"dup tool":       func(p *Policy) { p.Tools[1].Name = "clock" },
		"tool kind":      func(p *Policy) { p.Tools[0].Kind = "shell" },
		"relative argv":  func(p *Policy) { p.Tools[1].Argv = []string{"true"} },
		"mcp session":    func(p *Policy) { p.MCP[0].Session = "x" },
		"mcp no tools":   func(p *Policy) { p.MCP[0].Tools = nil },
		"mcp tool name":  func(p *Policy) { p.MCP[0].Tools = []string{"a/b"} },
		"mcp tool long":  func(p *Policy) { p.MCP[0].Tools = []string{strings.Repeat("x", 129)} },
		"mcp tool empty": func(p *Policy) { p.MCP[0].Tools = []string{""} },
		"mcp dup tool":   func(p *Policy) { p.MCP[0].Tools = []string{"get-sum", "get-sum"} },
		"host tool dash": func(p *Policy) { p.Tools[0].Name = "get-time" },
		"server dash":    func(p *Policy) { p.MCP[0].Name = "my-server" },
		"limits":         func(p *Policy) { p.Limits.MaxCalls = 0 },
		"speaker long":   func(p *Policy) { p.Identity.SpeakerName = strings.Repeat("x", 257) },
	}
	for name, mutate := range tests {
		p := sample()
		mutate(p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: Validate = nil, want refusal", name)
		}
	}
	p := sample()
	p.MCP[0].Tools = []string{"get-sum", "get-tiny-image", "files.read", "A_b", strings.Repeat("x", 128)}
	if err := p.Validate(); err != nil {
		t.Errorf("MCP tool names the MCP specification allows refused: %v", err)
	}
	p = sample()
	p.Model.URL = "http://127.0.0.1:8080/v1/chat/completions"
	p.Model.AllowHTTP = true
	if err := p.Validate(); err != nil {
		t.Errorf("loopback http with allowHttp refused: %v", err)
	}
}

func TestLoadRefusesUnknownFields(t *testing.T) {
	data, _ := sample().Marshal()
	bad := strings.Replace(string(data), `"version":1`, `"version":1,"apiKey":"x"`, 1)
	path := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(path, []byte(bad), 0o600)
	if _, err := Load(path); err == nil {
		t.Error("Load accepted an unknown field")
	}
}

func TestEgressGrantBounds(t *testing.T) {
	grant := func(mutate func(*Egress)) *Policy {
		p := sample()
		e := DefaultEgress()
		mutate(&e)
		p.Egress = &e
		return p
	}
	if err := grant(func(*Egress) {}).Validate(); err != nil {
		t.Fatalf("the default grant refused: %v", err)
	}
	refused := map[string]func(*Egress){
		"no connections":       func(e *Egress) { e.MaxConnections = 0 },
		"connections over max": func(e *Egress) { e.MaxConnections = MaxEgressConnections + 1 },
		"connections = socket": func(e *Egress) { e.MaxConnections = DefaultLimits().MaxConnections },
		"no bytes out":         func(e *Egress) { e.MaxBytesOut = 0 },
		"bytes out over max":   func(e *Egress) { e.MaxBytesOut = MaxEgressBytes + 1 },
		"negative bytes in":    func(e *Egress) { e.MaxBytesIn = -1 },
		"bytes in over max":    func(e *Egress) { e.MaxBytesIn = MaxEgressBytes + 1 },
		"timeout under min":    func(e *Egress) { e.ConnectionTimeoutMs = MinEgressTimeoutMs - 1 },
		"timeout over max":     func(e *Egress) { e.ConnectionTimeoutMs = MaxEgressTimeoutMs + 1 },
	}
	for name, mutate := range refused {
		if err := grant(mutate).Validate(); err == nil {
			t.Errorf("%s: Validate = nil, want refusal", name)
		}
	}
	edges := map[string]func(*Egress){
		"one connection": func(e *Egress) { e.MaxConnections = 1 },
		"one byte":       func(e *Egress) { e.MaxBytesOut, e.MaxBytesIn = 1, 1 },
		"max bytes":      func(e *Egress) { e.MaxBytesOut, e.MaxBytesIn = MaxEgressBytes, MaxEgressBytes },
		"min timeout":    func(e *Egress) { e.ConnectionTimeoutMs = MinEgressTimeoutMs },
		"max timeout":    func(e *Egress) { e.ConnectionTimeoutMs = MaxEgressTimeoutMs },
	}
	for name, mutate := range edges {
		if err := grant(mutate).Validate(); err != nil {
			t.Errorf("%s: Validate = %v, want nil", name, err)
		}
	}
	// A grant survives the file round trip; no grant stays absent.
	p := grant(func(*Egress) {})
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), p.TurnID+".json")
	if err := atomicfile.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil || got.Egress == nil || !reflect.DeepEqual(*got.Egress, *p.Egress) {
		t.Errorf("Load = %+v, %v; want the grant %+v", got, err, p.Egress)
	}
	if data, _ := sample().Marshal(); strings.Contains(string(data), `"egress":`) {
		t.Errorf("a policy without a grant encodes one: %s", data)
	}
}
