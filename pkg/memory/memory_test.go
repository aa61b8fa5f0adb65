package memory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(openDir(t, dir))
	if err != nil {
		t.Fatalf("Open empty: %v", err)
	}
	return s, dir
}

func call(t *testing.T, s *Store, tool, args, speaker string) (string, error) {
	t.Helper()
	return s.Call(tool, json.RawMessage(args), speaker)
}

func mustCall(t *testing.T, s *Store, tool, args, speaker string) string {
	t.Helper()
	out, err := call(t, s, tool, args, speaker)
	if err != nil {
		t.Fatalf("%s %s: %v", tool, args, err)
	}
	return out
}

func TestSpeakerScopeIsAlwaysCurrentSpeaker(t *testing.T) {
	s, dir := newStore(t)
	mustCall(t, s, ToolSet, `{"scope":"speaker","key":"color","text":"blue"}`, "alice")
	// Bob cannot read, search or remove Alice's entry, whatever he passes.
	for _, args := range []string{
		`{"scope":"speaker"}`,
		`{"scope":"speaker","key":"color"}`,
		`{"scope":"speaker","query":"blue"}`,
	} {
		if got := mustCall(t, s, ToolGet, args, "bob"); got != "[]" {
			t.Errorf("bob get %s = %s, want []", args, got)
		}
	}
	if _, err := call(t, s, ToolRemove, `{"scope":"speaker","key":"color"}`, "bob"); !errors.Is(err, ErrRefused) {
		t.Errorf("bob remove alice's key: err %v, want ErrRefused", err)
	}
	// A scope naming another speaker is refused, not interpreted.
	if _, err := call(t, s, ToolGet, `{"scope":"speaker:alice"}`, "bob"); !errors.Is(err, ErrRefused) {
		t.Errorf("scope speaker:alice: err %v, want ErrRefused", err)
	}
	if got := mustCall(t, s, ToolGet, `{"scope":"speaker"}`, "alice"); got != `[{"key":"color","text":"blue"}]` {
		t.Errorf("alice get = %s", got)
	}
	if got := mustCall(t, s, ToolGet, `{"scope":"channel"}`, "alice"); got != "[]" {
		t.Errorf("channel get = %s, want [] (speaker entry leaked into channel scope)", got)
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	if want := `[{"scope":"speaker:alice","key":"color","text":"blue"}]`; string(data) != want {
		t.Errorf("memory.json = %s, want %s", data, want)
	}
}

func TestChannelScopeShared(t *testing.T) {
	s, _ := newStore(t)
	mustCall(t, s, ToolSet, `{"scope":"channel","key":"rules","text":"be kind"}`, "alice")
	if got := mustCall(t, s, ToolGet, `{"scope":"channel","key":" rules "}`, "bob"); got != `[{"key":"rules","text":"be kind"}]` {
		t.Errorf("bob channel get = %s", got)
	}
}

func TestSearchCaseInsensitiveKeyAndText(t *testing.T) {
	s, _ := newStore(t)
	mustCall(t, s, ToolSet, `{"scope":"channel","key":"Pets","text":"a cat named Tom"}`, "a")
	mustCall(t, s, ToolSet, `{"scope":"channel","key":"food","text":"Pizza on Friday"}`, "a")
	tests := []struct{ query, want string }{
		{"PETS", `[{"key":"Pets","text":"a cat named Tom"}]`},
		{"pizza", `[{"key":"food","text":"Pizza on Friday"}]`},
		{"tom", `[{"key":"Pets","text":"a cat named Tom"}]`},
		{"s a", `[{"key":"Pets","text":"a cat named Tom"}]`}, // key and text joined by a space
		{"nothing", `[]`},
		{"", `[{"key":"Pets","text":"a cat named Tom"},{"key":"food","text":"Pizza on Friday"}]`},
	}
	for _, tt := range tests {
		got := mustCall(t, s, ToolGet, fmt.Sprintf(`{"scope":"channel","query":%q}`, tt.query), "a")
		if got != tt.want {
			t.Errorf("query %q = %s, want %s", tt.query, got, tt.want)
		}
	}
}

func TestSetReplacesAndRemove(t *testing.T) {
	s, dir := newStore(t)
	mustCall(t, s, ToolSet, `{"scope":"channel","key":"k","text":"one"}`, "a")
	if got := mustCall(t, s, ToolSet, `{"scope":"channel","key":" k ","text":"two"}`, "a"); got != "Saved." {
		t.Errorf("set = %q, want Saved.", got)
	}
	if s.Len() != 1 {
		t.Errorf("Len = %d after replacing, want 1", s.Len())
	}
	if got := mustCall(t, s, ToolRemove, `{"scope":"channel","key":"k"}`, "a"); got != "Forgotten." {
		t.Errorf("remove = %q, want Forgotten.", got)
	}
	if _, err := call(t, s, ToolRemove, `{"scope":"channel","key":"k"}`, "a"); err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no entry") {
		t.Errorf("second remove: err %v, want refused 'no entry'", err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	if string(data) != "[]" {
		t.Errorf("memory.json after removal = %s, want []", data)
	}
	// Reopening sees the persisted state.
	s2, err := Open(openDir(t, dir))
	if err != nil || s2.Len() != 0 {
		t.Errorf("reopen: len %v err %v", s2, err)
	}
}

func TestRefusals(t *testing.T) {
	long := strings.Repeat("x", MaxKeyChars+1)
	tests := []struct {
		name, tool, args, want string
	}{
		{"no scope", ToolGet, `{}`, "scope must be speaker or channel"},
		{"bad scope", ToolSet, `{"scope":"global","key":"k","text":"t"}`, "scope must be speaker or channel"},
		{"empty key", ToolSet, `{"scope":"channel","key":"   ","text":"t"}`, "key must be 1 to 128"},
		{"long key", ToolSet, `{"scope":"channel","key":"` + long + `","text":"t"}`, "key must be 1 to 128"},
		{"missing key set", ToolSet, `{"scope":"channel","text":"t"}`, "key is required"},
		{"missing key remove", ToolRemove, `{"scope":"channel"}`, "key is required"},
		{"empty text", ToolSet, `{"scope":"channel","key":"k","text":"  "}`, "text must be 1 to 2048"},
		{"missing text", ToolSet, `{"scope":"channel","key":"k"}`, "text must be 1 to 2048"},
		{"long text", ToolSet, `{"scope":"channel","key":"k","text":"` + strings.Repeat("é", MaxValueChars+1) + `"}`, "text must be 1 to 2048"},
		{"unknown field", ToolSet, `{"scope":"channel","key":"k","text":"t","owner":"x"}`, "arguments must be"},
		{"not object", ToolGet, `[1]`, "arguments must be"},
		{"key not string", ToolGet, `{"scope":"channel","key":5}`, "arguments must be"},
		{"unknown tool", "memory_nuke", `{"scope":"channel","key":"k"}`, "unknown memory tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := newStore(t)
			_, err := call(t, s, tt.tool, tt.args, "a")
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrRefused containing %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, FileName)); !os.IsNotExist(err) {
				t.Errorf("refused call wrote memory.json (stat err %v)", err)
			}
		})
	}
}

