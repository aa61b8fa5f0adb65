// Package chat validates a guest's Chat Completions request and rebuilds the
// upstream body from scratch. Only allow-listed fields with checked types
// survive; the model is the policy's, stream is false and max_tokens never
// exceeds the policy's limit. Messages carry only system/user/assistant/tool
// roles with string content and function tool calls, so media parts, file
// references, audio and native provider tools are refused, and every tool
// schema passes package toolschema. Refusal messages never quote input.
package chat

import (
	"errors"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
	"github.com/roundtable-sandbox/sandbox/pkg/toolschema"
)

// ErrInvalid is the category of every refusal.
var ErrInvalid = errors.New("invalid model request")

type refusal string

func (r refusal) Error() string { return "chat: " + string(r) }
func (r refusal) Unwrap() error { return ErrInvalid }

// Bounds beyond the body size limit.
const (
	MaxMessages  = 4096
	MaxTools     = 4096
	MaxToolCalls = 128
	MaxStop      = 4
)

// Policy is what the broker fixes in every upstream request.
type Policy struct {
	Model     string
	MaxTokens int
}

// Build decodes body (exactly one JSON object) and returns the upstream body.
func Build(body []byte, p Policy) ([]byte, error) {
	req, err := strictjson.DecodeObject(body)
	if err != nil {
		return nil, err
	}
	out, err := Rebuild(req, p)
	if err != nil {
		return nil, err
	}
	enc, err := strictjson.Encode(out)
	if err != nil {
		return nil, refusal("cannot encode")
	}
	return enc, nil
}

var topLevel = map[string]bool{
	"model": true, "messages": true, "tools": true, "tool_choice": true, "max_tokens": true,
	"max_completion_tokens": true, "temperature": true, "top_p": true, "stream": true,
	"parallel_tool_calls": true, "stop": true, "seed": true, "presence_penalty": true,
	"frequency_penalty": true,
}

// Rebuild validates a decoded request and returns the upstream object.
func Rebuild(req map[string]any, p Policy) (map[string]any, error) {
	if !strictjson.Only(req, topLevel) {
		return nil, refusal("field not allowed")
	}
	out := map[string]any{"model": p.Model, "stream": false}
	if m, ok := req["model"]; ok {
		if s, ok := m.(string); !ok || s != p.Model {
			return nil, refusal("model override refused")
		}
	}
	if s, ok := req["stream"]; ok && s != false {
		return nil, refusal("streaming refused")
	}
	maxTokens := p.MaxTokens
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		v, ok := req[k]
		if !ok {
			continue
		}
		n, ok := strictjson.Integer(v)
		if !ok || n < 1 {
			return nil, refusal("token limit must be a positive integer")
		}
		if n > int64(p.MaxTokens) {
			return nil, refusal("token limit above the policy")
		}
		maxTokens = min(maxTokens, int(n))
	}
	out["max_tokens"] = maxTokens

	msgs, ok := req["messages"].([]any)
	if !ok || len(msgs) == 0 || len(msgs) > MaxMessages {
		return nil, refusal("messages must be a non-empty array")
	}
	rebuilt := make([]any, 0, len(msgs))
	for _, m := range msgs {
		r, err := message(m)
		if err != nil {
			return nil, err
		}
		rebuilt = append(rebuilt, r)
	}
	out["messages"] = rebuilt

	if t, ok := req["tools"]; ok && t != nil { // null: no tools
		tools, ok := t.([]any)
		if !ok || len(tools) > MaxTools {
			return nil, refusal("tools must be an array")
		}
		rt := make([]any, 0, len(tools))
		for _, t := range tools {
			r, err := tool(t)
			if err != nil {
				return nil, err
			}
			rt = append(rt, r)
		}
		if len(rt) > 0 {
			out["tools"] = rt
		}
	}
	if tc, ok := req["tool_choice"]; ok {
		r, err := toolChoice(tc)
		if err != nil {
			return nil, err
		}
		out["tool_choice"] = r
	}
	for _, f := range []struct {
		key    string
		lo, hi float64
	}{{"temperature", 0, 2}, {"top_p", 0, 1}, {"presence_penalty", -2, 2}, {"frequency_penalty", -2, 2}} {
		v, ok := req[f.key]
		if !ok {
			continue
		}
		n, ok := strictjson.Number(v)
		if !ok || n < f.lo || n > f.hi {
			return nil, refusal("sampling parameter out of range")
		}
		out[f.key] = n
	}
	if v, ok := req["seed"]; ok {
		n, ok := strictjson.Integer(v)
		if !ok {
			return nil, refusal("seed must be an integer")
		}
		out["seed"] = n
	}
	if v, ok := req["parallel_tool_calls"]; ok {
		b, ok := v.(bool)
		if !ok {
			return nil, refusal("parallel_tool_calls must be a boolean")
		}
		out["parallel_tool_calls"] = b
	}
	if v, ok := req["stop"]; ok {
		switch s := v.(type) {
		case string:
			out["stop"] = s
		case []any:
			if len(s) > MaxStop {
				return nil, refusal("too many stop sequences")
			}
			for _, e := range s {
				if _, ok := e.(string); !ok {
					return nil, refusal("stop sequences must be strings")
				}
			}
			out["stop"] = s
		default:
			return nil, refusal("stop must be a string or an array of strings")
		}
	}
	return out, nil
}

