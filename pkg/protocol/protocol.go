// Package protocol is the contract between the host and a worker container:
// the turn JSON on the worker's stdin, the reply JSON on its stdout, the
// in-container constants, and the validators both sides share. Decoders here
// are bounded and strict: a value that passes them has every documented bound.
package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
	toolNameRe    = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)
	mcpToolNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	// Providers allow [a-zA-Z0-9_-]{1,64}; some also want a letter first.
	functionNameRe = regexp.MustCompile(`^[a-z][A-Za-z0-9_-]{0,63}$`)
	callIDRe       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// hashedTailRe is the tail of a hashed MCP function name (see MCPFunctionName).
	hashedTailRe = regexp.MustCompile(`_[0-9a-f]{8}$`)
)

// ToolNameRule and MCPToolNameRule are the rules as error messages state them.
const (
	ToolNameRule    = "[a-z][a-z0-9_]{0,47}"
	MCPToolNameRule = "1 to 128 characters of A-Z, a-z, 0-9, '_', '-' and '.' (the MCP tool-name rule)"
)

// MaxFunctionChars bounds a model-facing function name (the providers' rule).
const MaxFunctionChars = 64

// ValidToolName: host tool and MCP server names, [a-z][a-z0-9_]{0,47}.
func ValidToolName(s string) bool { return toolNameRe.MatchString(s) }

// ValidMCPToolName: the name of a tool an MCP server offers, as the MCP
// specification allows it: 1 to 128 characters of [A-Za-z0-9_.-].
func ValidMCPToolName(s string) bool { return mcpToolNameRe.MatchString(s) }

// ValidFunctionName: names the model may call, including the prefixed forms
// host_<name> and MCPFunctionName's: a lowercase letter, then at most 63 of
// [A-Za-z0-9_-].
func ValidFunctionName(s string) bool { return functionNameRe.MatchString(s) }

// ValidCallID: tool call ids kept as the model sent them.
func ValidCallID(s string) bool { return callIDRe.MatchString(s) }

// HostFunctionName is the model-facing name of a host tool.
func HostFunctionName(tool string) string { return "host_" + tool }

// MCPFunctionName is the model-facing name of tool (a valid MCP tool name)
// of the index-th MCP server. It is mcp_<index>_<tool> when that is at most
// 64 characters of [A-Za-z0-9_-] and tool does not end like a hashed name
// ("_" and 8 lowercase hex digits). Otherwise it is hashed:
// mcp_<index>_<tool with '.' as '_', cut to fit>_<first 8 hex of sha256(tool)>.
//
// Why this is collision-free within one server: unhashed names are tool
// itself (distinct tools, distinct names) and never end like a hashed name,
// while every hashed name does, so the two kinds never meet; two hashed names
// meet only if their cut prefixes and 32-bit hashes both agree, which
// MCPFunctionNameClash finds and every validator refuses. Across servers the
// prefixes mcp_<index>_ differ and none is a prefix of another (digits never
// contain '_'); host_, memory_ and invalid_tool never start with mcp_.
func MCPFunctionName(index int, tool string) string {
	prefix := fmt.Sprintf("mcp_%d_", index)
	if len(prefix)+len(tool) <= MaxFunctionChars && plainFunctionPart(tool) && !hashedTailRe.MatchString(tool) {
		return prefix + tool
	}
	sum := sha256.Sum256([]byte(tool))
	tail := "_" + hex.EncodeToString(sum[:4])
	keep := []byte(tool)
	if n := MaxFunctionChars - len(prefix) - len(tail); len(keep) > n {
		keep = keep[:n]
	}
	for i, c := range keep {
		if !functionChar(c) {
			keep[i] = '_'
		}
	}
	return prefix + string(keep) + tail
}

// MCPFunctionNameClash reports two of tools (one server's names) whose
// function names are equal; ok is false when there is none. Validators refuse
// such a list: the only remedy is to leave one of the two tools undeclared.
func MCPFunctionNameClash(index int, tools []string) (a, b string, ok bool) {
	seen := make(map[string]string, len(tools))
	for _, t := range tools {
		fn := MCPFunctionName(index, t)
		if other, dup := seen[fn]; dup && other != t {
			return other, t, true
		}
		seen[fn] = t
	}
	return "", "", false
}

func plainFunctionPart(s string) bool {
	for i := 0; i < len(s); i++ {
		if !functionChar(s[i]) {
			return false
		}
	}
	return true
}

func functionChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

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
	// NoMemory: no memory tools and no memory previews (a delegated job's
	// research turn, which must not see or keep notes).
	NoMemory bool `json:"noMemory,omitempty"`
}

