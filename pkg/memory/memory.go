// Package memory is the worker's channel memory store: memory.json in the
// channel workspace, reached only through a directory descriptor so no path or
// symlink can lead a read or write out of the workspace. Speaker entries always
// belong to the current speaker whatever a tool call asks; every bound (256
// entries, 2,048 characters a value, 512 KiB of JSON, keys 1..128 characters)
// is refused with a clear tool error, and a corrupt or oversized store fails
// the turn without being overwritten.
package memory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Bounds of the store (DESIGN.md section 6).
const (
	FileName      = "memory.json"
	MaxEntries    = 256
	MaxValueChars = 2048
	MaxKeyChars   = 128
	MaxStoreBytes = 512 << 10 // JSON-encoded store
)

// Tool names the model sees.
const (
	ToolSet    = "memory_set"
	ToolGet    = "memory_get"
	ToolRemove = "memory_remove"
)

var (
	// ErrRefused is the category of a refused tool call: the message is safe
	// and useful to show the model (it never carries a stored value).
	ErrRefused = errors.New("memory tool refused")
	// ErrCorrupt reports a memory.json that is not a valid store; the turn fails.
	ErrCorrupt = errors.New("memory store corrupt")
)

// Scope names as tool arguments.
const (
	ScopeSpeaker = "speaker"
	ScopeChannel = "channel"
)

// Tools are the public descriptions of the memory tools.
var Tools = []protocol.ToolSpec{
	{
		Name:        ToolSet,
		Description: "Remember a speaker fact or a channel note. Speaker entries belong to the current speaker.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"},"text":{"type":"string"}},"required":["scope","key","text"],"additionalProperties":false}`),
	},
	{
		Name:        ToolGet,
		Description: "Read or search current-speaker facts or shared channel notes. Omit key to list entries.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"},"query":{"type":"string"}},"required":["scope"],"additionalProperties":false}`),
	},
	{
		Name:        ToolRemove,
		Description: "Forget one current-speaker fact or shared channel note.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"scope":{"type":"string","enum":["speaker","channel"]},"key":{"type":"string"}},"required":["scope","key"],"additionalProperties":false}`),
	},
}

// Entry is one stored fact. Scope is "channel" or "speaker:<speaker id>".
type Entry struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	Text  string `json:"text"`
}

// Item is what memory_get returns for one entry.
type Item struct {
	Key  string `json:"key"`
	Text string `json:"text"`
}

// Store is the memory of one channel workspace.
type Store struct {
	dirfd   int
	entries []Entry
}

// Open loads memory.json from the workspace open as dirfd. A missing file is
// an empty store; a symlink, non-regular, oversized or invalid file is an error
// and is left untouched.
func Open(dirfd int) (*Store, error) {
	data, err := atomicfile.ReadAt(dirfd, FileName, MaxStoreBytes)
	if errors.Is(err, os.ErrNotExist) {
		return &Store{dirfd: dirfd}, nil
	}
	if err != nil {
		// The cause stays wrapped so the worker can name its category.
		return nil, fmt.Errorf("memory: read %s: %w: %w", FileName, err, ErrCorrupt)
	}
	var entries []Entry
	if err := protocol.DecodeStrict(data, &entries); err != nil || entries == nil {
		return nil, fmt.Errorf("memory: %s is not a JSON array of entries: %w", FileName, ErrCorrupt)
	}
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("memory: %s holds %d entries, limit %d: %w", FileName, len(entries), MaxEntries, ErrCorrupt)
	}
	for i, e := range entries {
		if !validScope(e.Scope) || !validKey(e.Key) || !validText(e.Text) {
			return nil, fmt.Errorf("memory: %s entry %d out of bounds: %w", FileName, i, ErrCorrupt)
		}
	}
	return &Store{dirfd: dirfd, entries: entries}, nil
}

func validScope(s string) bool {
	return s == ScopeChannel || (strings.HasPrefix(s, ScopeSpeaker+":") && utf8.ValidString(s))
}

func validKey(k string) bool {
	n := utf8.RuneCountInString(k)
	return utf8.ValidString(k) && k == strings.TrimSpace(k) && n >= 1 && n <= MaxKeyChars
}

func validText(t string) bool {
	return utf8.ValidString(t) && strings.TrimSpace(t) != "" && utf8.RuneCountInString(t) <= MaxValueChars
}

// Len is the number of stored entries.
func (s *Store) Len() int { return len(s.entries) }

