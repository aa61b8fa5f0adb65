package sessions

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

var archiveTime = time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)

func TestArchiveFreshStart(t *testing.T) {
	ws := t.TempDir()
	s := mustOpen(t, ws)
	mustAppend(t, s, user("old conversation"))
	name := s.Name()
	s.Close()
	dir := filepath.Join(ws, DirName)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("kept"), 0o600)
	os.Mkdir(filepath.Join(dir, "sub.jsonl"), 0o700) // a directory: not a session file
	data, _ := os.ReadFile(filepath.Join(dir, name))

	res, err := Archive(ws, archiveTime)
	if err != nil {
		t.Fatal(err)
	}
	wantDir := "sessions/archive/20261130T110000Z"
	if res.Dir != wantDir || !slices.Equal(res.Files, []string{name}) || len(res.Replaced) != 0 {
		t.Fatalf("Archive = %+v, want dir %s with %s", res, wantDir, name)
	}
	got, err := os.ReadFile(filepath.Join(ws, wantDir, name))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("archived file differs: %v", err)
	}
	for _, keep := range []string{"notes.txt", "sub.jsonl"} {
		if _, err := os.Lstat(filepath.Join(dir, keep)); err != nil {
			t.Errorf("%s was moved: %v", keep, err)
		}
	}
	// The next Open starts a new, empty conversation.
	s2 := mustOpen(t, ws)
	if s2.Name() == name || len(s2.Entries()) != 0 {
		t.Fatalf("after a fresh start Open continued %s with %d entries", s2.Name(), len(s2.Entries()))
	}
	s2.Close()
	// A second fresh start in the same second gets its own directory.
	res2, err := Archive(ws, archiveTime)
	if err != nil || res2.Dir != wantDir+"-2" || len(res2.Files) != 1 {
		t.Fatalf("second Archive = %+v, %v", res2, err)
	}
}

func TestArchiveNothing(t *testing.T) {
	ws := t.TempDir()
	res, err := Archive(ws, archiveTime)
	if err != nil || res.Dir != "" || len(res.Files) != 0 {
		t.Fatalf("Archive of an empty workspace = %+v, %v", res, err)
	}
	if _, err := os.Lstat(filepath.Join(ws, DirName)); !os.IsNotExist(err) {
		t.Fatal("Archive created sessions/ with nothing to archive")
	}
}

func TestArchiveReplacesPlantedSymlinks(t *testing.T) {
	t.Run("sessions", func(t *testing.T) {
		ws, outside := t.TempDir(), t.TempDir()
		victim := filepath.Join(outside, "v"+Ext)
		os.WriteFile(victim, []byte("victim"), 0o600)
		os.Symlink(outside, filepath.Join(ws, DirName))
		res, err := Archive(ws, archiveTime)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Replaced, []string{DirName}) || len(res.Files) != 0 {
			t.Fatalf("Archive = %+v, want sessions replaced and nothing moved", res)
		}
		if _, err := os.Lstat(filepath.Join(ws, DirName)); !os.IsNotExist(err) {
			t.Fatal("the planted symlink is still there")
		}
		if got, _ := os.ReadFile(victim); string(got) != "victim" {
			t.Fatal("a file behind the symlink moved or changed")
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("the symlink's target gained entries: %d", len(ents))
		}
	})
	t.Run("archive", func(t *testing.T) {
		ws, outside := t.TempDir(), t.TempDir()
		s := mustOpen(t, ws)
		name := s.Name()
		s.Close()
		link := filepath.Join(ws, DirName, ArchiveDirName)
		os.Symlink(outside, link)
		res, err := Archive(ws, archiveTime)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Replaced, []string{"sessions/archive"}) || !slices.Equal(res.Files, []string{name}) {
			t.Fatalf("Archive = %+v", res)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Fatal("Archive wrote through the planted sessions/archive symlink")
		}
		st, err := os.Lstat(link)
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Fatalf("sessions/archive is not a fresh 0700 directory: %v %v", st, err)
		}
		if _, err := os.Stat(filepath.Join(ws, res.Dir, name)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("archive is a file", func(t *testing.T) {
		ws := t.TempDir()
		s := mustOpen(t, ws)
		s.Close()
		os.WriteFile(filepath.Join(ws, DirName, ArchiveDirName), []byte("x"), 0o600)
		res, err := Archive(ws, archiveTime)
		if err != nil || len(res.Replaced) != 1 || len(res.Files) != 1 {
			t.Fatalf("Archive = %+v, %v", res, err)
		}
	})
	t.Run("session file symlink", func(t *testing.T) {
		ws, outside := t.TempDir(), t.TempDir()
		victim := filepath.Join(outside, "v"+Ext)
		os.WriteFile(victim, []byte("victim"), 0o600)
		os.Mkdir(filepath.Join(ws, DirName), 0o700)
		os.Symlink(victim, filepath.Join(ws, DirName, "planted"+Ext))
		res, err := Archive(ws, archiveTime)
		if err != nil || len(res.Files) != 0 {
			t.Fatalf("Archive = %+v, %v: a symlink is not a plain session file", res, err)
		}
		if got, _ := os.ReadFile(victim); string(got) != "victim" {
			t.Fatal("the symlink's target changed")
		}
	})
	t.Run("workspace symlink", func(t *testing.T) {
		ws := filepath.Join(t.TempDir(), "ws")
		os.Symlink(t.TempDir(), ws)
		if _, err := Archive(ws, archiveTime); err == nil {
			t.Fatal("Archive followed a symlinked workspace")
		}
	})
}
