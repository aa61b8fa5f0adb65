// Package richproto is the pull protocol of a rich channel (DESIGN.md
// section 13) between its long-lived worker, its channel broker and the
// host: what the worker announces (Ready), the turn it is handed (Turn, the
// answer of a long poll on /worker/next) and the reply packet it returns
// (Result). It holds types, bounds, their validation and the reply
// packet's stream decoder only (standard library), so the worker, the
// broker and the host agree on one shape.
// Guarantee: a value that passed Validate is within every bound below.
package richproto

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// SkillsPath is where a rich container sees the operator's skills tree
// (read-only), when the profile has one.
const SkillsPath = "/skills"

// Routes the worker calls on its broker socket.
const (
	RouteReady  = "/worker/ready"
	RouteNext   = "/worker/next"
	RouteResult = "/worker/result"
)

// Bounds (the seed's rich mode).
const (
	MaxTextChars      = 100_000 // current text, memory context, final text
	MaxIDChars        = 256     // speaker id, name, principal
	MaxReplyFiles     = 10
	MaxReplyFileBytes = 10 << 20
	MaxReplyFilesSum  = 50 << 20
	MaxPacketBytes    = 72 << 20 // an encoded reply packet
	MaxReadyBytes     = 4 << 10
)

// Thinking levels, lowest first; the host sets a turn's ceiling.
var ThinkingLevels = []string{"off", "low", "medium", "high", "xhigh"}

// ThinkingBudget is the budget_tokens of extended thinking a level stands
// for (0: thinking off), one table for the worker (what it asks for) and the
// broker (the ceiling it enforces). ok is false for an unknown level.
func ThinkingBudget(level string) (tokens int, ok bool) {
	switch level {
	case "off":
		return 0, true
	case "low":
		return 2_048, true
	case "medium":
		return 8_192, true
	case "high":
		return 16_384, true
	case "xhigh":
		return 32_768, true
	}
	return 0, false
}

// Tool bounds of a turn (the sealed protocol's: pkg/protocol).
const (
	MaxToolSpecs   = 64 // host tools, or tools of one MCP server
	MaxMCPServers  = 16
	MaxSchemaBytes = 16 << 10 // one tool's parameters
	MaxDescChars   = 4_096    // one tool's description
	MaxModelChars  = 256
	// MaxOutputTokens bounds Turn.MaxOutputTokens (the config's 200,000).
	MaxOutputTokens = 200_000
)

var (
	toolNameRe    = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)
	mcpToolNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
)

// ToolSpec is a public tool description the host hands the worker for the
// model (the same shape as protocol.ToolSpec): a host tool's name is its
// broker route's (/tools/<name>), an MCP tool's the server's own.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// MCPServerSpec lists the declared tools of one MCP server (route
// /mcp/<server>; no URL, ever).
type MCPServerSpec struct {
	Server string     `json:"server"`
	Tools  []ToolSpec `json:"tools"`
}

// Failure causes a worker names in a failed Result: fixed categories,
// never error text. The host logs a cause only when ValidCause accepts it.
const (
	CauseInvalidTurn = "invalid turn"
	CauseSession     = "session"   // session file corrupt, unreadable or unwritable
	CauseWorkspace   = "workspace" // memory store or workspace unusable
	CauseBroker      = "broker"    // a broker call failed or was refused
	CauseModel       = "model"     // the model's answer was unusable or refused
	CauseStream      = "stream"    // the model stream broke or went over a bound
	CauseBudget      = "budget"    // a context, call or deadline bound was reached
	CauseCompaction  = "compaction"
	CauseInternal    = "internal"
)

var causes = map[string]bool{
	CauseInvalidTurn: true, CauseSession: true, CauseWorkspace: true, CauseBroker: true, CauseModel: true,
	CauseStream: true, CauseBudget: true, CauseCompaction: true, CauseInternal: true,
}

// ValidCause reports whether s is one of the Cause constants.
func ValidCause(s string) bool { return causes[s] }

