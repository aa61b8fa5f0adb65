package gate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type chown struct {
	path     string
	uid, gid int
}

func recorder(calls *[]chown) func(string, int, int) error {
	return func(p string, uid, gid int) error {
		*calls = append(*calls, chown{p, uid, gid})
		return nil
	}
}

// TestPrepare: the slot's gate is a 0700 directory under a 0700 root,
// holding the empty mount point (0500), handed to the guest's uid:gid; a
// second run in the slot gets the same gate, handed over again.
func TestPrepare(t *testing.T) {
	ws := t.TempDir()
	var calls []chown
	for range 2 {
		got, err := Prepare(ws, 3, 2001, recorder(&calls))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(ws, DirName, "3"); got != want {
			t.Fatalf("gate %q, want %q", got, want)
		}
		for p, mode := range map[string]os.FileMode{filepath.Join(ws, DirName): 0o700, got: 0o700, filepath.Join(got, "workspace"): 0o500} {
			if st, err := os.Lstat(p); err != nil || !st.IsDir() || st.Mode().Perm() != mode {
				t.Errorf("%s: %v %v, want a directory of mode %o", p, st, err, mode)
			}
		}
		if !slices.Contains(calls, chown{got, 2001, 2001}) {
			t.Errorf("chowns %v: the gate not given to 2001:2001", calls)
		}
	}
}

// TestPrepareRefuses: a link planted at the gate, and a root the host does
// not own, are never used.
func TestPrepareRefuses(t *testing.T) {
	ws := t.TempDir()
	root := filepath.Join(ws, DirName)
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "0")); err != nil {
		t.Fatal(err)
	}
	var calls []chown
	if _, err := Prepare(ws, 0, 2001, recorder(&calls)); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a link at the gate: %v, want refused", err)
	}
	if os.Getuid() != 0 {
		t.Log("not root: the foreign root's case needs chown")
	} else {
		if err := os.Chown(root, 4321, 4321); err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(ws, 1, 2001, recorder(&calls)); err == nil || !strings.Contains(err.Error(), "belongs to uid 4321") {
			t.Errorf("a foreign root: %v, want refused", err)
		}
	}
	if len(calls) != 0 {
		t.Errorf("refused gates were handed over: %v", calls)
	}
}