func refuse(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, ErrRefused)...)
}

// args are the memory tools' arguments; unknown fields are refused.
type args struct {
	Scope *string `json:"scope"`
	Key   *string `json:"key"`
	Text  *string `json:"text"`
	Query *string `json:"query"`
}

// Call runs one memory tool with the model's JSON argument object on behalf
// of speakerID. The result is the text for the model; an error wrapping
// ErrRefused has a message fit for the model, any other error is an I/O
// failure.
func (s *Store) Call(tool string, input json.RawMessage, speakerID string) (string, error) {
	var a args
	if err := protocol.DecodeStrict(input, &a); err != nil {
		return "", refuse("arguments must be a JSON object with only scope, key, text and query")
	}
	if a.Scope == nil || (*a.Scope != ScopeSpeaker && *a.Scope != ScopeChannel) {
		return "", refuse("scope must be speaker or channel")
	}
	// The speaker namespace is always the current speaker's: no argument
	// can name another.
	scope := ScopeChannel
	if *a.Scope == ScopeSpeaker {
		scope = ScopeSpeaker + ":" + speakerID
	}
	var key string
	if a.Key != nil {
		key = strings.TrimSpace(*a.Key)
		if n := utf8.RuneCountInString(key); n < 1 || n > MaxKeyChars {
			return "", refuse("key must be 1 to %d characters", MaxKeyChars)
		}
	}
	switch tool {
	case ToolGet:
		query := ""
		if a.Query != nil {
			query = strings.ToLower(*a.Query)
		}
		if a.Text != nil {
			return "", refuse("memory_get takes scope, key and query only")
		}
		return encode(s.Get(scope, a.Key != nil, key, query))
	case ToolSet, ToolRemove:
		if a.Key == nil {
			return "", refuse("key is required")
		}
		if a.Query != nil {
			return "", refuse("%s does not take a query", tool)
		}
	default:
		return "", refuse("unknown memory tool")
	}
	next := make([]Entry, 0, len(s.entries)+1)
	found := false
	for _, e := range s.entries {
		if e.Scope == scope && e.Key == key {
			found = true
			continue
		}
		next = append(next, e)
	}
	if tool == ToolRemove {
		if a.Text != nil {
			return "", refuse("memory_remove takes scope and key only")
		}
		if !found {
			return "", refuse("no entry with that key in this scope")
		}
		return "Forgotten.", s.save(next)
	}
	if a.Text == nil || !validText(*a.Text) {
		return "", refuse("text must be 1 to %d characters", MaxValueChars)
	}
	next = append(next, Entry{Scope: scope, Key: key, Text: *a.Text})
	if len(next) > MaxEntries {
		return "", refuse("memory capacity reached: at most %d entries; remove one first", MaxEntries)
	}
	return "Saved.", s.save(next)
}

// Get lists the entries of a resolved scope, optionally of one key, whose
// "key text" contains the lower-cased query (case-insensitive).
func (s *Store) Get(scope string, byKey bool, key, query string) []Item {
	items := []Item{}
	for _, e := range s.entries {
		if e.Scope != scope || (byKey && e.Key != key) {
			continue
		}
		if !strings.Contains(strings.ToLower(e.Key+" "+e.Text), query) {
			continue
		}
		items = append(items, Item{Key: e.Key, Text: e.Text})
	}
	return items
}

// Preview is the JSON list of a scope as memory_get returns it, for the
// system prompt (the caller bounds it).
func (s *Store) Preview(scope, speakerID string) string {
	if scope == ScopeSpeaker {
		scope = ScopeSpeaker + ":" + speakerID
	}
	text, _ := encode(s.Get(scope, false, "", ""))
	return text
}

func (s *Store) save(next []Entry) error {
	data, err := Marshal(next)
	if err != nil {
		return err
	}
	if len(data) > MaxStoreBytes {
		return refuse("memory capacity reached: the store would exceed %d KiB; remove entries first", MaxStoreBytes>>10)
	}
	if err := atomicfile.WriteAt(s.dirfd, FileName, data, 0o600); err != nil {
		return fmt.Errorf("memory: write %s: %w", FileName, err)
	}
	s.entries = next
	return nil
}

func encode(v any) (string, error) {
	b, err := Marshal(v)
	return string(b), err
}

// Marshal encodes v as compact JSON without HTML escaping, the byte count
// every JSON budget of the worker is measured in.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