// ErrInvalid is the category of every refusal.
var ErrInvalid = errors.New("invalid rich packet")

func bad(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), ErrInvalid)
}

// Capabilities a worker declares in POST /worker/ready (the seed's handshake).
type Capabilities struct {
	PrivateTo     bool `json:"privateTo"`
	ReaderRecords bool `json:"readerRecords"`
}

// Ready is the body of POST /worker/ready. An empty body means an older
// worker (no capabilities), never implicit support.
type Ready struct {
	Capabilities   Capabilities `json:"capabilities"`
	PrivateHistory bool         `json:"privateHistory"`
}

// Speaker is the turn's host-bound author as the worker sees it.
type Speaker struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// Turn is what /worker/next answers with: one admitted turn.
type Turn struct {
	ID       string  `json:"id"` // 32 lowercase hex
	Text     string  `json:"text"`
	Speaker  Speaker `json:"speaker"`
	Thinking string  `json:"thinking"` // a ThinkingLevels value: the ceiling for this turn
	// DeadlineUnixMs bounds the whole turn.
	DeadlineUnixMs int64 `json:"deadlineUnixMs"`
	// Fresh: the session was archived; start a new one.
	Fresh bool `json:"fresh,omitempty"`
	// Model is the profile's model, sent in each request (the broker fixes
	// it whatever the worker sends); empty leaves the choice to the broker.
	Model string `json:"model,omitempty"`
	// MaxOutputTokens is the profile's output limit (the broker clamps
	// max_tokens to it), so the worker can leave room for the answer
	// beside the thinking budget; 0: unknown.
	MaxOutputTokens int `json:"maxOutputTokens,omitempty"`
	// Tools and MCP are the profile's host tools and MCP servers, offered
	// to the model as host_<name> and mcp_<index>_<tool> (as in the sealed
	// protocol.Turn); their calls go through the broker's /tools and /mcp
	// routes, which enforce the allow list whatever the worker sends.
	Tools []ToolSpec      `json:"tools,omitempty"`
	MCP   []MCPServerSpec `json:"mcp,omitempty"`
	// Attachments are the turn's files (attachments.go), fetched by the
	// broker on the worker's request by index.
	Attachments []Attachment `json:"attachments,omitempty"`
	// Reader is the turn's principal id, which the broker sets from the
	// bound identity when it hands the turn over ("" without one): the
	// reader of private tool exchanges (issue 16).
	Reader string `json:"reader,omitempty"`
}

// File is one reply file (base64 on the wire through encoding/json).
type File struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
	Data []byte `json:"data"`
}

// Result is the body of POST /worker/result: the reply packet of the
// admitted turn.
type Result struct {
	TurnID string `json:"turnId"`
	OK     bool   `json:"ok"`
	Text   string `json:"text"`
	Files  []File `json:"files,omitempty"`
	// Cause is a fixed failure category when OK is false.
	Cause string `json:"cause,omitempty"`
}

func validText(name, s string, max int) error {
	if !utf8.ValidString(s) {
		return bad("%s must be UTF-8", name)
	}
	if n := utf8.RuneCountInString(s); n > max {
		return bad("%s is %d characters; the limit is %d", name, n, max)
	}
	return nil
}

// ValidThinking reports whether s is a known level.
func ValidThinking(s string) bool {
	for _, l := range ThinkingLevels {
		if s == l {
			return true
		}
	}
	return false
}

