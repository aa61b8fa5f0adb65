package rich

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// TestWorkspaceSessionsFresh: a fresh turn archives the conversation and
// starts a new one; a plain turn continues it.
func TestWorkspaceSessionsFresh(t *testing.T) {
	ws := t.TempDir()
	store := WorkspaceSessions{Workspace: ws}
	s, err := store.Open(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(Entry{Type: TypeUser, Content: []byte(`"before"`)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = store.Open(false)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Context().Messages); n != 1 {
		t.Fatalf("a plain turn sees %d messages, want 1", n)
	}
	s.Close()
	s, err = store.Open(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := len(s.Context().Messages); n != 0 {
		t.Fatalf("a fresh turn sees %d messages, want 0", n)
	}
	archived, _ := filepath.Glob(filepath.Join(ws, sessions.DirName, sessions.ArchiveDirName, "*", "*"+sessions.Ext))
	if len(archived) != 1 {
		t.Fatalf("archived %v, want the one earlier session", archived)
	}
	if _, err := os.Stat(archived[0]); err != nil {
		t.Fatal(err)
	}
}