func TestValueExactlyAtLimitAccepted(t *testing.T) {
	s, _ := newStore(t)
	text := strings.Repeat("é", MaxValueChars)
	key := strings.Repeat("k", MaxKeyChars)
	if _, err := call(t, s, ToolSet, `{"scope":"channel","key":"`+key+`","text":"`+text+`"}`, "a"); err != nil {
		t.Errorf("value of exactly %d chars and key of %d: %v", MaxValueChars, MaxKeyChars, err)
	}
}

func TestEntryCap(t *testing.T) {
	s, dir := newStore(t)
	for i := 0; i < MaxEntries; i++ {
		mustCall(t, s, ToolSet, fmt.Sprintf(`{"scope":"channel","key":"k%d","text":"v"}`, i), "a")
	}
	before, _ := os.ReadFile(filepath.Join(dir, FileName))
	_, err := call(t, s, ToolSet, `{"scope":"channel","key":"one-more","text":"v"}`, "a")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "at most 256 entries") {
		t.Fatalf("257th entry: err %v, want refusal naming the entry cap", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, FileName))
	if !bytes.Equal(before, after) || s.Len() != MaxEntries {
		t.Errorf("refused set changed the store (len %d)", s.Len())
	}
	// Replacing an existing key at the cap is still allowed.
	mustCall(t, s, ToolSet, `{"scope":"channel","key":"k0","text":"new"}`, "a")
}

