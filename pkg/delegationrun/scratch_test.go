package delegationrun

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRemoveScratch: a scratch tree with unreadable directories, files and
// a symlink out is removed without following the link.
func TestRemoveScratch(t *testing.T) {
	root := t.TempDir()
	k := New(Options{Config: &config.Config{WorkspaceRoot: root}, Logger: slog.New(slog.DiscardHandler),
		Now: time.Now, UID: os.Getuid(), GID: os.Getgid(), Registry: prometheus.NewRegistry()})
	dir := filepath.Join(root, ".delegations", "0123456789abcdef0123456789abcdef")
	outside := filepath.Join(t.TempDir(), "keep")
	must(t, os.WriteFile(outside, []byte("x"), 0o600))
	must(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o700))
	must(t, os.WriteFile(filepath.Join(dir, "a", "b", "f"), []byte("x"), 0o000))
	must(t, os.Symlink(filepath.Dir(outside), filepath.Join(dir, "link")))
	must(t, os.Chmod(filepath.Join(dir, "a", "b"), 0o000))
	must(t, os.Chmod(filepath.Join(dir, "a"), 0o000))
	must(t, k.RemoveScratch(dir))
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("scratch left: %v", err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("followed the link: %v", err)
	}
	// A leftover is swept by the next host.
	must(t, os.MkdirAll(filepath.Join(dir, "x"), 0o700))
	k.SweepScratch()
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("leftover not swept: %v", err)
	}
}
