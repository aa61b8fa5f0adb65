package toolset

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// referenceTools lists tools as @modelcontextprotocol/server-everything does:
// dashed names and draft-07 schemas that declare their dialect.
func referenceTools(extra ...protocol.ToolSpec) func(context.Context, config.MCP) ([]protocol.ToolSpec, error) {
	return func(context.Context, config.MCP) ([]protocol.ToolSpec, error) {
		return append([]protocol.ToolSpec{
			{Name: "echo", Description: "Echoes back the input", Parameters: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`)},
			{Name: "get-sum", Description: "Returns the sum of two numbers", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"$schema":"http://json-schema.org/draft-07/schema#"}`)},
			{Name: "get-tiny-image", Description: "Returns a tiny image", Parameters: json.RawMessage(`{"type":"object","properties":{},"$schema":"http://json-schema.org/draft-07/schema#"}`)},
		}, extra...), nil
	}
}

func TestDiscoveredToolNames(t *testing.T) {
	ctx := context.Background()
	named := func(names ...string) config.MCP {
		s := config.MCP{Name: "everything", Discover: true}
		for _, n := range names {
			s.Tools = append(s.Tools, config.MCPTool{Name: n})
		}
		return s
	}
	got, err := Discovered(ctx, named("get-sum", "get-tiny-image"), referenceTools())
	if err != nil {
		t.Fatalf("Discovered = %v", err)
	}
	if len(got) != 2 || got[0].Name != "get-sum" || got[1].Name != "get-tiny-image" {
		t.Errorf("discovered %+v", got)
	}
	// A schema naming a dialect nobody knows built in is refused, naming it.
	odd := protocol.ToolSpec{Name: "odd", Description: "d", Parameters: json.RawMessage(`{"type":"object","$schema":"https://evil.example/meta.json"}`)}
	if _, err := Discovered(ctx, named("odd"), referenceTools(odd)); err == nil || !strings.Contains(err.Error(), "tool odd parameters: at #/$schema: $schema may name only") {
		t.Errorf("unknown dialect: %v", err)
	}
	// With no names declared every offered tool is taken, so one name outside
	// the MCP rule refuses the whole list, naming it.
	bad := protocol.ToolSpec{Name: "a b", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}
	if _, err := Discovered(ctx, named(), referenceTools(bad)); err == nil || !strings.Contains(err.Error(), `"a b"`) {
		t.Errorf("offered name outside the rule: %v", err)
	}
	// An undeclared tool's name is never judged, and undeclared tools offered
	// after the last declared one are not taken either.
	got, err = Discovered(ctx, named("echo"), referenceTools(bad))
	if err != nil || len(got) != 1 || got[0].Name != "echo" {
		t.Errorf("declared echo only: got %+v, %v", got, err)
	}
}
