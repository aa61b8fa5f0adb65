package chanstate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
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

func TestGuestUIDs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "channels.json")
	s, _, err := LoadState(p, nil)
	must(t, err)
	g := config.Guests{UIDBase: 100000, UIDCount: 3}

	got := map[string]int{}
	for _, ch := range []string{"a", "b", "c"} {
		uid, err := s.GuestUID(ch, g, 0)
		must(t, err)
		if !g.IsGuest(uid) {
			t.Fatalf("channel %s got uid %d outside %+v", ch, uid, g)
		}
		got[ch] = uid
	}
	if got["a"] == got["b"] || got["b"] == got["c"] || got["a"] == got["c"] {
		t.Fatalf("three channels in a range of three share a uid: %v", got)
	}
	if _, err := s.GuestUID("d", g, 0); err == nil || !strings.Contains(err.Error(), "guests.uidCount") {
		t.Errorf("a fourth channel in a full range: err = %v, want a guests.uidCount refusal", err)
	}
	// Stable: asked again, and after a reload.
	if uid, err := s.GuestUID("b", g, got["a"]); err != nil || uid != got["b"] {
		t.Errorf("second call for b = %d, %v; want %d", uid, err, got["b"])
	}
	s2, _, err := LoadState(p, nil)
	must(t, err)
	for ch, want := range got {
		if uid, err := s2.GuestUID(ch, g, 0); err != nil || uid != want {
			t.Errorf("after reload %s = %d, %v; want %d", ch, uid, err, want)
		}
	}
	// A narrower range moves channels whose uid left it, never onto a
	// uid another channel still holds.
	narrow := config.Guests{UIDBase: 100000, UIDCount: 2}
	moved := map[int]string{}
	for _, ch := range []string{"a", "b", "c"} {
		uid, err := s2.GuestUID(ch, narrow, 0)
		if err != nil {
			continue // one of the three cannot fit
		}
		if other, dup := moved[uid]; dup {
			t.Errorf("channels %s and %s share %d in the narrower range", other, ch, uid)
		}
		moved[uid] = ch
	}
	if len(moved) != 2 {
		t.Errorf("narrower range of 2 holds %d channels: %v", len(moved), moved)
	}
}

func TestGuestUIDAdoptsAFreeWorkspaceOwner(t *testing.T) {
	s, _, err := LoadState(filepath.Join(t.TempDir(), "channels.json"), nil)
	must(t, err)
	g := config.Guests{UIDBase: 200000, UIDCount: 1000}
	a, err := s.GuestUID("a", g, 200500)
	must(t, err)
	if a != 200500 {
		t.Errorf("adopt of a free in-range owner: got %d, want 200500", a)
	}
	b, err := s.GuestUID("b", g, 200500) // taken by a
	must(t, err)
	if b == 200500 {
		t.Errorf("b adopted a uid channel a holds")
	}
	c, err := s.GuestUID("c", g, 4242) // out of range: the host's own, say
	must(t, err)
	if c == 4242 || !g.IsGuest(c) {
		t.Errorf("adopted an out-of-range owner: %d", c)
	}
}

func TestStateRefusesBadGuestEntries(t *testing.T) {
	for name, body := range map[string]string{
		"duplicate": `{"version":1,"channels":{},"guests":{"a":100000,"b":100000}}`,
		"root":      `{"version":1,"channels":{},"guests":{"a":0}}`,
		"low":       `{"version":1,"channels":{},"guests":{"a":1000}}`,
		"channel":   `{"version":1,"channels":{},"guests":{"":100000}}`,
		// An internal name is no channel: a state file cannot make one.
		"internal channel": `{"version":1,"channels":{"sandbox-run-slot/0":{"mode":"on"}},"guests":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "channels.json")
			must(t, os.WriteFile(p, []byte(body), 0o600))
			if _, _, err := LoadState(p, nil); err == nil || !strings.Contains(err.Error(), "fix or move it aside") {
				t.Errorf("LoadState(%s) = %v, want a refusal", body, err)
			}
		})
	}
}

// The slots' guest-uid records are internal names: the state file keeps
// them (they are not channel keys) and a slot's uid is never a channel's.
func TestStateKeepsSlotGuestRecords(t *testing.T) {
	p := filepath.Join(t.TempDir(), "channels.json")
	must(t, os.WriteFile(p, []byte(`{"version":1,"channels":{"c":{"mode":"on"}},"guests":{"sandbox-run-slot/0":100000,"sandbox-precheck-slot/0":100001}}`), 0o600))
	s, _, err := LoadState(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := config.Guests{UIDBase: 100000, UIDCount: 8}
	for _, tt := range []struct {
		name string
		want int
	}{{ids.RunSlot(0), 100000}, {ids.PrecheckSlot(0), 100001}} {
		if got, err := s.GuestUID(tt.name, g, -1); err != nil || got != tt.want {
			t.Errorf("GuestUID(%s) = %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
	if uid, err := s.GuestUID("c", g, -1); err != nil || uid == 100000 || uid == 100001 {
		t.Errorf("channel c got guest uid %d (%v), a slot's or none", uid, err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
