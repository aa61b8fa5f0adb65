package sessions

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Archived is what a fresh start did.
type Archived struct {
	// Dir is the archive directory under sessions/archive ("" when there
	// was nothing to move).
	Dir string
	// Files are the session files moved there.
	Files []string
	// Replaced names what was removed because it was a symlink or not a
	// directory: "sessions", "sessions/archive".
	Replaced []string
}

// Archive is a channel's fresh start: every top-level regular *.jsonl
// file of workspace/sessions moves to sessions/archive/<UTC time>/. A symlink (or any non-directory) the
// guest planted at sessions or sessions/archive is removed and replaced,
// never followed; symlinks and other entries among the session files stay
// where they are (Open skips them). workspace is opened without following
// a final symlink. Directories Archive creates are 0700, owned by the
// caller. The rich worker calls it on a fresh turn (the host cannot enter
// the guest-owned workspace); it is safe from a more privileged caller too.
func Archive(workspace string, now time.Time) (Archived, error) {
	var res Archived
	wfd, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, fmt.Errorf("sessions: archive: open workspace: %w", err)
	}
	defer unix.Close(wfd)
	dfd, replaced, err := openOrReplaceDir(wfd, DirName, false)
	if replaced {
		res.Replaced = append(res.Replaced, DirName)
	}
	if err != nil || dfd < 0 {
		// A replaced sessions/ is gone: the worker creates a new one.
		return res, err
	}
	defer unix.Close(dfd)
	names, err := sessionFiles(dfd)
	if err != nil {
		return res, err
	}
	adfd, replaced, err := openOrReplaceDir(dfd, ArchiveDirName, len(names) > 0)
	if replaced {
		res.Replaced = append(res.Replaced, DirName+"/"+ArchiveDirName)
	}
	if err != nil || len(names) == 0 {
		if adfd >= 0 {
			unix.Close(adfd)
		}
		return res, err
	}
	defer unix.Close(adfd)
	base := now.UTC().Format("20060102T150405Z")
	stamp := base
	for i := 2; ; i++ {
		err := unix.Mkdirat(adfd, stamp, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || i > 100 {
			return res, fmt.Errorf("sessions: archive: create %s: %w", stamp, err)
		}
		stamp = base + "-" + strconv.Itoa(i)
	}
	tfd, err := unix.Openat(adfd, stamp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, fmt.Errorf("sessions: archive: open %s: %w", stamp, err)
	}
	defer unix.Close(tfd)
	res.Dir = DirName + "/" + ArchiveDirName + "/" + stamp
	for _, f := range names {
		n := f.name
		// renameat moves the entry itself: were it swapped for a symlink
		// meanwhile, the link moves, nothing behind it.
		if err := unix.Renameat(dfd, n, tfd, n); err != nil {
			return res, fmt.Errorf("sessions: archive: move %s: %w", n, err)
		}
		res.Files = append(res.Files, n)
	}
	for _, fd := range []int{tfd, dfd} {
		if err := unix.Fsync(fd); err != nil {
			return res, fmt.Errorf("sessions: archive: fsync: %w", err)
		}
	}
	return res, nil
}

// openOrReplaceDir opens name in dirfd as a directory without following
// it. When it is a symlink or another non-directory, it is removed
// (replaced is true) and, with create, made again as a 0700 directory. A
// missing name is created only with create. dfd is -1 when there is no
// directory to return.
func openOrReplaceDir(dirfd int, name string, create bool) (dfd int, replaced bool, err error) {
	var st unix.Stat_t
	err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return -1, false, fmt.Errorf("sessions: archive: stat %s: %w", name, err)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			return -1, false, fmt.Errorf("sessions: archive: remove planted %s: %w", name, err)
		}
		replaced = true
	default:
		create = true // exists: open it
	}
	if !create {
		return -1, replaced, nil
	}
	if err := unix.Mkdirat(dirfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, replaced, fmt.Errorf("sessions: archive: create %s: %w", name, err)
	}
	dfd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, replaced, fmt.Errorf("sessions: archive: open %s: %w", name, err)
	}
	return dfd, replaced, nil
}

// sessionFile is a top-level regular *.jsonl file of sessions/.
type sessionFile struct {
	name  string
	mtime int64
}

// sessionFiles lists the top-level regular *.jsonl files of sessions/
// (names starting with '.' left out), looking at MaxDirEntries names at
// most. Symlinks and other non-regular entries are not session files.
func sessionFiles(dfd int) ([]sessionFile, error) {
	nfd, err := unix.Dup(dfd)
	if err != nil {
		return nil, fmt.Errorf("sessions: dup: %w", err)
	}
	d := os.NewFile(uintptr(nfd), DirName)
	defer d.Close()
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("sessions: rewind %s/: %w", DirName, err)
	}
	var out []sessionFile
	seen := 0
	for {
		names, err := d.Readdirnames(256)
		seen += len(names)
		if seen > MaxDirEntries {
			return nil, fmt.Errorf("sessions: %s/ holds more than %d entries: refused", DirName, MaxDirEntries)
		}
		for _, n := range names {
			if !strings.HasSuffix(n, Ext) || strings.HasPrefix(n, ".") {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				out = append(out, sessionFile{n, st.Mtim.Nano()})
			}
		}
		if err != nil || len(names) == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("sessions: list %s/: %w", DirName, err)
			}
			return out, nil
		}
	}
}
