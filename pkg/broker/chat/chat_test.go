package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

var pol = Policy{Model: "fixed-model", MaxTokens: 4096}

func TestBuildRebuildsFromScratch(t *testing.T) {
	in := `{"model":"fixed-model","messages":[{"role":"user","content":"hi","name":"bob"}],"max_tokens":10,` +
		`"tools":[{"type":"function","function":{"name":"f","description":"<d>","parameters":{"type":"object"},"strict":true}}],` +
		`"tool_choice":{"type":"function","function":{"name":"f"}},"temperature":0.5,"top_p":1,"seed":3,"stop":["x"],"parallel_tool_calls":false}`
	out, err := Build([]byte(in), pol)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(out, &got)
	if got["model"] != "fixed-model" || got["stream"] != false || got["max_tokens"] != float64(10) {
		t.Errorf("rebuilt %s", out)
	}
	if !strings.Contains(string(out), `"description":"<d>"`) {
		t.Errorf("HTML-escaped or lost description: %s", out)
	}
}

func TestBuildAcceptsWorkerShapes(t *testing.T) {
	// What pkg/worker sends: tools may be null, parameters null, content "" with tool calls.
	for _, body := range []string{
		`{"model":"fixed-model","messages":[{"role":"user","content":"x"}],"tools":null}`,
		`{"model":"fixed-model","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","description":"","parameters":null}}]}`,
		`{"model":"fixed-model","messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","content":"r","tool_call_id":"c"}]}`,
	} {
		if _, err := Build([]byte(body), pol); err != nil {
			t.Errorf("%s refused: %v", body, err)
		}
	}
}

// TestBuildFunctionNames: the names pkg/protocol gives MCP tools (dashes,
// capitals, hashed forms) pass in tools, tool calls and tool_choice; names
// outside the providers' rule do not.
func TestBuildFunctionNames(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"mcp_0_get-sum", true},
		{"mcp_1_Get_Tiny-Image", true},
		{protocol.MCPFunctionName(3, "files.read"), true},
		{protocol.MCPFunctionName(15, strings.Repeat("x", 128)), true},
		{"mcp_0_a.b", false},
		{"mcp_0_a b", false},
		{"-x", false},
		{"f" + strings.Repeat("x", 64), false},
	} {
		for _, body := range []string{
			`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"` + c.name + `"}}]}`,
			`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"` + c.name + `","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`,
			`{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"` + c.name + `"}}}`,
		} {
			_, err := Build([]byte(body), pol)
			if (err == nil) != c.ok {
				t.Errorf("%s: err = %v, want ok=%v", body, err, c.ok)
			}
		}
	}
}

func TestBuildAcceptsSchemaWordsAsData(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","properties":{"$ref":{"type":"string"},"$id":{"type":"string"},"$schema":{},"$vocabulary":{}}}`,
		`{"enum":["https://evil.example/x","$ref",{"ref":"https://evil.example"}]}`,
		`{"const":"$ref","default":{"url":"https://x"},"examples":["$dynamicRef"]}`,
		`{"$ref":"#/$defs/a","$defs":{"a":{"$id":"#a","$dynamicRef":"#meta","$recursiveRef":"#"}}}`,
		`{"required":["$ref"],"patternProperties":{"^\\$ref$":{"type":"string"}}}`,
		`{"dependencies":{"a":["$ref","$id"]}}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","$vocabulary":{"#core":true}}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"a":{"type":"number"}}}`,
	} {
		body := `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + s + `}}]}`
		if _, err := Build([]byte(body), pol); err != nil {
			t.Errorf("%s refused: %v", s, err)
		}
	}
}

func TestBuildRefusals(t *testing.T) {
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"x"}],"stream":true}`,
		`{"model":"other","messages":[{"role":"user","content":"x"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":4097}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"$ref":"https://x"}}}]}`,
	} {
		if _, err := Build([]byte(body), pol); err == nil {
			t.Errorf("%s accepted", body)
		} else if strings.Contains(err.Error(), "https://x") || strings.Contains(err.Error(), "other") {
			t.Errorf("error quotes input: %v", err)
		}
	}
}

