// Package gate makes a code run's project gate (docs/code-runs.md): the
// directory a run with setup reaches its project through
// (wire.SetupGatePath, container.RunOptions.GateDir), one per run slot
// under the workspace root. Guarantee: a gate is a real directory (no
// link followed) of a root owned by the host, mode 0700, handed to the
// slot's guest uid:gid and holding only the empty mount point
// "workspace" (0500), so root in the container, neither its owner nor in
// its group, cannot pass it; it is taken back and checked before every
// hand-over.
package gate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// DirName holds the run slots' project gates under the workspace root.
const DirName = ".run-gates"

// Prepare returns the project's gate of a run with setup in run slot slot
// (wire.SetupGatePath, container.RunOptions.GateDir):
// workspaceRoot/.run-gates/<slot>, given to the slot's guest uid:gid with
// mode 0700 and holding the empty mount point "workspace". Root in the
// container is neither its owner nor in its group, so setup cannot pass
// it, even when the host itself runs as root; the main command passes it
// as its owner. A slot's runs are one at a time, so its gate is reused:
// the host takes it back (CAP_CHOWN), checks it and hands it over again
// each time (the slot's uid may have changed). Only the host writes in
// .run-gates (0700).
func Prepare(workspaceRoot string, slot, guest int, lchown func(path string, uid, gid int) error) (string, error) {
	root := filepath.Join(workspaceRoot, DirName)
	gate := filepath.Join(root, strconv.Itoa(slot))
	inner := filepath.Join(gate, "workspace")
	me, myGroup := os.Getuid(), os.Getgid()
	dir := func(p string, mode fs.FileMode) (fs.FileInfo, error) {
		if err := os.Mkdir(p, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() || st.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is not a directory", p)
		}
		return st, nil
	}
	st, err := dir(root, 0o700)
	if err != nil {
		return "", err
	}
	if owner, _ := sandbox.FileOwner(st); owner != me {
		return "", fmt.Errorf("%s belongs to uid %d, not to this host (uid %d)", root, owner, me)
	}
	if st, err = dir(gate, 0o700); err != nil {
		return "", err
	}
	owner, _ := sandbox.FileOwner(st)
	group, _ := sandbox.FileGroup(st)
	if owner != me || group != myGroup {
		if err := lchown(gate, me, myGroup); err != nil {
			return "", fmt.Errorf("take %s back (the host needs CAP_CHOWN, see sandbox-host.service): %w", gate, err)
		}
	}
	// Set, not masked (the unit's UMask); the group and others get nothing.
	if err := os.Chmod(gate, 0o700); err != nil {
		return "", err
	}
	if _, err := dir(inner, 0o500); err != nil {
		return "", err
	}
	if err := lchown(gate, guest, guest); err != nil {
		return "", fmt.Errorf("give %s to guest uid %d (the host needs CAP_CHOWN, see sandbox-host.service): %w", gate, guest, err)
	}
	return gate, nil
}
