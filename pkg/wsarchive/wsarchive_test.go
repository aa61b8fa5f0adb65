package wsarchive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func write(t testing.TB, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// tree lists dir's contents as "path mode [content]" lines, sorted.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		line := rel + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(data)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestPackUnpackRoundTrip(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "history.json"), `{"turns":[]}`, 0o600)
	write(t, filepath.Join(src, "memory.json"), `{}`, 0o644)
	write(t, filepath.Join(src, "sessions", "a.jsonl"), "line\n", 0o640)
	write(t, filepath.Join(src, "empty"), "", 0o400)
	must(t, os.Mkdir(filepath.Join(src, "emptydir"), 0o755))
	data, st, err := Pack(src, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 4 || st.Dirs != 2 || st.Skipped != 0 || st.Bytes != int64(len(data)) {
		t.Errorf("stats = %+v", st)
	}
	dst := t.TempDir()
	write(t, filepath.Join(dst, "stale", "old.json"), "old", 0o600)
	write(t, filepath.Join(dst, "history.json"), "older", 0o600)
	must(t, Unpack(dst, data, DefaultLimits))
	want := []string{
		"empty -rw------- ", // owner rw always
		"emptydir drwxr-xr-x",
		"history.json -rw------- {\"turns\":[]}",
		"memory.json -rw-r--r-- {}",
		"sessions drwx------",
		"sessions/a.jsonl -rw-r----- line\n",
	}
	if got := tree(t, dst); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("unpacked tree =\n%q\nwant\n%q", got, want)
	}
	// Packing the unpacked tree gives the same archive but for the one
	// mode sanitised (0400 -> 0600).
	again, _, err := Pack(dst, DefaultLimits)
	if err != nil || len(again) != len(data) {
		t.Errorf("repack = %d bytes, %v; want %d", len(again), err, len(data))
	}
}

// TestPackSkipsWhatIsNoFile: symlinks (to a file outside, to a directory
// outside), hard links, FIFOs and sockets are not carried, and no link is
// followed (the secret outside never gets in the archive).
func TestPackSkipsWhatIsNoFile(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "SECRET", 0o600)
	src := t.TempDir()
	write(t, filepath.Join(src, "ok"), "ok", 0o600)
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "link")))
	must(t, os.Symlink(outside, filepath.Join(src, "dirlink")))
	write(t, filepath.Join(src, "a"), "shared", 0o600)
	must(t, os.Link(filepath.Join(src, "a"), filepath.Join(src, "b")))
	must(t, unix.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	data, st, err := Pack(src, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 1 || st.Skipped != 5 {
		t.Errorf("stats = %+v, want 1 file and 5 skipped", st)
	}
	if bytes.Contains(data, []byte("SECRET")) || bytes.Contains(data, []byte("shared")) {
		t.Error("archive carries a linked file's content")
	}
	entries, err := Decode(data, DefaultLimits)
	if err != nil || len(entries) != 1 || entries[0].Path != "ok" {
		t.Errorf("Decode = %+v, %v", entries, err)
	}
}

func TestPackRefusesOverItsBounds(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "big"), strings.Repeat("x", 1000), 0o600)
	for i := 0; i < 5; i++ {
		write(t, filepath.Join(src, "d", string(rune('a'+i))), "y", 0o600)
	}
	deep := src
	for i := 0; i < 4; i++ {
		deep = filepath.Join(deep, "n")
	}
	must(t, os.MkdirAll(deep, 0o700))
	for _, tc := range []struct {
		name string
		lim  Limits
	}{
		{"bytes", Limits{MaxBytes: 900, MaxEntries: 100, MaxDepth: 10}},
		{"entries", Limits{MaxBytes: 1 << 20, MaxEntries: 5, MaxDepth: 10}},
		{"depth", Limits{MaxBytes: 1 << 20, MaxEntries: 100, MaxDepth: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Pack(src, tc.lim); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Pack over its %s bound = %v, want ErrTooLarge", tc.name, err)
			}
		})
	}
	if _, _, err := Pack(src, Limits{MaxBytes: 1 << 20, MaxEntries: 100, MaxDepth: 4}); err != nil {
		t.Fatalf("Pack within its bounds = %v", err)
	}
}

func TestPackRefusesASymlinkedRoot(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "ws")
	must(t, os.Symlink(real, link))
	if _, _, err := Pack(link, DefaultLimits); err == nil {
		t.Fatal("Pack followed a symlinked workspace")
	}
	if err := Unpack(link, enc(), DefaultLimits); err == nil {
		t.Fatal("Unpack followed a symlinked workspace")
	}
}

// enc builds an archive by hand: each part is appended as given.
func enc(parts ...[]byte) []byte {
	b := []byte(magic)
	for _, p := range parts {
		b = append(b, p...)
	}
	return append(b, kindEnd)
}

func ent(kind byte, mode uint16, path string, data ...string) []byte {
	b := []byte{kind}
	b = binary.BigEndian.AppendUint16(b, mode)
	b = binary.BigEndian.AppendUint16(b, uint16(len(path)))
	b = append(b, path...)
	if kind == kindFile {
		d := strings.Join(data, "")
		b = binary.BigEndian.AppendUint64(b, uint64(len(d)))
		b = append(b, d...)
	}
	return b
}