// TestBuildRefusesRemoteRefsAnywhere: issue 18 item 5. A remote reference
// under an unknown keyword, inside an array, under a data keyword or in a
// draft-03 keyword never reaches the provider.
func TestBuildRefusesRemoteRefsAnywhere(t *testing.T) {
	for _, s := range []string{
		`{"x-any":[{"$ref":"https://evil.example/s.json"}]}`,
		`{"type":[{"$ref":"https://evil.example/s.json"}]}`,
		`{"extends":[{"$ref":"https://evil.example/s.json"}]}`,
		`{"properties":{"a":{"x-any":[[{"$id":"https://evil.example/s.json"}]]}}}`,
		`{"enum":["https://evil.example/x",{"$ref":"https://evil.example"}]}`,
		`{"const":{"$ref":"http://x","$schema":"http://y"}}`,
		`{"default":{"$id":"https://x"},"examples":[{"$dynamicRef":"http://y"}]}`,
	} {
		body := `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + s + `}}]}`
		if _, err := Build([]byte(body), pol); err == nil {
			t.Errorf("%s accepted", body)
		} else if strings.Contains(err.Error(), "https://x") || strings.Contains(err.Error(), "other") {
			t.Errorf("error quotes input: %v", err)
		}
	}
}

// FuzzModelRequest: the validator never panics, and whatever it accepts is a
// rebuilt request that keeps every rule.
func FuzzModelRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"fixed-model","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"max_tokens":5}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"$ref":{"$ref":"#/x"}}}}}]}`,
		`{"messages":[{"role":"user","content":"x"}],"stream":true}`,
		`[{"messages":[]}]`, `{"a":1,"a":2}`, `{}`,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		`{"messages":[{"role":"user","content":"\ud800"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Build(data, pol)
		if err != nil {
			if out != nil {
				t.Fatal("output with an error")
			}
			return
		}
		if !utf8.Valid(data) {
			t.Fatal("invalid UTF-8 accepted")
		}
		var req map[string]any
		if err := json.Unmarshal(out, &req); err != nil {
			t.Fatalf("output is not JSON: %v", err)
		}
		if req["model"] != pol.Model || req["stream"] != false {
			t.Fatalf("model %v stream %v", req["model"], req["stream"])
		}
		if n, ok := req["max_tokens"].(float64); !ok || n < 1 || n > float64(pol.MaxTokens) {
			t.Fatalf("max_tokens %v", req["max_tokens"])
		}
		allowed := map[string]bool{"model": true, "stream": true, "max_tokens": true, "messages": true, "tools": true,
			"tool_choice": true, "temperature": true, "top_p": true, "presence_penalty": true, "frequency_penalty": true,
			"seed": true, "parallel_tool_calls": true, "stop": true}
		for k := range req {
			if !allowed[k] {
				t.Fatalf("field %q passed", k)
			}
		}
		for _, m := range req["messages"].([]any) {
			msg := m.(map[string]any)
			switch msg["role"] {
			case "system", "user", "tool":
				if _, ok := msg["content"].(string); !ok {
					t.Fatalf("non-string content passed")
				}
			case "assistant":
				if _, ok := msg["content"].(string); !ok && (msg["content"] != nil || msg["tool_calls"] == nil) {
					t.Fatalf("assistant content passed")
				}
			default:
				t.Fatalf("role %v passed", msg["role"])
			}
		}
		if tools, ok := req["tools"].([]any); ok {
			for _, tl := range tools {
				m := tl.(map[string]any)
				if m["type"] != "function" || !protocol.ValidFunctionName(m["function"].(map[string]any)["name"].(string)) {
					t.Fatalf("tool passed: %v", m)
				}
			}
		}
		// Rebuilding the output again is stable (it passes its own rules).
		if _, err := Build(out, pol); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("rebuilt output refused: %v", err)
		}
	})
}
