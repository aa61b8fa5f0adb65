package toolset

import (
	"context"
	"fmt"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Discovered lists a server's tools and keeps the declared names (all
// when none are declared), each checked like a configured tool.
func Discovered(ctx context.Context, s config.MCP, list func(context.Context, config.MCP) ([]protocol.ToolSpec, error)) ([]protocol.ToolSpec, error) {
	offered, err := list(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("mcp %s: list tools: %w", s.Name, err)
	}
	want := map[string]bool{}
	for _, t := range s.Tools {
		want[t.Name] = true
	}
	all := len(want) == 0 // decided before the loop: want shrinks as names are found
	var out []protocol.ToolSpec
	for _, t := range offered {
		if !all && !want[t.Name] {
			continue
		}
		if !protocol.ValidMCPToolName(t.Name) {
			return nil, fmt.Errorf("mcp %s: offered tool name %q is not %s; list the tools to use under tools", s.Name, t.Name, protocol.MCPToolNameRule)
		}
		if t.Description == "" {
			t.Description = t.Name
		}
		if err := config.CompileSchema(string(t.Parameters)); err != nil {
			return nil, fmt.Errorf("mcp %s: tool %s parameters: %v", s.Name, t.Name, err)
		}
		delete(want, t.Name)
		out = append(out, t)
	}
	for name := range want {
		return nil, fmt.Errorf("mcp %s: declared tool %s is not offered by the server", s.Name, name)
	}
	if len(out) == 0 || len(out) > protocol.MaxToolSpecs {
		return nil, fmt.Errorf("mcp %s: server offers %d usable tools; 1 to %d are allowed", s.Name, len(out), protocol.MaxToolSpecs)
	}
	return out, nil
}