// Reply is the one JSON object a worker prints on stdout. Cause, only in a
// failed reply, is one of the Cause constants: why the worker failed, for
// the host's log; it never reaches a client. The worker writes it as its
// last act, compact, on one line ended by a newline: its final frame
// (DecodeReplyFrame), which the host may take without waiting for the exit.
type Reply struct {
	OK    bool   `json:"ok"`
	Text  string `json:"text"`
	Cause string `json:"cause,omitempty"`
}

// Failure causes a worker names in a failed reply and in its logs: fixed
// categories chosen from error identities (errno values, sentinel errors),
// never error text, which could carry a path or a payload. The host logs a
// cause only when it is one of these.
const (
	CauseNoSpace      = "no space left on device" // ENOSPC
	CauseQuota        = "disk quota exceeded"     // EDQUOT
	CauseReadOnly     = "read-only file system"   // EROFS
	CausePermission   = "permission denied"       // EACCES, EPERM
	CauseIO           = "input/output error"      // EIO
	CauseTooManyFiles = "too many open files"     // EMFILE, ENFILE
	CauseNoFile       = "no such file or directory"
	CauseOutOfMemory  = "out of memory" // ENOMEM
	CauseSystem       = "other system error"
	CauseStore        = "workspace file invalid" // memory.json or history.json corrupt or over its bound
	CauseInvalidTurn  = "invalid turn"
	CauseBroker       = "broker call failed"
	CauseModelAnswer  = "model answer unusable"
	CauseBudget       = "context budget exceeded"
	CauseInternal     = "internal error"
)

var causes = map[string]bool{
	CauseNoSpace: true, CauseQuota: true, CauseReadOnly: true, CausePermission: true, CauseIO: true,
	CauseTooManyFiles: true, CauseNoFile: true, CauseOutOfMemory: true, CauseSystem: true, CauseStore: true,
	CauseInvalidTurn: true, CauseBroker: true, CauseModelAnswer: true, CauseBudget: true, CauseInternal: true,
}

// ValidCause reports whether s is one of the Cause constants.
func ValidCause(s string) bool { return causes[s] }

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
	if err := validSpecs(t.Tools, ValidToolName, ToolNameRule); err != nil {
		return err
	}
	if len(t.MCP) > MaxMCPServers {
		return bad("at most %d MCP servers", MaxMCPServers)
	}
	seen := map[string]bool{}
	for i, s := range t.MCP {
		if !ValidToolName(s.Server) || seen[s.Server] {
			return bad("MCP server names must be unique and match %s", ToolNameRule)
		}
		seen[s.Server] = true
		if len(s.Tools) > MaxToolSpecs {
			return bad("at most %d tools per MCP server", MaxToolSpecs)
		}
		if err := validSpecs(s.Tools, ValidMCPToolName, MCPToolNameRule); err != nil {
			return err
		}
		names := make([]string, len(s.Tools))
		for j, spec := range s.Tools {
			names[j] = spec.Name
		}
		if a, b, clash := MCPFunctionNameClash(i, names); clash {
			return bad("MCP server %s: tools %q and %q get the same function name %q; declare only one of them", s.Server, a, b, MCPFunctionName(i, a))
		}
	}
	return nil
}

func validSpecs(specs []ToolSpec, valid func(string) bool, rule string) error {
	seen := map[string]bool{}
	for _, s := range specs {
		if !valid(s.Name) || seen[s.Name] {
			return fmt.Errorf("turn: tool names must be unique and match %s: %w", rule, ErrInvalid)
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

// DecodeReplyFrame parses a worker's final frame: stdout that is exactly
// one line (the reply object, then its only newline) holding a reply the
// worker exits 0 with (no failure cause). Such a frame is the whole reply:
// the worker has settled its history before writing it (pkg/worker), so
// the host answers from it before the worker's exit and cleans up after
// (docs/sealed-turns.md). Anything else is an error, and the host reads
// the worker's stdout to its end and its exit status as before.
func DecodeReplyFrame(frame []byte) (*Reply, error) {
	if len(frame) == 0 || frame[len(frame)-1] != '\n' || bytes.IndexByte(frame, '\n') != len(frame)-1 {
		return nil, fmt.Errorf("reply frame is not exactly one line: %w", ErrInvalid)
	}
	r, err := DecodeReply(frame)
	if err != nil {
		return nil, err
	}
	if r.Cause != "" {
		return nil, fmt.Errorf("reply frame of a failed worker: %w", ErrInvalid)
	}
	return r, nil
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
	if r.Cause != "" && (r.OK || !ValidCause(r.Cause)) {
		return nil, fmt.Errorf("reply cause is not a known failure cause of a failed reply: %w", ErrInvalid)
	}
	return &r, nil
}
