package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func user(text string) Entry {
	b, _ := json.Marshal(text)
	return Entry{Type: TypeUser, Content: b}
}

func assistant(text string, usage *Usage) Entry {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return Entry{Type: TypeAssistant, Content: b, Usage: usage, StopReason: "end_turn"}
}

func mustOpen(t *testing.T, ws string) *Session {
	t.Helper()
	s, err := Open(ws)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustAppend(t *testing.T, s *Session, e Entry) Entry {
	t.Helper()
	got, err := s.Append(e)
	if err != nil {
		t.Fatalf("Append(%s): %v", e.Type, err)
	}
	return got
}

func texts(t *testing.T, es []Entry) []string {
	t.Helper()
	var out []string
	for _, e := range es {
		out = append(out, e.Type+":"+string(e.Content))
	}
	return out
}

func TestContinuesAcrossReopen(t *testing.T) {
	ws := t.TempDir()
	s := mustOpen(t, ws)
	mustAppend(t, s, user("one"))
	mustAppend(t, s, assistant("two", &Usage{InputTokens: 10, OutputTokens: 2}))
	name := s.Name()
	s.Close()

	// A container restart: a new process opens the same workspace.
	s2 := mustOpen(t, ws)
	if s2.Name() != name {
		t.Fatalf("reopened %s, want the most recent %s", s2.Name(), name)
	}
	mustAppend(t, s2, user("three"))
	s2.Close()
	s3 := mustOpen(t, ws)
	got := texts(t, s3.Context().Messages)
	want := []string{`user:"one"`, `assistant:[{"text":"two","type":"text"}]`, `user:"three"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("context = %q, want %q", got, want)
	}
	files, _ := filepath.Glob(filepath.Join(ws, DirName, "*"+Ext))
	if len(files) != 1 {
		t.Fatalf("session files = %v, want one", files)
	}
	st, _ := os.Stat(filepath.Join(ws, DirName, name))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
}

func TestOpenPicksMostRecentlyModified(t *testing.T) {
	ws := t.TempDir()
	s := mustOpen(t, ws)
	old := s.Name()
	s.Close()
	dir := filepath.Join(ws, DirName)
	data, _ := os.ReadFile(filepath.Join(dir, old))
	newer := "0000-newer" + Ext // sorts first by name, newer by mtime
	if err := os.WriteFile(filepath.Join(dir, newer), data, 0o600); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, old), past, past)
	s2 := mustOpen(t, ws)
	if s2.Name() != newer {
		t.Fatalf("opened %s, want %s", s2.Name(), newer)
	}
}

func TestCompactionContext(t *testing.T) {
	ws := t.TempDir()
	s := mustOpen(t, ws)
	mustAppend(t, s, user("a"))
	mustAppend(t, s, assistant("b", &Usage{InputTokens: 400_000}))
	c := mustAppend(t, s, user("c"))
	mustAppend(t, s, assistant("d", nil))
	mustAppend(t, s, Entry{Type: TypeCompaction, Compaction: &CompactionRecord{Summary: "S", FirstKeptEntryID: c.ID, TokensBefore: 400_010, TokensAfter: 20, Engine: "ext"}})
	mustAppend(t, s, user("e"))
	mustAppend(t, s, Entry{Type: TypeReaders, Readers: json.RawMessage(`{"turn":"x"}`)})
	check := func(s *Session) {
		t.Helper()
		ctx := s.Context()
		if ctx.Summary != "S" || ctx.Kept != 2 {
			t.Fatalf("summary %q kept %d, want S and 2", ctx.Summary, ctx.Kept)
		}
		got := texts(t, ctx.Messages)
		want := []string{`user:"c"`, `assistant:[{"text":"d","type":"text"}]`, `user:"e"`}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("context = %q, want %q", got, want)
		}
		// Usage before the compaction does not count: estimate instead.
		if n := ctx.Tokens(); n > 1000 {
			t.Fatalf("Tokens = %d: usage from before the compaction was used", n)
		}
		if n := len(s.Entries()); n != 5 {
			t.Fatalf("Entries = %d, want 5 (c, d, compaction, e, readers)", n)
		}
	}
	check(s)
	s.Close()
	check(mustOpen(t, ws))
}

func TestAppendRefusals(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	first := mustAppend(t, s, user("a"))
	before := s.Size()
	cases := []struct {
		name string
		e    Entry
		want error
	}{
		{"header", Entry{Type: TypeSession, Version: 1}, ErrInvalid},
		{"unknown type", Entry{Type: "system", Content: json.RawMessage(`"x"`)}, ErrInvalid},
		{"user without content", Entry{Type: TypeUser}, ErrInvalid},
		{"assistant with string content", Entry{Type: TypeAssistant, Content: json.RawMessage(`"x"`)}, ErrInvalid},
		{"usage on a user entry", Entry{Type: TypeUser, Content: json.RawMessage(`"x"`), Usage: &Usage{}}, ErrInvalid},
		{"duplicate id", Entry{Type: TypeUser, ID: first.ID, Content: json.RawMessage(`"x"`)}, ErrInvalid},
		{"compaction keeping an unknown entry", Entry{Type: TypeCompaction, Compaction: &CompactionRecord{Summary: "s", FirstKeptEntryID: "nope", Engine: "e"}}, ErrInvalid},
		{"compaction without summary", Entry{Type: TypeCompaction, Compaction: &CompactionRecord{Engine: "e"}}, ErrInvalid},
		{"readers not an object", Entry{Type: TypeReaders, Readers: json.RawMessage(`[]`)}, ErrInvalid},
		{"readers without a turn", Entry{Type: TypeReaders, Readers: json.RawMessage(`{"reader":"p"}`)}, ErrInvalid},
		{"readers with an unknown field", Entry{Type: TypeReaders, Readers: json.RawMessage(`{"turn":"t","who":"p"}`)}, ErrInvalid},
		{"readers with a reader too long", Entry{Type: TypeReaders, Readers: ReadersJSON(ReaderRecord{Turn: "t", Reader: strings.Repeat("p", MaxReaderBytes+1)})}, ErrInvalid},
		{"privateTo on a user entry", Entry{Type: TypeUser, Content: json.RawMessage(`"x"`), PrivateTo: "p"}, ErrInvalid},
		{"privateTo on an assistant entry", Entry{Type: TypeAssistant, Content: json.RawMessage(`[]`), PrivateTo: "p"}, ErrInvalid},
		{"privateTo too long", Entry{Type: TypeToolResult, Content: json.RawMessage(`[]`), PrivateTo: strings.Repeat("p", MaxReaderBytes+1)}, ErrInvalid},
		{"privateTo not UTF-8", Entry{Type: TypeToolResult, Content: json.RawMessage(`[]`), PrivateTo: "p\xff"}, ErrInvalid},
		{"line over MaxLineBytes", user(strings.Repeat("x", MaxLineBytes)), ErrInvalid},
		{"bad timestamp", Entry{Type: TypeUser, Timestamp: "yesterday", Content: json.RawMessage(`"x"`)}, ErrInvalid},
		{"id with a space", Entry{Type: TypeUser, ID: "a b", Content: json.RawMessage(`"x"`)}, ErrInvalid},
	}
	for _, c := range cases {
		if _, err := s.Append(c.e); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if s.Size() != before {
		t.Fatalf("refused entries wrote %d bytes", s.Size()-before)
	}
	if n := len(s.Entries()); n != 1 {
		t.Fatalf("refused entries changed the context: %d entries", n)
	}
}

func TestAppendFull(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	s.size = MaxFileBytes - 10 // as if the file were nearly full
	if _, err := s.Append(user("hello")); !errors.Is(err, ErrFull) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
}

// corruptCases are session files Open must refuse, byte for byte untouched.
func corruptCases(t *testing.T) map[string][]byte {
	header := `{"type":"session","id":"h1","timestamp":"2026-11-30T10:00:00Z","version":1}` + "\n"
	line := `{"type":"user","id":"u1","timestamp":"2026-11-30T10:00:01Z","content":"hi"}` + "\n"
	return map[string][]byte{
		"truncated json line":  []byte(header + line + `{"type":"user","id":"u2","timest`),
		"no final newline":     []byte(header + strings.TrimSuffix(line, "\n")),
		"invalid utf-8":        []byte(header + `{"type":"user","id":"u1","timestamp":"2026-11-30T10:00:01Z","content":"h` + "\xff" + `i"}` + "\n"),
		"unknown field":        []byte(header + `{"type":"user","id":"u1","timestamp":"2026-11-30T10:00:01Z","content":"hi","x":1}` + "\n"),
		"no header":            []byte(line),
		"second header":        []byte(header + header),
		"empty file":           {},
		"empty line":           []byte(header + "\n"),
		"duplicate id":         []byte(header + line + line),
		"trailing data":        []byte(header + `{"type":"user","id":"u1","timestamp":"2026-11-30T10:00:01Z","content":"hi"} {}` + "\n"),
		"wrong version":        []byte(strings.Replace(header, `"version":1`, `"version":2`, 1)),
		"dangling first kept":  []byte(header + line + `{"type":"compaction","id":"c1","timestamp":"2026-11-30T10:00:02Z","compaction":{"summary":"s","firstKeptEntryId":"zz","tokensBefore":1,"tokensAfter":1,"engine":"e"}}` + "\n"),
		"oversized line":       []byte(header + `{"type":"user","id":"u1","timestamp":"2026-11-30T10:00:01Z","content":"` + strings.Repeat("a", MaxLineBytes) + `"}` + "\n"),
		"crlf line":            []byte(header + strings.TrimSuffix(line, "\n") + "\r\n"),
		"assistant string":     []byte(header + `{"type":"assistant","id":"a1","timestamp":"2026-11-30T10:00:01Z","content":"hi"}` + "\n"),
		"negative usage":       []byte(header + `{"type":"assistant","id":"a1","timestamp":"2026-11-30T10:00:01Z","content":[],"usage":{"inputTokens":-1,"outputTokens":0}}` + "\n"),
		"unknown type":         []byte(header + `{"type":"system","id":"s1","timestamp":"2026-11-30T10:00:01Z","content":"hi"}` + "\n"),
		"array instead object": []byte(header + "[]\n"),
	}
}

func TestCorruptFileFailsAndIsLeftUntouched(t *testing.T) {
	for name, data := range corruptCases(t) {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			dir := filepath.Join(ws, DirName)
			os.Mkdir(dir, 0o700)
			p := filepath.Join(dir, "s"+Ext)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			st0, _ := os.Stat(p)
			s, err := Open(ws)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a corrupt session")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), "s"+Ext) {
				t.Errorf("error %q does not name the file", err)
			}
			got, _ := os.ReadFile(p)
			if !bytes.Equal(got, data) {
				t.Fatal("the corrupt file changed")
			}
			st1, _ := os.Stat(p)
			if !st1.ModTime().Equal(st0.ModTime()) {
				t.Fatal("the corrupt file's mtime changed")
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("sessions/ holds %d entries, want the corrupt file only", len(ents))
			}
		})
	}
}

