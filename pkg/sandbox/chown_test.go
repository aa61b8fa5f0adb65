package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestChownTreeNeverFollowsSymlinks(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("ChownTree to another uid needs CAP_CHOWN; run as root")
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	outside := filepath.Join(dir, "outside")
	must(t, os.MkdirAll(filepath.Join(ws, "a", "b"), 0o700))
	must(t, os.Mkdir(outside, 0o700))
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600))
	must(t, os.WriteFile(filepath.Join(ws, "a", "b", "memory.json"), []byte("{}"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(ws, "a", "to-dir")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "to-file")))
	const uid, gid = 2147000042, 2147000042
	must(t, ChownTree(ws, uid, gid))
	for _, p := range []string{ws, filepath.Join(ws, "a"), filepath.Join(ws, "a", "b"), filepath.Join(ws, "a", "b", "memory.json"),
		filepath.Join(ws, "a", "to-dir"), filepath.Join(ws, "to-file")} {
		st, err := os.Lstat(p)
		must(t, err)
		s := st.Sys().(*syscall.Stat_t)
		if s.Uid != uid || s.Gid != gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, s.Uid, s.Gid, uid, gid)
		}
	}
	for _, p := range []string{outside, filepath.Join(outside, "secret")} {
		st, err := os.Lstat(p)
		must(t, err)
		if s := st.Sys().(*syscall.Stat_t); s.Uid != 0 {
			t.Errorf("%s (behind a symlink) was changed to %d:%d", p, s.Uid, s.Gid)
		}
	}
	if err := ChownTree(filepath.Join(ws, "to-file"), uid, gid); err == nil {
		t.Errorf("ChownTree accepted a symlink as its root")
	}
}

func TestCapEffParsing(t *testing.T) {
	tests := []struct {
		status string
		want   bool
		err    bool
	}{
		{"Name:\tx\nCapEff:\t0000000000000001\n", true, false},
		{"CapEff:\t0000000000000000\n", false, false},
		{"CapEff:\t000001ffffffffff\n", true, false},
		{"CapEff:\tzz\n", false, true},
		{"Name:\tx\n", false, true},
	}
	for _, tt := range tests {
		got, err := capEffHas(tt.status, 0)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("capEffHas(%q) = %v, %v; want %v, err %v", tt.status, got, err, tt.want, tt.err)
		}
	}
}