var roleFields = map[string]map[string]bool{
	"system":    {"role": true, "content": true, "name": true},
	"user":      {"role": true, "content": true, "name": true},
	"assistant": {"role": true, "content": true, "name": true, "tool_calls": true},
	"tool":      {"role": true, "content": true, "tool_call_id": true},
}

func message(v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, refusal("a message must be an object")
	}
	role, _ := m["role"].(string)
	allowed, ok := roleFields[role]
	if !ok {
		return nil, refusal("role not allowed")
	}
	if !strictjson.Only(m, allowed) {
		return nil, refusal("message field not allowed")
	}
	out := map[string]any{"role": role}
	if n, ok := m["name"]; ok {
		s, ok := n.(string)
		if !ok || !plainName(s, 64) {
			return nil, refusal("message name invalid")
		}
		out["name"] = s
	}
	content, hasContent := m["content"]
	if role == "assistant" {
		if tc, ok := m["tool_calls"]; ok {
			calls, err := toolCalls(tc)
			if err != nil {
				return nil, err
			}
			out["tool_calls"] = calls
			// With tool calls, content may be null, empty or absent.
			switch c := content.(type) {
			case nil:
				out["content"] = nil
			case string:
				out["content"] = c
			default:
				return nil, refusal("content must be a string")
			}
			return out, nil
		}
	}
	s, ok := content.(string)
	if !hasContent || !ok {
		return nil, refusal("content must be a string")
	}
	out["content"] = s
	if role == "tool" {
		id, ok := m["tool_call_id"].(string)
		if !ok || !callID(id) {
			return nil, refusal("tool_call_id invalid")
		}
		out["tool_call_id"] = id
	}
	return out, nil
}

func toolCalls(v any) ([]any, error) {
	a, ok := v.([]any)
	if !ok || len(a) == 0 || len(a) > MaxToolCalls {
		return nil, refusal("tool_calls must be a non-empty array")
	}
	out := make([]any, 0, len(a))
	for _, c := range a {
		m, ok := c.(map[string]any)
		if !ok || len(m) != 3 || m["type"] != "function" {
			return nil, refusal("only function tool calls")
		}
		id, ok := m["id"].(string)
		if !ok || !callID(id) {
			return nil, refusal("tool call id invalid")
		}
		fn, ok := m["function"].(map[string]any)
		if !ok || len(fn) != 2 {
			return nil, refusal("tool call function invalid")
		}
		name, ok1 := fn["name"].(string)
		args, ok2 := fn["arguments"].(string)
		if !ok1 || !ok2 || !protocol.ValidFunctionName(name) {
			return nil, refusal("tool call function invalid")
		}
		out = append(out, map[string]any{
			"id": id, "type": "function",
			"function": map[string]any{"name": name, "arguments": args},
		})
	}
	return out, nil
}

var functionFields = map[string]bool{"name": true, "description": true, "parameters": true, "strict": true}

func tool(v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 2 || m["type"] != "function" {
		return nil, refusal("only function tools")
	}
	fn, ok := m["function"].(map[string]any)
	if !ok {
		return nil, refusal("tool function invalid")
	}
	if !strictjson.Only(fn, functionFields) {
		return nil, refusal("tool function field not allowed")
	}
	name, ok := fn["name"].(string)
	if !ok || !protocol.ValidFunctionName(name) {
		return nil, refusal("tool name invalid")
	}
	out := map[string]any{"name": name}
	if d, ok := fn["description"]; ok {
		s, ok := d.(string)
		if !ok {
			return nil, refusal("tool description must be a string")
		}
		out["description"] = s
	}
	if p, ok := fn["parameters"]; ok && p != nil { // null: no parameters
		if _, ok := p.(map[string]any); !ok {
			return nil, refusal("tool parameters must be an object")
		}
		if err := toolschema.Check(p); err != nil {
			return nil, err
		}
		out["parameters"] = p
	}
	if s, ok := fn["strict"]; ok {
		b, ok := s.(bool)
		if !ok {
			return nil, refusal("tool strict must be a boolean")
		}
		out["strict"] = b
	}
	return map[string]any{"type": "function", "function": out}, nil
}

func toolChoice(v any) (any, error) {
	switch c := v.(type) {
	case string:
		if c == "none" || c == "auto" || c == "required" {
			return c, nil
		}
	case map[string]any:
		fn, ok := c["function"].(map[string]any)
		if len(c) == 2 && c["type"] == "function" && ok && len(fn) == 1 {
			if name, ok := fn["name"].(string); ok && protocol.ValidFunctionName(name) {
				return map[string]any{"type": "function", "function": map[string]any{"name": name}}, nil
			}
		}
	}
	return nil, refusal("tool_choice invalid")
}

// plainName: [A-Za-z0-9_-]{1,max}.
func plainName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// callID: 1..256 printable ASCII characters (providers' ids vary in shape).
func callID(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}
