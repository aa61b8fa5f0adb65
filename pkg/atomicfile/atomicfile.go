// Package atomicfile replaces files so that a crash at any point leaves either
// the old file whole or the new file whole: write a temp file in the same
// directory, fsync it, rename it over the target, fsync the directory.
// Writes go through a directory file descriptor and never follow a symlink in
// the final path element, so a planted link cannot redirect them.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrTooLarge reports a file over the caller's bound.
var ErrTooLarge = errors.New("file too large")

// WriteFile atomically replaces path with data at mode perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("atomicfile: open dir: %w", err)
	}
	defer unix.Close(dfd)
	return WriteAt(dfd, name, data, perm)
}

// WriteAt atomically replaces name (a single path element) inside the
// directory open as dirfd.
func WriteAt(dirfd int, name string, data []byte, perm os.FileMode) error {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return fmt.Errorf("atomicfile: %q is not a plain file name", name)
	}
	var tmp string
	var fd int
	var err error
	for i := 0; i < 100; i++ {
		tmp = fmt.Sprintf(".%s.tmp%d", name, randSuffix())
		fd, err = unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("atomicfile: create temp: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			f.Close()
			unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	if err := f.Chmod(perm.Perm()); err != nil { // umask may have narrowed the mode
		return fmt.Errorf("atomicfile: chmod: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("atomicfile: write: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("atomicfile: fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("atomicfile: close: %w", err)
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return fmt.Errorf("atomicfile: rename: %w", err)
	}
	ok = true
	if err := unix.Fsync(dirfd); err != nil {
		return fmt.Errorf("atomicfile: fsync dir: %w", err)
	}
	return nil
}

// ReadFile reads at most max bytes of a regular file, refusing symlinks in the
// final element and anything larger than max (ErrTooLarge).
func ReadFile(path string, max int64) ([]byte, error) {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return ReadAt(dfd, name, max)
}

// ReadAt is ReadFile relative to a directory descriptor. A missing file
// returns an error satisfying errors.Is(err, os.ErrNotExist).
func ReadAt(dirfd int, name string, max int64) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("atomicfile: %s: %w", name, os.ErrNotExist)
		}
		return nil, fmt.Errorf("atomicfile: open %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("atomicfile: %s is not a regular file", name)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("atomicfile: %s is %d bytes, limit %d: %w", name, st.Size(), max, ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("atomicfile: %s over %d bytes: %w", name, max, ErrTooLarge)
	}
	return data, nil
}

func randSuffix() uint32 {
	var b [4]byte
	if _, err := unix.Getrandom(b[:], 0); err != nil {
		return uint32(os.Getpid())
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// CreateAt creates name (a single path element) inside the directory open as
// dirfd with data at mode perm (narrowed by the umask), never over an
// existing name of any kind and never through a link planted at it: the
// data goes to a temporary name created exclusively, is synced, then renamed
// into place without replacing anything.
func CreateAt(dirfd int, name string, data []byte, perm os.FileMode) error {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return fmt.Errorf("atomicfile: %q is not a plain file name", name)
	}
	// The final name must not exist, whatever it is (a file, a link).
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		return os.ErrExist
	}
	tmp := fmt.Sprintf(".%s.%d.tmp", name, os.Getpid())
	if len(tmp) > 255 {
		tmp = fmt.Sprintf(".create.%d.tmp", os.Getpid())
	}
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return err
	}
	file := os.NewFile(uintptr(fd), tmp)
	_, err = file.Write(data)
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat2(dirfd, tmp, dirfd, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			// A file system without RENAME_NOREPLACE: a hard link also
			// refuses an existing name.
			if err = unix.Linkat(dirfd, tmp, dirfd, name, 0); err == nil {
				_ = unix.Unlinkat(dirfd, tmp, 0)
			}
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return err
	}
	return nil
}

// OpenDirAt opens the directory rel (slash-separated, relative, no "." or
// ".." element) beneath the directory open as dirfd one element at a time,
// with O_NOFOLLOW and O_DIRECTORY on each, creating a missing one at mode
// perm: a symlink at any element is refused, never followed, so the result
// is always inside dirfd's tree. "" opens dirfd's directory again. The
// caller closes the returned descriptor.
func OpenDirAt(dirfd int, rel string, perm os.FileMode) (int, error) {
	cur, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if rel == "" {
		return cur, nil
	}
	for _, elem := range strings.Split(rel, "/") {
		if elem == "" || elem == "." || elem == ".." {
			unix.Close(cur)
			return -1, fmt.Errorf("atomicfile: %q is not a clean relative path", rel)
		}
		if err := unix.Mkdirat(cur, elem, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, fmt.Errorf("atomicfile: mkdir %s: %w", elem, err)
		}
		next, err := unix.Openat(cur, elem, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cur)
		if err != nil {
			return -1, fmt.Errorf("atomicfile: open %s: %w", elem, err)
		}
		cur = next
	}
	return cur, nil
}
