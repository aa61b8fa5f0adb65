// Package toolset is the configured tools as the model and the broker get
// them: the public tool specs of the host tools and MCP servers (their
// parameters without a root $schema; a discovering server's offered tools
// checked like configured ones), and the turn-independent policy
// template (tools, MCP servers, model, limits, egress.allow) every kind
// starts its broker policy from.
// Guarantee: the specs fit the worker's tool budget or New fails naming
// the sizes; the template never holds a credential value, only names.
package toolset

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

// Set is the public specs and the policy template.
type Set struct {
	Tools  []protocol.ToolSpec
	MCP    []protocol.MCPServerSpec
	Policy policy.Policy
}

// New builds the set from the configuration; discovered replaces the
// declared tool specs of servers discovered at startup (discover: true),
// keyed by server name.
func New(c *config.Config, discovered map[string][]protocol.ToolSpec) (Set, error) {
	var h Set
	for _, t := range c.Tools {
		h.Tools = append(h.Tools, protocol.ToolSpec{Name: t.Name, Description: t.Description, Parameters: ModelSchema([]byte(t.Parameters))})
		h.Policy.Tools = append(h.Policy.Tools, policy.Tool{
			Name: t.Name, Kind: t.Kind, Builtin: t.Builtin, Argv: t.Argv, URL: t.URL,
			TimeoutMs: t.TimeoutSeconds * 1000, Credential: t.Credential, AllowHTTP: t.AllowInsecureLoopbackHTTP,
			MaxBytes: t.MaxBytes, MaxTextBytes: t.MaxTextBytes,
		})
	}
	for _, s := range c.MCP {
		spec := protocol.MCPServerSpec{Server: s.Name}
		if discovered, ok := discovered[s.Name]; ok {
			for _, t := range discovered {
				t.Parameters = ModelSchema(t.Parameters)
				spec.Tools = append(spec.Tools, t)
			}
		} else {
			for _, t := range s.Tools {
				spec.Tools = append(spec.Tools, protocol.ToolSpec{Name: t.Name, Description: t.Description, Parameters: ModelSchema([]byte(t.Parameters))})
			}
		}
		names := make([]string, 0, len(spec.Tools))
		for _, t := range spec.Tools {
			names = append(names, t.Name)
		}
		h.MCP = append(h.MCP, spec)
		h.Policy.MCP = append(h.Policy.MCP, policy.MCPServer{
			Name: s.Name, URL: s.URL, Credential: s.Credential, Session: s.Session, Tools: names, AllowHTTP: s.AllowInsecureLoopbackHTTP,
		})
	}
	h.Policy.Version = policy.Version
	h.Policy.Model = policy.Model{URL: c.Model.URL, Name: c.Model.Name, MaxTokens: c.Model.MaxTokens, AllowHTTP: c.Model.AllowInsecureLoopbackHTTP}
	h.Policy.Limits = c.Broker.PolicyLimits()
	h.Policy.EgressAllow = c.Egress.Allow

	all := make([]protocol.ToolSpec, 0, len(h.Tools))
	for _, t := range h.Tools {
		t.Name = protocol.HostFunctionName(t.Name)
		all = append(all, t)
	}
	for i, s := range h.MCP {
		for _, t := range s.Tools {
			t.Name = protocol.MCPFunctionName(i, t.Name)
			all = append(all, t)
		}
	}
	if n := config.ToolBudgetBytes(all); n > config.MaxToolBudget-config.BuiltinToolReserve {
		return Set{}, fmt.Errorf("host: tool specs take %d bytes, over the worker's budget of %d", n, config.MaxToolBudget-config.BuiltinToolReserve)
	}
	return h, nil
}

// ModelSchema is a tool's parameters as the model gets them: without the
// root $schema, a dialect declaration that nothing loads (toolschema) but
// that some providers' function-declaration APIs refuse as an unknown field
// (Gemini: Unknown name "$schema"), so a schema copied from an MCP server
// works with them too. Everything else is passed on as declared.
func ModelSchema(raw json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return raw // config and discovery refuse it before this
	}
	if m, ok := v.(map[string]any); !ok || m["$schema"] == nil {
		return raw
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(toolschema.WithoutDialect(v)) != nil {
		return raw
	}
	return json.RawMessage(bytes.TrimRight(b.Bytes(), "\n"))
}
