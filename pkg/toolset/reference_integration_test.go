package toolset

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/mcp"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/test/peers/everything"
)

// TestIntegrationReferenceDiscover: `discover: true` against the official
// reference server (@modelcontextprotocol/server-everything) takes its
// dashed tool names and its draft-07 schemas ("$schema" included) as they
// are; every offered tool gets a valid, distinct function name; a turn made
// of them validates; and CompareTools (doctor) finds no difference between
// the server's schemas and declarations copied from it, with or without
// their $schema.
func TestIntegrationReferenceDiscover(t *testing.T) {
	bin := everything.Bin(t)
	if !everything.InPrivateNetwork(t) {
		return
	}
	srv := everything.Start(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	list := func(ctx context.Context, s config.MCP) ([]mcp.Tool, error) {
		names := make([]string, 0, len(s.Tools))
		for _, t := range s.Tools {
			names = append(names, t.Name)
		}
		return mcp.ListTools(ctx, policy.MCPServer{Name: s.Name, URL: s.URL, Session: policy.SessionAuto, Tools: names, AllowHTTP: true}, "", mcp.Options{})
	}
	offered, err := list(ctx, config.MCP{Name: "everything", URL: srv.URL()})
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	dialect := 0
	for _, o := range offered {
		names = append(names, o.Name)
		if strings.Contains(string(o.InputSchema), `"$schema"`) {
			dialect++
		}
	}
	t.Logf("the server offers %d tools (%d schemas declare $schema): %s", len(offered), dialect, strings.Join(names, ", "))
	if dialect == 0 {
		t.Log("no offered schema carries $schema any more; the dialect path is covered by unit tests only")
	}

	lister := func(ctx context.Context, s config.MCP) ([]protocol.ToolSpec, error) {
		tools, err := list(ctx, s)
		if err != nil {
			return nil, err
		}
		out := make([]protocol.ToolSpec, 0, len(tools))
		for _, t := range tools {
			out = append(out, protocol.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
		}
		return out, nil
	}
	// With no names declared, every offered tool (and schema) is taken.
	s := config.MCP{Name: "everything", URL: srv.URL(), Discover: true, AllowInsecureLoopbackHTTP: true}
	all, err := Discovered(ctx, s, lister)
	if err != nil {
		t.Fatalf("Discovered (all): %v", err)
	}
	if len(all) != len(offered) {
		t.Errorf("discovered %d of %d offered tools", len(all), len(offered))
	}
	for _, n := range []string{"echo", "get-sum", "get-tiny-image"} {
		s.Tools = append(s.Tools, config.MCPTool{Name: n})
	}
	specs, err := Discovered(ctx, s, lister)
	if err != nil {
		t.Fatalf("Discovered: %v", err)
	}
	if len(specs) != 3 {
		t.Fatalf("discovered %d tools, want the 3 declared", len(specs))
	}

	// Every offered name is legal and gets its own function name.
	for _, n := range names {
		if !protocol.ValidMCPToolName(n) {
			t.Errorf("offered tool name %q is outside the MCP rule", n)
		}
	}
	if a, b, clash := protocol.MCPFunctionNameClash(0, names); clash {
		t.Errorf("%q and %q share a function name", a, b)
	}
	turn := protocol.Turn{Text: "t", Model: "m", TimeZone: "UTC", MCP: []protocol.MCPServerSpec{{Server: "everything", Tools: all}}}
	if err := turn.Validate(); err != nil {
		t.Errorf("a turn of the discovered tools: %v", err)
	}

	// Declarations copied from the server, with and without $schema, match.
	for _, strip := range []bool{false, true} {
		declared := make([]protocol.ToolSpec, len(specs))
		for i, sp := range specs {
			declared[i] = sp
			if strip {
				var m map[string]any
				if err := json.Unmarshal(sp.Parameters, &m); err != nil {
					t.Fatal(err)
				}
				delete(m, "$schema")
				declared[i].Parameters, _ = json.Marshal(m)
			}
			if err := config.CompileSchema(string(declared[i].Parameters)); err != nil {
				t.Errorf("declaration of %s copied from the server (strip $schema %v): %v", sp.Name, strip, err)
			}
		}
		for _, f := range mcp.CompareTools(declared, offered) {
			if f.Kind != mcp.FindingUndeclared {
				t.Errorf("strip $schema %v: finding %+v", strip, f)
			}
		}
	}
}
