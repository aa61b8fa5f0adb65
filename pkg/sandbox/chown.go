package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Bounds of one ChownTree: a workspace deeper or larger than this is left
// to the operator (the error names the remedy).
const (
	maxChownDepth   = 256
	maxChownEntries = 1 << 20
)

// ChownTree gives dir and everything below it to uid:gid without following
// a symlink anywhere: each directory is opened O_NOFOLLOW relative to its
// parent's descriptor and each entry changed with AT_SYMLINK_NOFOLLOW, so a
// link planted in a workspace can never redirect the change. Children go
// first: once a directory belongs to the guest (0700), the host can no
// longer read it. Needs CAP_CHOWN (the host unit's only capability).
func ChownTree(dir string, uid, gid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	n := 0
	if err := chownBelow(fd, uid, gid, 0, &n); err != nil {
		return err
	}
	return unix.Fchown(fd, uid, gid)
}

func chownBelow(fd, uid, gid, depth int, n *int) error {
	if depth > maxChownDepth {
		return fmt.Errorf("deeper than %d directories", maxChownDepth)
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), "workspace")
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if *n++; *n > maxChownEntries {
				return fmt.Errorf("more than %d entries", maxChownEntries)
			}
			if err := chownEntry(fd, name, uid, gid, depth, n); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func chownEntry(parent int, name string, uid, gid, depth int, n *int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %q: %w", name, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		child, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %q: %w", name, err)
		}
		defer unix.Close(child)
		if err := chownBelow(child, uid, gid, depth+1, n); err != nil {
			return fmt.Errorf("%s/%w", name, err)
		}
		return unix.Fchown(child, uid, gid)
	}
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	if err := unix.Fchownat(parent, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %q: %w", name, err)
	}
	return nil
}

// HasCapChown reports whether CAP_CHOWN is in this process's effective set
// (/proc/self/status CapEff), which ChownTree needs for another uid.
func HasCapChown() (bool, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, err
	}
	return capEffHas(string(data), unix.CAP_CHOWN)
}

func capEffHas(status string, capability int) (bool, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, err
			}
			return mask&(1<<uint(capability)) != 0, nil
		}
	}
	return false, errors.New("no CapEff line")
}
