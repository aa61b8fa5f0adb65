package atomicfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
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

func TestCreateAtNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	dfd := openDir(t, dir)
	if err := CreateAt(dfd, "f", []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CreateAt(dfd, "f", []byte("two"), 0o600); !errors.Is(err, os.ErrExist) {
		t.Errorf("second CreateAt = %v, want ErrExist", err)
	}
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := CreateAt(dfd, "link", []byte("x"), 0o600); err == nil {
		t.Error("CreateAt wrote over a symlink")
	}
	if _, err := os.Lstat(outside); err == nil {
		t.Error("the link's target was created")
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "f")); string(data) != "one" {
		t.Errorf("f = %q, want one", data)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if err := CreateAt(dfd, bad, nil, 0o600); err == nil {
			t.Errorf("CreateAt(%q) = nil, want refused", bad)
		}
	}
}

func TestOpenDirAt(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	dfd := openDir(t, dir)
	fd, err := OpenDirAt(dfd, "a/b/c", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if err := CreateAt(fd, "f", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if data, _ := os.ReadFile(filepath.Join(dir, "a", "b", "c", "f")); string(data) != "x" {
		t.Errorf("a/b/c/f = %q", data)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "a", "l")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"a/l", "a/l/sub", "../x", "a/./b", "a//b", "/abs", "a/b/c/f"} {
		if fd, err := OpenDirAt(dfd, rel, 0o755); err == nil {
			unix.Close(fd)
			t.Errorf("OpenDirAt(%q) = nil, want refused", rel)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the link's target holds %d entries", len(entries))
	}
	fd, err = OpenDirAt(dfd, "", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
}

func openDir(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
