package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// Entry types. A session file's first line is its header (TypeSession);
// every later line is one of the others.
const (
	TypeSession    = "session"
	TypeUser       = "user"
	TypeAssistant  = "assistant"
	TypeToolResult = "toolResult"
	TypeCompaction = "compaction"
	// TypeReaders is the per-turn reader record of issue 16 (private tool
	// exchanges, readers.go): the entries after it, up to the next one,
	// belong to its turn's reader.
	TypeReaders = "readers"
)

// Version is the session file format this package writes and reads.
const Version = 1

// MaxIDBytes bounds an entry id.
const MaxIDBytes = 64

// Entry is one line of a session file. Which fields are set depends on
// Type; a field that does not belong to the type is refused.
type Entry struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Timestamp string `json:"timestamp"` // RFC 3339, UTC
	// Version: the header only.
	Version int `json:"version,omitempty"`
	// Content: user (a JSON string or an array of content blocks),
	// assistant and toolResult (an array of content blocks), in the
	// Anthropic Messages shape, kept as raw JSON.
	Content json.RawMessage `json:"content,omitempty"`
	// Usage and StopReason: assistant only, as the model reported them.
	Usage      *Usage `json:"usage,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
	// Compaction: compaction only.
	Compaction *CompactionRecord `json:"compaction,omitempty"`
	// Readers: readers only, a JSON object (issue 16; ReaderRecord).
	Readers json.RawMessage `json:"readers,omitempty"`
	// PrivateTo: toolResult only, the reader its results are private to
	// (issue 16): every other reader sees placeholders.
	PrivateTo string `json:"privateTo,omitempty"`
}

// Usage is the model's usage numbers of one response.
type Usage struct {
	InputTokens              int `json:"inputTokens"`
	OutputTokens             int `json:"outputTokens"`
	CacheReadInputTokens     int `json:"cacheReadInputTokens,omitempty"`
	CacheCreationInputTokens int `json:"cacheCreationInputTokens,omitempty"`
}

// Total is the context the response measured: its input (cached or not)
// and its output, which the next request carries.
func (u Usage) Total() int {
	return u.InputTokens + u.OutputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}

// CompactionRecord is a compaction as the session stores it: the summary
// that replaces every message before FirstKeptEntryID ("" when none is
// kept), the tokens the tiers measured before and after, and the engine
// (the host compactor's engine name, or EngineWorker for the worker's own
// summary).
type CompactionRecord struct {
	Summary          string `json:"summary"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	TokensBefore     int    `json:"tokensBefore"`
	TokensAfter      int    `json:"tokensAfter"`
	Engine           string `json:"engine"`
}

// EngineWorker is the engine of the worker's own summary.
const EngineWorker = "worker"

// ErrCorrupt reports a session file that is not a valid session (syntax,
// encoding, bounds, order); the file is left untouched.
var ErrCorrupt = errors.New("session file corrupt")

// ErrInvalid reports an entry Append refuses; nothing is written.
var ErrInvalid = errors.New("session entry invalid")

// decodeEntry decodes one line strictly: valid UTF-8, exactly one JSON
// object, no unknown field.
func decodeEntry(line []byte) (Entry, error) {
	var e Entry
	if !utf8.Valid(line) {
		return e, errors.New("not valid UTF-8")
	}
	if len(bytes.TrimSpace(line)) != len(line) {
		return e, errors.New("whitespace around the entry (the writer never puts it there)")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("not a valid entry: %s", jsonReason(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return e, errors.New("trailing data after the entry")
	}
	return e, nil
}

// jsonReason names a decoding failure without quoting the input.
func jsonReason(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("wrong type for field %q", te.Field)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "truncated JSON"
	}
	return "unknown field or malformed JSON"
}

// check validates e on its own (the header check and references are the
// caller's).
func (e *Entry) check() error {
	if e.ID == "" || len(e.ID) > MaxIDBytes {
		return fmt.Errorf("id must be 1 to %d bytes", MaxIDBytes)
	}
	for i := 0; i < len(e.ID); i++ {
		if c := e.ID[i]; c <= ' ' || c > '~' {
			return errors.New("id must be printable ASCII without spaces")
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, e.Timestamp); err != nil {
		return errors.New("timestamp must be RFC 3339")
	}
	if e.Type != TypeSession && e.Version != 0 {
		return errors.New("version belongs to the header only")
	}
	if e.Type != TypeAssistant && (e.Usage != nil || e.StopReason != "") {
		return errors.New("usage and stopReason belong to assistant entries only")
	}
	if e.Type != TypeCompaction && e.Compaction != nil {
		return errors.New("compaction belongs to compaction entries only")
	}
	if e.Type != TypeReaders && e.Readers != nil {
		return errors.New("readers belongs to readers entries only")
	}
	if e.Type != TypeToolResult && e.PrivateTo != "" {
		return errors.New("privateTo belongs to toolResult entries only")
	}
	if len(e.PrivateTo) > MaxReaderBytes || !utf8.ValidString(e.PrivateTo) {
		return fmt.Errorf("privateTo must be at most %d bytes of UTF-8", MaxReaderBytes)
	}
	switch e.Type {
	case TypeSession:
		if e.Version != Version || e.Content != nil {
			return fmt.Errorf("header must have version %d and no content", Version)
		}
	case TypeUser:
		if !isKind(e.Content, '"') && !isKind(e.Content, '[') {
			return errors.New("user content must be a string or an array of content blocks")
		}
	case TypeAssistant, TypeToolResult:
		if !isKind(e.Content, '[') {
			return fmt.Errorf("%s content must be an array of content blocks", e.Type)
		}
		if u := e.Usage; u != nil && (u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheReadInputTokens < 0 || u.CacheCreationInputTokens < 0) {
			return errors.New("usage numbers must not be negative")
		}
	case TypeCompaction:
		c := e.Compaction
		if c == nil || e.Content != nil {
			return errors.New("compaction entry needs its compaction and no content")
		}
		if c.Summary == "" || c.Engine == "" || len(c.Engine) > MaxIDBytes || c.TokensBefore < 0 || c.TokensAfter < 0 || len(c.FirstKeptEntryID) > MaxIDBytes {
			return errors.New("compaction needs a summary, an engine and non-negative token counts")
		}
	case TypeReaders:
		if !isKind(e.Readers, '{') || e.Content != nil {
			return errors.New("readers entry needs a readers object and no content")
		}
		if _, err := decodeReaders(e.Readers); err != nil {
			return err
		}
	default:
		return errors.New("unknown entry type")
	}
	return nil
}

// isKind reports whether raw is a JSON value starting with c (after
// whitespace). Raw values reach it only from encoding/json, which checked
// each is one valid value (a decoded line, a CompactRequest, or Append's
// json.Marshal before anything is written), so it does not scan them again.
func isKind(raw json.RawMessage, c byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == c
}

// isMessage reports whether the entry is part of the conversation sent to
// the model.
func (e *Entry) isMessage() bool {
	return e.Type == TypeUser || e.Type == TypeAssistant || e.Type == TypeToolResult
}