// Validate checks a turn.
func (t *Turn) Validate() error {
	if len(t.ID) != 32 {
		return bad("turn id must be 32 hex characters")
	}
	for _, c := range t.ID {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return bad("turn id must be 32 hex characters")
		}
	}
	if err := validText("text", t.Text, MaxTextChars); err != nil {
		return err
	}
	if t.Speaker.ID == "" {
		return bad("speaker.id is required")
	}
	for _, f := range []struct{ n, v string }{{"speaker.id", t.Speaker.ID}, {"speaker.name", t.Speaker.Name}, {"reader", t.Reader}} {
		if err := validText(f.n, f.v, MaxIDChars); err != nil {
			return err
		}
	}
	if !ValidThinking(t.Thinking) {
		return bad("thinking must be one of %v", ThinkingLevels)
	}
	if t.DeadlineUnixMs <= 0 {
		return bad("deadlineUnixMs must be set")
	}
	if len(t.Model) > MaxModelChars || !utf8.ValidString(t.Model) {
		return bad("model must be at most %d bytes of UTF-8", MaxModelChars)
	}
	if t.MaxOutputTokens < 0 || t.MaxOutputTokens > MaxOutputTokens {
		return bad("maxOutputTokens must be 0 to %d", MaxOutputTokens)
	}
	if len(t.Tools) > MaxToolSpecs {
		return bad("at most %d host tools", MaxToolSpecs)
	}
	if err := validSpecs("tools", t.Tools, toolNameRe); err != nil {
		return err
	}
	if err := ValidAttachments(t.Attachments); err != nil {
		return err
	}
	if len(t.MCP) > MaxMCPServers {
		return bad("at most %d MCP servers", MaxMCPServers)
	}
	seen := map[string]bool{}
	for i, s := range t.MCP {
		if !toolNameRe.MatchString(s.Server) || seen[s.Server] {
			return bad("mcp[%d].server must be unique and match %s", i, toolNameRe)
		}
		seen[s.Server] = true
		if len(s.Tools) > MaxToolSpecs {
			return bad("at most %d tools per MCP server", MaxToolSpecs)
		}
		if err := validSpecs(fmt.Sprintf("mcp[%d].tools", i), s.Tools, mcpToolNameRe); err != nil {
			return err
		}
	}
	return nil
}

func validSpecs(field string, specs []ToolSpec, name *regexp.Regexp) error {
	seen := map[string]bool{}
	for i, s := range specs {
		if !name.MatchString(s.Name) || seen[s.Name] {
			return bad("%s[%d].name must be unique and match %s", field, i, name)
		}
		seen[s.Name] = true
		if !utf8.ValidString(s.Description) || utf8.RuneCountInString(s.Description) > MaxDescChars {
			return bad("%s[%d].description must be UTF-8 of at most %d characters", field, i, MaxDescChars)
		}
		if len(s.Parameters) > MaxSchemaBytes {
			return bad("%s[%d].parameters over %d bytes", field, i, MaxSchemaBytes)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(s.Parameters, &obj) != nil || obj == nil {
			return bad("%s[%d].parameters must be a JSON object", field, i)
		}
	}
	return nil
}

// Validate checks a reply packet.
func (r *Result) Validate() error {
	if len(r.TurnID) != 32 {
		return bad("turnId must be 32 hex characters")
	}
	if err := validText("text", r.Text, MaxTextChars); err != nil {
		return err
	}
	if len(r.Files) > MaxReplyFiles {
		return bad("at most %d reply files", MaxReplyFiles)
	}
	var sum int
	for i, f := range r.Files {
		if !ValidFileName(f.Name) {
			return bad("files[%d].name must be a plain file name of 1 to 255 bytes", i)
		}
		// The type reaches the frontend as is: bounded like an attachment's.
		if len(f.Type) > MaxAttachmentType || strings.IndexFunc(f.Type, func(c rune) bool { return c <= ' ' || c >= 0x7f }) >= 0 {
			return bad("files[%d].type must be a media type of at most %d printable bytes", i, MaxAttachmentType)
		}
		if len(f.Data) > MaxReplyFileBytes {
			return bad("files[%d] is over %d bytes", i, MaxReplyFileBytes)
		}
		sum += len(f.Data)
	}
	if sum > MaxReplyFilesSum {
		return bad("reply files total over %d bytes", MaxReplyFilesSum)
	}
	if !r.OK && len(r.Cause) > 64 {
		return bad("cause must be at most 64 bytes")
	}
	return nil
}
