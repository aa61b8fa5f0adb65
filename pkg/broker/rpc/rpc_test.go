package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

var declared = []string{"search", "fetch"}

func TestParse(t *testing.T) {
	c, err := Parse([]byte(`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"search","arguments":{"q":"<x>"}}}`), declared)
	if err != nil || string(c.ID) != "12" || c.Tool != "search" || string(c.Arguments) != `{"q":"<x>"}` {
		t.Fatalf("got %+v, %v", c, err)
	}
	c, err = Parse([]byte(`{"params":{"name":"fetch"},"method":"tools/call","id":"a\"b","jsonrpc":"2.0"}`), declared)
	if err != nil || string(c.ID) != `"a\"b"` || string(c.Arguments) != `{}` {
		t.Fatalf("got %+v, %v", c, err)
	}
	if _, err := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"drop"}}`), declared); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("undeclared tool: %v", err)
	}
}

// FuzzMCPRequest: the validator never panics, and whatever it accepts is a
// single tools/call of a declared tool with an object argument and a
// number or string id.
func FuzzMCPRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"fetch"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}}]`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":1e400,"method":"tools/call","params":{"name":"search"}}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"search"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, declared)
		if err != nil {
			if c != nil {
				t.Fatal("call with an error")
			}
			return
		}
		if c.Tool != "search" && c.Tool != "fetch" {
			t.Fatalf("tool %q passed", c.Tool)
		}
		var args any
		if json.Unmarshal(c.Arguments, &args) != nil {
			t.Fatal("arguments not JSON")
		}
		if _, ok := args.(map[string]any); !ok {
			t.Fatalf("arguments %s not an object", c.Arguments)
		}
		var id any
		d := json.NewDecoder(bytes.NewReader(c.ID))
		d.UseNumber()
		if d.Decode(&id) != nil {
			t.Fatalf("id %s not JSON", c.ID)
		}
		switch v := id.(type) {
		case json.Number:
			if _, err := v.Int64(); err != nil {
				t.Fatalf("id %s is not an integer", c.ID)
			}
		case string:
		default:
			t.Fatalf("id %s passed", c.ID)
		}
		var whole []any
		if json.Unmarshal(data, &whole) == nil {
			t.Fatal("a batch passed")
		}
	})
}