func TestByteCap(t *testing.T) {
	s, dir := newStore(t)
	text, _ := json.Marshal("a" + strings.Repeat("\u0001", MaxValueChars-1)) // 6 JSON bytes a character
	var err error
	n := 0
	for ; n < MaxEntries; n++ {
		if _, err = call(t, s, ToolSet, fmt.Sprintf(`{"scope":"channel","key":"k%d","text":%s}`, n, text), "a"); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "512 KiB") {
		t.Fatalf("after %d entries: err %v, want refusal naming the 512 KiB cap", n, err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	if len(data) > MaxStoreBytes || s.Len() != n {
		t.Errorf("store %d bytes, %d entries; want <= %d bytes and %d entries", len(data), s.Len(), MaxStoreBytes, n)
	}
}

func TestOpenRefusesCorruptAndLeavesIt(t *testing.T) {
	big := make([]byte, MaxStoreBytes+1)
	for i := range big {
		big[i] = ' '
	}
	copy(big, "[]")
	tooMany := "[" + strings.TrimSuffix(strings.Repeat(`{"scope":"channel","key":"k","text":"t"},`, MaxEntries+1), ",") + "]"
	tests := map[string][]byte{
		"not json":    []byte("{nope"),
		"object":      []byte(`{"scope":"channel"}`),
		"null":        []byte(`null`),
		"wrong types": []byte(`[{"scope":1,"key":"k","text":"t"}]`),
		"bad scope":   []byte(`[{"scope":"global","key":"k","text":"t"}]`),
		"empty key":   []byte(`[{"scope":"channel","key":"","text":"t"}]`),
		"extra field": []byte(`[{"scope":"channel","key":"k","text":"t","x":1}]`),
		"too many":    []byte(tooMany),
		"oversized":   big,
		"trailing":    []byte(`[] []`),
		"long value":  []byte(`[{"scope":"channel","key":"k","text":"` + strings.Repeat("v", MaxValueChars+1) + `"}]`),
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, FileName)
			if err := os.WriteFile(p, content, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(openDir(t, dir)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: err %v, want ErrCorrupt", err)
			}
			got, _ := os.ReadFile(p)
			if !bytes.Equal(got, content) {
				t.Errorf("memory.json changed")
			}
		})
	}
}

func TestSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret.json")
	orig := []byte(`[{"scope":"channel","key":"outside","text":"secret"}]`)
	if err := os.WriteFile(outside, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(openDir(t, dir)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open through symlink: err %v, want ErrCorrupt", err)
	}
	// A store opened before the link was planted replaces the link, never the target.
	dir2 := t.TempDir()
	fd := openDir(t, dir2)
	s, err := Open(fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir2, FileName)); err != nil {
		t.Fatal(err)
	}
	mustCall(t, s, ToolSet, `{"scope":"channel","key":"k","text":"v"}`, "a")
	if got, _ := os.ReadFile(outside); !bytes.Equal(got, orig) {
		t.Errorf("outside file changed through symlink: %s", got)
	}
	if fi, err := os.Lstat(filepath.Join(dir2, FileName)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("memory.json is not a regular file after write: %v %v", fi, err)
	}
}

func TestPreview(t *testing.T) {
	s, _ := newStore(t)
	mustCall(t, s, ToolSet, `{"scope":"speaker","key":"a","text":"x"}`, "alice")
	mustCall(t, s, ToolSet, `{"scope":"channel","key":"c","text":"<y>"}`, "alice")
	if got := s.Preview(ScopeSpeaker, "alice"); got != `[{"key":"a","text":"x"}]` {
		t.Errorf("speaker preview = %s", got)
	}
	if got := s.Preview(ScopeSpeaker, "bob"); got != `[]` {
		t.Errorf("bob preview = %s", got)
	}
	if got := s.Preview(ScopeChannel, "bob"); got != `[{"key":"c","text":"<y>"}]` {
		t.Errorf("channel preview = %s (HTML must not be escaped)", got)
	}
}

// FuzzStoreFile: any memory.json either fails to open with ErrCorrupt (left
// byte-identical) or opens within bounds and survives a write round trip.
func FuzzStoreFile(f *testing.F) {
	f.Add([]byte(`[{"scope":"channel","key":"k","text":"t"}]`))
	f.Add([]byte(`[{"scope":"speaker:","key":" k","text":"t"}]`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, FileName)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fd := openDir(t, dir)
		s, err := Open(fd)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
				t.Fatalf("failed open changed the file")
			}
			return
		}
		if s.Len() > MaxEntries {
			t.Fatalf("%d entries", s.Len())
		}
		if err := s.save(s.entries); err != nil && !errors.Is(err, ErrRefused) {
			t.Fatalf("save: %v", err)
		}
		if _, err := Open(fd); err != nil {
			t.Fatalf("a store the worker wrote does not reopen: %v", err)
		}
	})
}
