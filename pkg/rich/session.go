package rich

import (
	"context"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// The session and compaction shapes are pkg/sessions'.
type (
	Entry            = sessions.Entry
	EntryUsage       = sessions.Usage
	CompactionRecord = sessions.CompactionRecord
	SessionContext   = sessions.Context
	CompactRequest   = sessions.CompactRequest
	Compaction       = sessions.Compaction
	CompactAnswer    = sessions.CompactAnswer
	CompactReport    = sessions.Report
	Tiers            = sessions.Tiers
)

// Session entry types and compaction names.
const (
	TypeUser           = sessions.TypeUser
	TypeAssistant      = sessions.TypeAssistant
	TypeToolResult     = sessions.TypeToolResult
	TypeCompaction     = sessions.TypeCompaction
	EngineWorker       = sessions.EngineWorker
	MaxHostCompactions = sessions.MaxHostCompactions
	MaxReports         = sessions.MaxReports
)

// Session is one open session: the channel's conversation
// (*sessions.Session).
type Session interface {
	// Append writes e (an id and timestamp given when empty) and returns it.
	Append(e Entry) (Entry, error)
	// Context is the current context.
	Context() SessionContext
	Close() error
}

// Sessions opens the channel's session for a turn: the most recent one
// continued (after a fresh start, whose archive the host made, a new one).
// A corrupt session file is an error and is left untouched.
type Sessions interface {
	Open(fresh bool) (Session, error)
}

// WorkspaceSessions is the production Sessions: the JSONL files of
// pkg/sessions in the workspace, opened afresh for every turn.
type WorkspaceSessions struct{ Workspace string }

// Open implements Sessions. A fresh turn first archives the session files
// (sessions.Archive): the worker does it on the host's word because the
// host cannot enter the guest-owned workspace (its one capability is
// CAP_CHOWN); Archive replaces planted symlinks rather than following them
// either way.
func (w WorkspaceSessions) Open(fresh bool) (Session, error) {
	if fresh {
		if _, err := sessions.Archive(w.Workspace, time.Now()); err != nil {
			return nil, err
		}
	}
	s, err := sessions.Open(w.Workspace)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Reporter optionally tells the host about compactions (best effort).
type Reporter interface {
	Report(ctx context.Context, r *CompactReport) error
}
