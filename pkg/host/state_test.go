package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInitialChannelsSeedOnlyTheFirstStateFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "channels.json")
	s, seeded, err := LoadState(p, []string{"guild:1", "guild:2"})
	must(t, err)
	if !seeded || s.Mode("guild:1") != ModeOn || s.Mode("guild:2") != ModeOn || s.Mode("guild:3") != ModeOff {
		t.Fatalf("first load: seeded=%v modes %s %s", seeded, s.Mode("guild:1"), s.Mode("guild:2"))
	}
	must(t, s.SetMode("guild:1", ModeOff))
	s2, seeded, err := LoadState(p, []string{"guild:1", "guild:3"})
	must(t, err)
	if seeded {
		t.Error("an existing state file was reseeded")
	}
	if s2.Mode("guild:1") != ModeOff || s2.Mode("guild:3") != ModeOff || s2.Mode("guild:2") != ModeOn {
		t.Errorf("second load modes: 1=%s 2=%s 3=%s", s2.Mode("guild:1"), s2.Mode("guild:2"), s2.Mode("guild:3"))
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %o, want 0600", st.Mode().Perm())
	}
}

func TestStateSurvivesCrashBetweenWriteAndRename(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "channels.json")
	s, _, err := LoadState(p, nil)
	must(t, err)
	must(t, s.SetMode("keep", ModeOn))
	// A crash after the temp file was written but before the rename leaves
	// the new content in a temp file next to the old state.
	tmp := filepath.Join(dir, ".channels.json.tmp12345")
	must(t, os.WriteFile(tmp, []byte(`{"version":1,"channels":{"keep":{"mode":"off"},"new":{"mode":"on"}}}`), 0o600))
	s2, _, err := LoadState(p, []string{"seed"})
	must(t, err)
	if s2.Mode("keep") != ModeOn || s2.Mode("new") != ModeOff || s2.Mode("seed") != ModeOff {
		t.Errorf("after crash: keep=%s new=%s seed=%s, want the old state", s2.Mode("keep"), s2.Mode("new"), s2.Mode("seed"))
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("leftover temp file not removed: %v", err)
	}
}

func TestStateRefusesCorruptFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "channels.json")
	for _, body := range []string{"{", `{"version":2,"channels":{}}`, `{"version":1,"channels":{"":{"mode":"on"}}}`, `{"version":1,"channels":{"a":{"mode":"maybe"}}}`} {
		os.WriteFile(p, []byte(body), 0o600)
		if _, _, err := LoadState(p, nil); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("state %q: err = %v, want refusal naming the file", body, err)
		}
	}
}

func TestStateWriteFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "channels.json")
	s, _, err := LoadState(p, nil)
	must(t, err)
	s.path = filepath.Join(dir, "missing-dir", "channels.json")
	if err := s.SetMode("a", ModeOn); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	if s.Mode("a") != ModeOff {
		t.Error("failed write still changed the mode")
	}
}

func TestSecondHostRefusedByLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "host.lock")
	l, err := AcquireLock(p)
	must(t, err)
	if _, err := AcquireLock(p); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), p) {
		t.Errorf("second lock: %v, want ErrLocked naming %s", err, p)
	}
	must(t, l.Release())
	l2, err := AcquireLock(p)
	must(t, err)
	l2.Release()
}
