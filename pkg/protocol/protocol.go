// Package protocol is the contract between the host and a worker container:
// the turn JSON on the worker's stdin, the reply JSON on its stdout, the
// in-container constants, and the validators both sides share. Decoders here
// are bounded and strict: a value that passes them has every documented bound.
package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"
	"unicode/utf8"
)

// In-container constants.
const (
	WorkspacePath    = "/workspace"
	BrokerDir        = "/run/broker"
	BrokerSocketPath = "/run/broker/broker.sock"
	// DummyAPIKey is the only credential a worker ever holds. The broker
	// refuses any other caller credential and swaps in the real one.
	DummyAPIKey = "sandbox-dummy-key"
	// EnvBrokerSocket and EnvAPIKey are the only environment the host gives a worker.
	EnvBrokerSocket = "SANDBOX_BROKER_SOCKET"
	EnvAPIKey       = "SANDBOX_API_KEY"
)

// Bounds.
const (
	MaxTurnBytes    = 256 << 10 // turn JSON on stdin
	MaxReplyBytes   = 512 << 10 // reply JSON on stdout
	MaxTextChars    = 32_000    // guest message
	MaxIDChars      = 256       // speaker id, name, principal id
	MaxReplyChars   = 100_000   // final model text
	MaxPromptChars  = 32_000    // system prompt
	MaxToolSpecs    = 64        // host tools or tools of one MCP server
	MaxMCPServers   = 16
	MaxSchemaBytes  = 16 << 10 // one tool's parameters
	MaxDescChars    = 4_096    // one tool's description
	MaxModelChars   = 256
	MaxTimeZoneChar = 64
)

// ErrInvalid is the category of every protocol validation failure.
var ErrInvalid = errors.New("invalid protocol value")

// ErrTooLarge reports input over its bound.
var ErrTooLarge = errors.New("input too large")

var (
	toolNameRe     = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)
	functionNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	callIDRe       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// ValidToolName: host tool, MCP server and MCP tool names, [a-z][a-z0-9_]{0,47}.
func ValidToolName(s string) bool { return toolNameRe.MatchString(s) }

// ValidFunctionName: names the model may call, including the prefixed forms
// host_<name> and mcp_<index>_<name>.
func ValidFunctionName(s string) bool { return functionNameRe.MatchString(s) }

// ValidCallID: tool call ids kept as the model sent them.
func ValidCallID(s string) bool { return callIDRe.MatchString(s) }

// HostFunctionName is the model-facing name of a host tool.
func HostFunctionName(tool string) string { return "host_" + tool }

// MCPFunctionName is the model-facing name of tool of the index-th MCP server.
func MCPFunctionName(index int, tool string) string { return fmt.Sprintf("mcp_%d_%s", index, tool) }

// Speaker is what a worker learns of who spoke: never the principal.
type Speaker struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// ToolSpec is a public tool description handed to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// MCPServerSpec lists the declared tools of one MCP server (no URL, ever).
type MCPServerSpec struct {
	Server string     `json:"server"`
	Tools  []ToolSpec `json:"tools"`
}

// Turn is the whole input of one worker run.
type Turn struct {
	Text     string          `json:"text"`
	Speaker  Speaker         `json:"speaker"`
	Model    string          `json:"model"`
	Prompt   string          `json:"prompt"`
	TimeZone string          `json:"timeZone"`
	Reset    bool            `json:"reset"`
	Tools    []ToolSpec      `json:"tools"`
	MCP      []MCPServerSpec `json:"mcp"`
}

// Reply is the one JSON object a worker prints on stdout.
type Reply struct {
	OK   bool   `json:"ok"`
	Text string `json:"text"`
}

// ReadBounded reads all of r, failing with ErrTooLarge past max bytes.
func ReadBounded(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("more than %d bytes: %w", max, ErrTooLarge)
	}
	return data, nil
}

// DecodeStrict decodes exactly one JSON value into v, refusing unknown fields
// and trailing data.
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode: %v: %w", err, ErrInvalid)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after JSON value: %w", ErrInvalid)
	}
	return nil
}

