package mcp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// TestCheckCallToolNames: the client's own declared-tool check accepts every
// name the MCP specification allows (the reference server's get-sum, dots,
// capitals, 128 characters) and nothing undeclared or outside the rule.
func TestCheckCallToolNames(t *testing.T) {
	long := strings.Repeat("x", 128)
	s := policy.MCPServer{Name: "srv", URL: "https://mcp.example.com/mcp", Session: policy.SessionAuto,
		Tools: []string{"get-sum", "files.read", "Get_Tiny-Image", long, strings.Repeat("y", 129)}}
	for _, c := range []struct {
		tool string
		ok   bool
	}{
		{"get-sum", true},
		{"files.read", true},
		{"Get_Tiny-Image", true},
		{long, true},
		{strings.Repeat("y", 129), false}, // declared, but over the rule
		{"get_sum", false},
		{"echo", false},
		{"", false},
	} {
		err := checkCall(s, "", c.tool, json.RawMessage(`{}`))
		if (err == nil) != c.ok {
			t.Errorf("checkCall(%q) = %v, want ok=%v", c.tool, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("checkCall(%q) error %v is not ErrInvalid", c.tool, err)
		}
	}
}
