package atomicfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	if err := WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(p, 10)
	if err != nil || string(got) != "two" {
		t.Fatalf("ReadFile = %q, %v; want two", got, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir has %d entries, want 1 (no temp left)", len(entries))
	}
}

func TestReadRefusesLargeAndSymlink(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big")
	os.WriteFile(p, bytes.Repeat([]byte("x"), 11), 0o600)
	if _, err := ReadFile(p, 10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile(big) err = %v, want ErrTooLarge", err)
	}
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	if _, err := ReadFile(filepath.Join(dir, "link"), 1<<20); err == nil {
		t.Error("ReadFile followed a symlink")
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing err = %v, want ErrNotExist", err)
	}
}

func TestWriteDoesNotFollowSymlinkTarget(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(outside, []byte("keep"), 0o600)
	os.Symlink(outside, filepath.Join(dir, "f"))
	if err := WriteFile(filepath.Join(dir, "f"), []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(outside)
	if string(got) != "keep" {
		t.Errorf("symlink target changed to %q", got)
	}
}

func TestWriteRefusesPathName(t *testing.T) {
	dir := t.TempDir()
	fd, _ := os.Open(dir)
	defer fd.Close()
	for _, name := range []string{"", "..", "a/b"} {
		if err := WriteAt(int(fd.Fd()), name, nil, 0o600); err == nil {
			t.Errorf("WriteAt(%q) = nil, want error", name)
		}
	}
}