// DecodeTurn reads and validates a turn from r (at most MaxTurnBytes).
func DecodeTurn(r io.Reader) (*Turn, error) {
	data, err := ReadBounded(r, MaxTurnBytes)
	if err != nil {
		return nil, err
	}
	var t Turn
	if err := DecodeStrict(data, &t); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Validate checks every field bound of a turn.
func (t *Turn) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("turn: "+format+": %w", append(a, ErrInvalid)...)
	}
	if !utf8.ValidString(t.Text) || utf8.RuneCountInString(t.Text) > MaxTextChars {
		return bad("text must be valid UTF-8 of at most %d characters", MaxTextChars)
	}
	for _, f := range []struct{ name, v string }{{"speaker.id", t.Speaker.ID}, {"speaker.name", t.Speaker.Name}} {
		if !utf8.ValidString(f.v) || utf8.RuneCountInString(f.v) > MaxIDChars {
			return bad("%s must be valid UTF-8 of at most %d characters", f.name, MaxIDChars)
		}
	}
	if t.Model == "" || len(t.Model) > MaxModelChars {
		return bad("model must be 1 to %d bytes", MaxModelChars)
	}
	if !utf8.ValidString(t.Prompt) || utf8.RuneCountInString(t.Prompt) > MaxPromptChars {
		return bad("prompt must be valid UTF-8 of at most %d characters", MaxPromptChars)
	}
	if t.TimeZone == "" || len(t.TimeZone) > MaxTimeZoneChar {
		return bad("timeZone must be 1 to %d bytes", MaxTimeZoneChar)
	}
	if _, err := time.LoadLocation(t.TimeZone); err != nil && t.TimeZone != "UTC" {
		// The scratch image may lack zoneinfo; the worker embeds time/tzdata.
		return bad("unknown timeZone")
	}
	if len(t.Tools) > MaxToolSpecs {
		return bad("at most %d host tools", MaxToolSpecs)
	}
	if err := validSpecs(t.Tools); err != nil {
		return err
	}
	if len(t.MCP) > MaxMCPServers {
		return bad("at most %d MCP servers", MaxMCPServers)
	}
	seen := map[string]bool{}
	for _, s := range t.MCP {
		if !ValidToolName(s.Server) || seen[s.Server] {
			return bad("MCP server names must be unique and match [a-z][a-z0-9_]{0,47}")
		}
		seen[s.Server] = true
		if len(s.Tools) > MaxToolSpecs {
			return bad("at most %d tools per MCP server", MaxToolSpecs)
		}
		if err := validSpecs(s.Tools); err != nil {
			return err
		}
	}
	return nil
}

func validSpecs(specs []ToolSpec) error {
	seen := map[string]bool{}
	for _, s := range specs {
		if !ValidToolName(s.Name) || seen[s.Name] {
			return fmt.Errorf("turn: tool names must be unique and match [a-z][a-z0-9_]{0,47}: %w", ErrInvalid)
		}
		seen[s.Name] = true
		if utf8.RuneCountInString(s.Description) > MaxDescChars {
			return fmt.Errorf("turn: tool %s description over %d characters: %w", s.Name, MaxDescChars, ErrInvalid)
		}
		if len(s.Parameters) > MaxSchemaBytes {
			return fmt.Errorf("turn: tool %s parameters over %d bytes: %w", s.Name, MaxSchemaBytes, ErrInvalid)
		}
		var obj map[string]json.RawMessage
		if len(s.Parameters) == 0 || json.Unmarshal(s.Parameters, &obj) != nil || obj == nil {
			return fmt.Errorf("turn: tool %s parameters must be a JSON object: %w", s.Name, ErrInvalid)
		}
	}
	return nil
}

// DecodeReply parses a worker's stdout: exactly one reply object, bounded.
func DecodeReply(data []byte) (*Reply, error) {
	if len(data) > MaxReplyBytes {
		return nil, fmt.Errorf("reply over %d bytes: %w", MaxReplyBytes, ErrTooLarge)
	}
	var r Reply
	if err := DecodeStrict(bytes.TrimSpace(data), &r); err != nil {
		return nil, err
	}
	if !utf8.ValidString(r.Text) || utf8.RuneCountInString(r.Text) > MaxReplyChars {
		return nil, fmt.Errorf("reply text over %d characters: %w", MaxReplyChars, ErrInvalid)
	}
	return &r, nil
}
