package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Slots hands out the lowest free slot: concurrent sandboxes of one kind
// get distinct guest uids (RLIMIT_NPROC is per uid).
type Slots struct {
	mu   sync.Mutex
	used []bool
}

// Take returns the lowest free slot and marks it used.
func (s *Slots) Take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, u := range s.used {
		if !u {
			s.used[i] = true
			return i
		}
	}
	s.used = append(s.used, true)
	return len(s.used) - 1
}

// Give frees slot k.
func (s *Slots) Give(k int) {
	s.mu.Lock()
	s.used[k] = false
	s.mu.Unlock()
}

// EmptyWorkspace is the empty directory bound read-only at /workspace when
// a sandbox has no project: root/.run-empty, 0555, never a symlink.
func EmptyWorkspace(root string) (string, error) {
	dir := filepath.Join(root, ".run-empty")
	if err := os.Mkdir(dir, 0o555); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() || st.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	// The unit's UMask (0077) turns Mkdir's 0555 into 0500, which the
	// run's uid cannot enter (its command then fails to start with
	// "permission denied"): the mode is set, not masked.
	if st.Mode().Perm() != 0o555 {
		if err := os.Chmod(dir, 0o555); err != nil {
			return "", err
		}
	}
	return dir, nil
}
