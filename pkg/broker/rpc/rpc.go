// Package rpc validates a guest's MCP request for POST /mcp/<server>: exactly
// one JSON-RPC 2.0 request object (never a batch), method "tools/call",
// params {name, arguments} naming a tool the policy declares for that server,
// and nothing else. Discovery, resources, prompts, notifications and any
// other method are refused. Refusal messages never quote input.
package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
)

// ErrInvalid is the category of every malformed or refused request.
var ErrInvalid = errors.New("invalid MCP request")

// ErrUnknownTool: the tool is not declared for this server.
var ErrUnknownTool = errors.New("undeclared MCP tool")

type refusal string

func (r refusal) Error() string { return "rpc: " + string(r) }
func (r refusal) Unwrap() error { return ErrInvalid }

// MaxIDChars bounds a string id.
const MaxIDChars = 128

// Call is one validated tools/call.
type Call struct {
	ID        json.RawMessage // the guest's id, re-encoded (number literal or string)
	Tool      string
	Arguments json.RawMessage // a JSON object
}

// LogValue shows the tool name only, never the arguments or the id.
func (c *Call) LogValue() slog.Value { return slog.GroupValue(slog.String("tool", c.Tool)) }

// Parse validates body against the server's declared tools.
func Parse(body []byte, declared []string) (*Call, error) {
	req, err := strictjson.DecodeObject(body)
	if err != nil {
		return nil, err
	}
	for k := range req {
		switch k {
		case "jsonrpc", "id", "method", "params":
		default:
			return nil, refusal("field not allowed")
		}
	}
	if req["jsonrpc"] != "2.0" {
		return nil, refusal("jsonrpc must be \"2.0\"")
	}
	var id json.RawMessage
	switch v := req["id"].(type) {
	case json.Number:
		n, err := v.Int64() // integer ids only: no fractions, no overflow
		if err != nil {
			return nil, refusal("id number must be an integer")
		}
		id = json.RawMessage(strconv.FormatInt(n, 10))
	case string:
		if v == "" || utf8.RuneCountInString(v) > MaxIDChars {
			return nil, refusal("id string must be 1 to 128 characters")
		}
		id, _ = json.Marshal(v)
	default:
		// Absent (a notification), null, boolean, object or array.
		return nil, refusal("id must be a number or a string")
	}
	if req["method"] != "tools/call" {
		return nil, refusal("only tools/call is allowed")
	}
	params, ok := req["params"].(map[string]any)
	if !ok {
		return nil, refusal("params must be an object")
	}
	for k := range params {
		if k != "name" && k != "arguments" {
			return nil, refusal("params field not allowed")
		}
	}
	name, ok := params["name"].(string)
	if !ok {
		return nil, refusal("params.name must be a string")
	}
	known := false
	for _, d := range declared {
		if d == name {
			known = true
			break
		}
	}
	if !known {
		return nil, ErrUnknownTool
	}
	args := json.RawMessage(`{}`)
	if a, ok := params["arguments"]; ok {
		m, ok := a.(map[string]any)
		if !ok {
			return nil, refusal("params.arguments must be an object")
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			return nil, refusal("cannot encode arguments")
		}
		args = bytes.TrimRight(buf.Bytes(), "\n")
	}
	return &Call{ID: id, Tool: name, Arguments: args}, nil
}