// TestDecodeRefusesHostileArchives: each archive is refused and Unpack
// leaves the workspace as it was.
func TestDecodeRefusesHostileArchives(t *testing.T) {
	lim := Limits{MaxBytes: 4096, MaxEntries: 3, MaxDepth: 2}
	cut := ent(kindFile, 0o600, "f", "abc")
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"no header", []byte("tar\x00"), ErrInvalid},
		{"no end marker", []byte(magic), ErrInvalid},
		{"trailing bytes", append(enc(), 'x'), ErrInvalid},
		{"unknown kind", enc(ent('l', 0o777, "link")), ErrInvalid},
		{"absolute path", enc(ent(kindFile, 0o600, "/etc/passwd", "x")), ErrInvalid},
		{"dot-dot", enc(ent(kindFile, 0o600, "../escape", "x")), ErrInvalid},
		{"dot-dot inside", enc(ent(kindDir, 0o700, "a"), ent(kindFile, 0o600, "a/../../escape", "x")), ErrInvalid},
		{"dot", enc(ent(kindFile, 0o600, "./f", "x")), ErrInvalid},
		{"empty component", enc(ent(kindDir, 0o700, "a"), ent(kindFile, 0o600, "a//f", "x")), ErrInvalid},
		{"trailing slash", enc(ent(kindDir, 0o700, "a/")), ErrInvalid},
		{"empty path", enc(ent(kindFile, 0o600, "", "x")), ErrInvalid},
		{"NUL", enc(ent(kindFile, 0o600, "a\x00b", "x")), ErrInvalid},
		{"parent not listed", enc(ent(kindFile, 0o600, "a/f", "x")), ErrInvalid},
		{"parent is a file", enc(ent(kindFile, 0o600, "a", "x"), ent(kindFile, 0o600, "a/f", "x")), ErrInvalid},
		{"duplicate", enc(ent(kindFile, 0o600, "f", "x"), ent(kindFile, 0o600, "f", "y")), ErrInvalid},
		{"dir over a file", enc(ent(kindFile, 0o600, "f", "x"), ent(kindDir, 0o700, "f")), ErrInvalid},
		{"setuid bit", enc(ent(kindFile, 0o4755, "f", "x")), ErrInvalid},
		{"content cut", append([]byte(magic), cut[:len(cut)-1]...), ErrInvalid},
		{"size beyond the archive", enc(append(ent(kindFile, 0o600, "f")[:len(ent(kindFile, 0o600, "f"))-8], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)), ErrInvalid},
		{"header cut", append([]byte(magic), kindFile, 0), ErrInvalid},
		{"too deep", enc(ent(kindDir, 0o700, "a"), ent(kindDir, 0o700, "a/b"), ent(kindDir, 0o700, "a/b/c")), ErrInvalid},
		{"too many entries", enc(ent(kindDir, 0o700, "a"), ent(kindDir, 0o700, "b"), ent(kindDir, 0o700, "c"), ent(kindDir, 0o700, "d")), ErrTooLarge},
		{"too many bytes", enc(ent(kindFile, 0o600, "f", strings.Repeat("x", 4096))), ErrTooLarge},
		{"over-long component", enc(ent(kindFile, 0o600, strings.Repeat("n", 256), "x")), ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode(tc.data, lim); !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v", err, tc.want)
			}
			dst := t.TempDir()
			write(t, filepath.Join(dst, "keep"), "kept", 0o600)
			if err := Unpack(dst, tc.data, lim); !errors.Is(err, tc.want) {
				t.Fatalf("Unpack = %v, want %v", err, tc.want)
			}
			if got := tree(t, dst); len(got) != 1 || got[0] != "keep -rw------- kept" {
				t.Errorf("workspace after a refused archive = %q, want it unchanged", got)
			}
		})
	}
	// The same shapes within bounds are accepted.
	ok := enc(ent(kindDir, 0o700, "a"), ent(kindDir, 0o700, "a/b"), ent(kindFile, 0o600, "a/b/f", "x"))
	if _, err := Decode(ok, lim); err != nil {
		t.Fatalf("Decode of a valid archive = %v", err)
	}
}

// TestUnpackDoesNotFollowPlantedLinks: a symlink the guest planted where
// the archive has a directory is removed, never followed, and a directory
// the guest made unreadable is taken back and emptied.
func TestUnpackDoesNotFollowPlantedLinks(t *testing.T) {
	outside := t.TempDir()
	dst := t.TempDir()
	must(t, os.Symlink(outside, filepath.Join(dst, "sessions")))
	must(t, os.MkdirAll(filepath.Join(dst, "locked", "inner"), 0o700))
	write(t, filepath.Join(dst, "locked", "inner", "f"), "x", 0o600)
	must(t, os.Chmod(filepath.Join(dst, "locked", "inner"), 0))
	must(t, os.Chmod(filepath.Join(dst, "locked"), 0))
	data := enc(ent(kindDir, 0o700, "sessions"), ent(kindFile, 0o600, "sessions/a.jsonl", "line"))
	must(t, Unpack(dst, data, DefaultLimits))
	if got := tree(t, dst); strings.Join(got, "|") != "sessions drwx------|sessions/a.jsonl -rw------- line" {
		t.Errorf("tree = %q", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the link's target got %d entries", len(entries))
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