func TestOversizedFileFailsUntouched(t *testing.T) {
	ws := t.TempDir()
	dir := filepath.Join(ws, DirName)
	os.Mkdir(dir, 0o700)
	p := filepath.Join(dir, "big"+Ext)
	f, _ := os.Create(p)
	f.WriteString(`{"type":"session","id":"h1","timestamp":"2026-11-30T10:00:00Z","version":1}` + "\n")
	f.Truncate(MaxFileBytes + 1) // sparse
	f.Close()
	_, err := Open(ws)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("err = %v, want ErrCorrupt naming the limit", err)
	}
	if st, _ := os.Stat(p); st.Size() != MaxFileBytes+1 {
		t.Fatalf("size changed to %d", st.Size())
	}
}

func TestPlantedSymlinks(t *testing.T) {
	t.Run("sessions dir", func(t *testing.T) {
		ws, outside := t.TempDir(), t.TempDir()
		if err := os.Symlink(outside, filepath.Join(ws, DirName)); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ws); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Fatalf("err = %v, want a refusal naming the symlink", err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Fatal("Open wrote through the planted symlink")
		}
	})
	t.Run("session file", func(t *testing.T) {
		ws, outside := t.TempDir(), t.TempDir()
		target := filepath.Join(outside, "victim"+Ext)
		victim := []byte(`{"type":"session","id":"h1","timestamp":"2026-11-30T10:00:00Z","version":1}` + "\n")
		os.WriteFile(target, victim, 0o600)
		os.Mkdir(filepath.Join(ws, DirName), 0o700)
		link := filepath.Join(ws, DirName, "zzz"+Ext)
		os.Symlink(target, link)
		s := mustOpen(t, ws)
		if s.Name() == "zzz"+Ext {
			t.Fatal("Open continued a symlinked session file")
		}
		mustAppend(t, s, user("x"))
		if got, _ := os.ReadFile(target); !bytes.Equal(got, victim) {
			t.Fatal("the symlink's target changed")
		}
	})
	t.Run("workspace itself", func(t *testing.T) {
		real := t.TempDir()
		ws := filepath.Join(t.TempDir(), "ws")
		os.Symlink(real, ws)
		if _, err := Open(ws); err == nil {
			t.Fatal("Open followed a symlinked workspace")
		}
	})
	t.Run("sessions is a file", func(t *testing.T) {
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, DirName), []byte("x"), 0o600)
		if _, err := Open(ws); err == nil {
			t.Fatal("Open accepted a regular file as sessions/")
		}
	})
}

