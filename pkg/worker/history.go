package worker

import (
	"errors"
	"fmt"
	"os"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// History bounds (DESIGN.md section 6).
const (
	HistoryFile = "history.json"
	// MaxHistoryMessages is ten settled user/assistant exchanges.
	MaxHistoryMessages = 20
	// MaxHistoryEntryBytes bounds one entry's JSON-encoded content.
	MaxHistoryEntryBytes = 8 << 10
	// MaxHistoryFileBytes is the largest history.json the worker writes
	// (20 entries of at most 8 KiB of content plus their framing); a larger
	// file was not written by a worker and fails the turn.
	MaxHistoryFileBytes = MaxHistoryMessages*(MaxHistoryEntryBytes+64) + 2
)

// ErrHistory reports a history.json that cannot be used; it is never
// overwritten (only a reset turn replaces it).
var ErrHistory = errors.New("history corrupt")

// historyEntry is one settled message: user or assistant text only, never a
// tool transcript.
type historyEntry struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// loadHistory reads history.json from the workspace. A missing file is an
// empty history. Each entry is re-bounded to MaxHistoryEntryBytes.
func loadHistory(dirfd int) ([]historyEntry, int, error) {
	data, err := atomicfile.ReadAt(dirfd, HistoryFile, MaxHistoryFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w: %w", HistoryFile, err, ErrHistory)
	}
	var entries []historyEntry
	if err := protocol.DecodeStrict(data, &entries); err != nil || entries == nil {
		return nil, 0, fmt.Errorf("%s is not a JSON array of messages: %w", HistoryFile, ErrHistory)
	}
	if len(entries) > MaxHistoryMessages {
		return nil, 0, fmt.Errorf("%s holds %d messages, limit %d: %w", HistoryFile, len(entries), MaxHistoryMessages, ErrHistory)
	}
	truncated := 0
	for i := range entries {
		if entries[i].Role != "user" && entries[i].Role != "assistant" {
			return nil, 0, fmt.Errorf("%s message %d has a role other than user or assistant: %w", HistoryFile, i, ErrHistory)
		}
		var cut bool
		entries[i].Content, cut = promptText(entries[i].Content, MaxHistoryEntryBytes)
		if cut {
			truncated++
		}
	}
	return entries, truncated, nil
}

// saveHistory atomically replaces history.json with the last
// MaxHistoryMessages entries.
func saveHistory(dirfd int, entries []historyEntry) error {
	if len(entries) > MaxHistoryMessages {
		entries = entries[len(entries)-MaxHistoryMessages:]
	}
	data, err := marshal(entries)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	if err := atomicfile.WriteAt(dirfd, HistoryFile, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", HistoryFile, err)
	}
	return nil
}
