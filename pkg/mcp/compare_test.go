package mcp

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// TestCompareToolsWithoutDialect: the reference server's schemas carry
// "$schema": draft-07. A declaration with or without it, against a server
// with or without it, is the same schema; a real difference is still found,
// and a $schema below the root is compared like any other value.
func TestCompareToolsWithoutDialect(t *testing.T) {
	const d7 = `"$schema":"http://json-schema.org/draft-07/schema#",`
	plain := `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`
	withD7 := `{` + d7 + plain[1:]
	with2020 := `{"$schema":"https://json-schema.org/draft/2020-12/schema",` + plain[1:]
	for _, tc := range []struct {
		name, declared, offered string
		want                    []string
	}{
		{"server names the dialect", plain, withD7, nil},
		{"declaration names it", withD7, plain, nil},
		{"both, the same", withD7, withD7, nil},
		{"both, different dialects", with2020, withD7, nil},
		{"a real difference stays", `{` + d7 + `"type":"object","required":["a"]}`, withD7, []string{"get-sum/schema"}},
		{"a nested $schema is a value", `{"type":"object","properties":{"a":{` + d7 + `"type":"number"}}}`, `{"type":"object","properties":{"a":{"type":"number"}}}`, []string{"get-sum/schema"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range CompareTools(
				[]protocol.ToolSpec{{Name: "get-sum", Parameters: json.RawMessage(tc.declared)}},
				[]Tool{{Name: "get-sum", InputSchema: json.RawMessage(tc.offered)}},
			) {
				got = append(got, f.Tool+"/"+f.Kind)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("findings = %v, want %v", got, tc.want)
			}
		})
	}
}
