package lib

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kept is what test/toolbox/build.sh leaves on a box: the cache directory,
// its lock and the base tar (README: kept).
var kept = []string{
	"/var/cache/roundtable-sandbox-test/",
	"/var/cache/roundtable-sandbox-test/.lock",
	"/var/cache/roundtable-sandbox-test/toolbox-small-0123456789abcdef.tar",
}

// plant makes each path under root (a trailing slash: a directory).
func plant(t *testing.T, root string, paths []string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sh runs script in bash with ns.sh sourced, the watch list rooted at root
// and E2E_WORK at work; it returns stderr and whether the script failed.
func sh(t *testing.T, root, work, script string) (string, bool) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "set -euo pipefail; source ./ns.sh; "+script)
	cmd.Env = append(os.Environ(), "NS_WATCH_ROOT="+root, "E2E_WORK="+work, "TEST_SUMMARY_FILE=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return stderr.String(), err != nil
}

// TestLeftoverCheck runs ns_snapshot, then plants paths as a run would
// leave them, then ns_check_paths (the teardown's check of new paths, as
// ns_cleanup_machine calls it): a path made after the snapshot is reported
// by name and fails the check; one there before is not. The toolbox cache
// is not allowed by name: made after the snapshot it is reported like any
// other path (the harnesses build it before ns_boot, see
// TestDemoBuildsToolboxBaseBeforeBoot).
func TestLeftoverCheck(t *testing.T) {
	tests := []struct {
		name         string
		before       []string // planted before the snapshot
		after        []string // planted after it
		wantFail     bool
		wantReported []string
		wantQuiet    []string // never named in the report
	}{
		{name: "nothing new", before: []string{"/etc/x", "/var/lib/y/"}, wantQuiet: []string{"/etc/x"}},
		{
			name:         "a leftover directory in /var/cache",
			after:        []string{"/var/cache/roundtable-leftover/"},
			wantFail:     true,
			wantReported: []string{"/var/cache/roundtable-leftover"},
		},
		{
			name:         "a leftover three levels down in /var/lib, and one in /run",
			before:       []string{"/var/lib/a/b/"},
			after:        []string{"/var/lib/a/b/c", "/run/roundtable-left"},
			wantFail:     true,
			wantReported: []string{"/var/lib/a/b/c", "/run/roundtable-left"},
			wantQuiet:    []string{"/var/lib/a/b\n"},
		},
		{
			name:      "the kept toolbox cache made before the snapshot",
			before:    kept,
			wantQuiet: []string{"/var/cache/roundtable-sandbox-test"},
		},
		{
			name:         "the kept toolbox cache made before, a leftover next to it after",
			before:       kept,
			after:        []string{"/var/cache/roundtable-sandbox-test-other/", "/var/cache/roundtable-sandbox-test/leftover"},
			wantFail:     true,
			wantReported: []string{"/var/cache/roundtable-sandbox-test-other", "/var/cache/roundtable-sandbox-test/leftover"},
			wantQuiet:    []string{"toolbox-small-", ".lock"},
		},
		{
			name:         "the toolbox cache made after the snapshot is not allowed by name",
			after:        kept,
			wantFail:     true,
			wantReported: kept,
		},
		{
			name:      "a harness work directory under /var/tmp",
			after:     []string{"/var/tmp/roundtable-demo.abc123/"},
			wantQuiet: []string{"roundtable-demo"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, work := t.TempDir(), t.TempDir()
			for _, d := range []string{"/etc/", "/var/lib/", "/var/cache/", "/run/", "/var/tmp/"} {
				plant(t, root, []string{d})
			}
			plant(t, root, tt.before)
			if out, failed := sh(t, root, work, "ns_snapshot"); failed {
				t.Fatalf("ns_snapshot failed: %s", out)
			}
			plant(t, root, tt.after)
			out, failed := sh(t, root, work, "ns_check_paths")
			if failed != tt.wantFail {
				t.Errorf("ns_check_paths failed = %v, want %v; stderr:\n%s", failed, tt.wantFail, out)
			}
			for _, p := range tt.wantReported {
				if !strings.Contains(out, strings.TrimSuffix(p, "/")+"\n") {
					t.Errorf("the report does not name %s; stderr:\n%s", p, out)
				}
			}
			for _, p := range tt.wantQuiet {
				if strings.Contains(out, p) {
					t.Errorf("the report names %q; stderr:\n%s", p, out)
				}
			}
			if strings.Contains(out, root) {
				t.Errorf("the report names the test's root %s, not the paths as on the machine; stderr:\n%s", root, out)
			}
		})
	}
}

// TestDemoBuildsToolboxBaseBeforeBoot: make demo keeps the small toolbox's
// base cache on the machine (README), and the first run on a box creates
// it; the set-up must build it before ns_boot takes the snapshot the
// teardown's leftover check compares with, or a bare box's first make demo
// fails its teardown on the cache. (Read from the script: booting it takes
// minutes and root; `make demo` itself is the end-to-end check.)
func TestDemoBuildsToolboxBaseBeforeBoot(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	_, setup, ok := strings.Cut(string(b), "\n# --- set up ---")
	if !ok {
		t.Fatal(`demo.sh has no "# --- set up ---" section`)
	}
	call := func(name string) int {
		loc := regexp.MustCompile(`(?m)^[ \t]*` + name + `\b`).FindStringIndex(setup)
		if loc == nil {
			return -1
		}
		return loc[0]
	}
	base, boot := call("toolbox_base"), call("ns_boot")
	switch {
	case boot < 0:
		t.Fatal("demo.sh's set-up does not call ns_boot")
	case base < 0:
		t.Error("demo.sh's set-up does not call toolbox_base: the toolbox cache is made after the snapshot (in the kinds)")
	case base > boot:
		t.Error("demo.sh's set-up calls toolbox_base after ns_boot: the toolbox cache is made after the snapshot")
	}
}