func TestTooManyDirEntries(t *testing.T) {
	ws := t.TempDir()
	dir := filepath.Join(ws, DirName)
	os.Mkdir(dir, 0o700)
	for i := 0; i <= MaxDirEntries; i++ {
		os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o600)
	}
	if _, err := Open(ws); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err = %v, want the entry bound", err)
	}
}

// TestReaderRecords: every message maps to its turn's reader record, the
// record the kept entries fall under survives a compaction (and a reopen),
// and privateTo is kept on tool results.
func TestReaderRecords(t *testing.T) {
	ws := t.TempDir()
	s := mustOpen(t, ws)
	mustAppend(t, s, Entry{Type: TypeReaders, Readers: ReadersJSON(ReaderRecord{Turn: "t1", Reader: "pA", PrivateMemory: true})})
	mustAppend(t, s, user("a"))
	a := mustAppend(t, s, assistant("b", nil))
	r := mustAppend(t, s, Entry{Type: TypeToolResult, Content: json.RawMessage(`[]`), PrivateTo: "pA"})
	mustAppend(t, s, Entry{Type: TypeReaders, Readers: ReadersJSON(ReaderRecord{Turn: "t2", Reader: "pB"})})
	u := mustAppend(t, s, user("c"))
	mustAppend(t, s, assistant("d", nil))
	check := func(s *Session, wantA bool) {
		t.Helper()
		c := s.Context()
		if got := c.Owner[u.ID]; got.Reader != "pB" || got.Turn != "t2" || got.PrivateMemory {
			t.Errorf("owner of %s = %+v, want pB of t2", u.ID, got)
		}
		if got, ok := c.Owner[a.ID]; wantA && (!ok || got.Reader != "pA" || !got.PrivateMemory) {
			t.Errorf("owner of %s = %+v, want pA of t1, tainted", a.ID, got)
		}
		for _, e := range c.Messages {
			if e.Type == TypeReaders {
				t.Errorf("a reader record among the messages")
			}
			if e.ID == r.ID && e.PrivateTo != "pA" {
				t.Errorf("privateTo lost: %+v", e)
			}
		}
	}
	check(s, true)
	// Compaction keeping from the middle of t1's turn: t1's record stays.
	mustAppend(t, s, Entry{Type: TypeCompaction, Compaction: &CompactionRecord{Summary: "S", FirstKeptEntryID: a.ID, Engine: "e"}})
	check(s, true)
	s.Close()
	s = mustOpen(t, ws)
	check(s, true)
	// Compaction keeping t2 only.
	mustAppend(t, s, Entry{Type: TypeCompaction, Compaction: &CompactionRecord{Summary: "S2", FirstKeptEntryID: u.ID, Engine: "e"}})
	check(s, false)
	s.Close()
	s = mustOpen(t, ws)
	defer s.Close()
	check(s, false)
}
