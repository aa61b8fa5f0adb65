// Package wsarchive packs a channel's workspace into a bounded archive and
// unpacks one in place of a workspace, so that a sealed channel's memory and
// history move between the boxes of a fleet (docs/fleet.md,
// Workspaces). A workspace is written by a hostile container and an archive
// by another box: both are read as hostile.
//
// Guarantee: Pack never follows a symlink (every directory is opened
// O_NOFOLLOW relative to its parent's descriptor), never leaves the
// workspace's filesystem and carries only directories and regular files
// with a single link (anything else is skipped and counted), with
// permission bits only; a workspace over a bound is refused, never cut.
// Decode accepts only a well-formed archive within its bounds: relative
// paths of plain components, each parent a directory listed before it, no
// duplicate. Unpack decodes the whole archive before it changes anything,
// then replaces the directory's contents with exactly the archive's,
// creating only directories and regular files beneath it through
// descriptors opened without following links; modes are sanitised (owner
// read and write always, no setuid, setgid, sticky or world write).
// Ownership is the caller's to give: Unpack leaves the tree to the calling
// process's uid. No error names a path (a guest or another box chose it,
// and errors reach the host's log).
package wsarchive

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Limits bound an archive.
type Limits struct {
	// MaxBytes bounds the archive's encoded size (and so its content).
	MaxBytes int64
	// MaxEntries bounds directories and files together.
	MaxEntries int
	// MaxDepth bounds the directories an entry's path may pass through.
	MaxDepth int
}

// DefaultLimits: a sealed workspace is a memory store and a history, a few
// files; 64 MiB is the fleet's snapshot bound.
var DefaultLimits = Limits{MaxBytes: 64 << 20, MaxEntries: 10_000, MaxDepth: 32}

const (
	magic        = "RTSBWS1\n"
	maxPathBytes = 1024
	maxNameBytes = 255
	// seenFactor bounds the directory entries Pack or Unpack looks at
	// (skipped ones included) as a multiple of MaxEntries.
	seenFactor = 4

	kindDir  = 'd'
	kindFile = 'f'
	kindEnd  = 'e'
)

var (
	// ErrTooLarge: a workspace or archive over one of its Limits.
	ErrTooLarge = errors.New("workspace over its bound")
	// ErrInvalid: not a well-formed archive.
	ErrInvalid = errors.New("invalid workspace archive")
)

// Entry is one directory or regular file of an archive.
type Entry struct {
	// Path is relative to the workspace, components joined by "/".
	Path string
	Dir  bool
	// Mode is the sanitised permission bits (Decode) or the raw ones
	// (as Pack found them).
	Mode uint32
	Data []byte
}

// Stats is what Pack carried and what it skipped.
type Stats struct {
	Dirs, Files int
	Bytes       int64 // the archive's size
	// Skipped counts entries not carried: symlinks, devices, sockets,
	// FIFOs, files with more than one link, mount points.
	Skipped int
}

// Pack archives dir's contents (not dir itself).
func Pack(dir string, lim Limits) ([]byte, Stats, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("open workspace: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, Stats{}, err
	}
	p := &packer{lim: lim, dev: st.Dev}
	p.buf.WriteString(magic)
	if err := p.dir(fd, "", 0); err != nil {
		return nil, p.stats, err
	}
	p.buf.WriteByte(kindEnd)
	if int64(p.buf.Len()) > lim.MaxBytes {
		return nil, p.stats, fmt.Errorf("archive is over %d bytes: %w", lim.MaxBytes, ErrTooLarge)
	}
	p.stats.Bytes = int64(p.buf.Len())
	return p.buf.Bytes(), p.stats, nil
}

type packer struct {
	lim   Limits
	dev   uint64
	buf   bytes.Buffer
	stats Stats
	seen  int
}

func (p *packer) dir(fd int, rel string, depth int) error {
	names, err := readNames(fd, &p.seen, p.lim.MaxEntries*seenFactor)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		path := name
		if rel != "" {
			path = rel + "/" + name
		}
		if err := p.entry(fd, name, path, depth); err != nil {
			return err
		}
	}
	return nil
}

func (p *packer) entry(parent int, name, path string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone since it was listed
		}
		return fmt.Errorf("stat an entry: %w", err)
	}
	typ := st.Mode & unix.S_IFMT
	if (typ != unix.S_IFDIR && typ != unix.S_IFREG) || st.Dev != p.dev || (typ == unix.S_IFREG && st.Nlink != 1) {
		p.stats.Skipped++
		return nil
	}
	if len(path) > maxPathBytes {
		return fmt.Errorf("a path is over %d bytes: %w", maxPathBytes, ErrTooLarge)
	}
	if p.stats.Dirs+p.stats.Files >= p.lim.MaxEntries {
		return fmt.Errorf("more than %d entries: %w", p.lim.MaxEntries, ErrTooLarge)
	}
	if typ == unix.S_IFDIR {
		if depth+1 > p.lim.MaxDepth {
			return fmt.Errorf("deeper than %d directories: %w", p.lim.MaxDepth, ErrTooLarge)
		}
		child, err := openChecked(parent, name, unix.O_DIRECTORY, &st)
		if err != nil {
			return fmt.Errorf("open an entry: %w", err)
		}
		defer unix.Close(child)
		p.header(kindDir, st.Mode, path)
		p.stats.Dirs++
		return p.dir(child, path, depth+1)
	}
	f, err := openChecked(parent, name, unix.O_NONBLOCK|unix.O_NOCTTY, &st)
	if err != nil {
		return fmt.Errorf("open an entry: %w", err)
	}
	file := os.NewFile(uintptr(f), "workspace entry")
	defer file.Close()
	// The header's bytes and the content (its size as opened) must fit
	// what is left.
	if int64(p.buf.Len())+int64(len(path))+16+st.Size > p.lim.MaxBytes {
		return fmt.Errorf("archive is over %d bytes: %w", p.lim.MaxBytes, ErrTooLarge)
	}
	data := make([]byte, st.Size)
	if _, err := io.ReadFull(file, data); err != nil {
		return fmt.Errorf("read a file: %w", err)
	}
	if n, _ := file.Read(make([]byte, 1)); n != 0 {
		return errors.New("a file grew while it was read")
	}
	p.header(kindFile, st.Mode, path)
	var size [8]byte
	binary.BigEndian.PutUint64(size[:], uint64(len(data)))
	p.buf.Write(size[:])
	p.buf.Write(data)
	p.stats.Files++
	return nil
}

func (p *packer) header(kind byte, mode uint32, path string) {
	var h [5]byte
	h[0] = kind
	binary.BigEndian.PutUint16(h[1:3], uint16(mode&0o777))
	binary.BigEndian.PutUint16(h[3:5], uint16(len(path)))
	p.buf.Write(h[:])
	p.buf.WriteString(path)
}

// openChecked opens name below parent without following a link and checks
// it is still the entry want was taken of (not swapped meanwhile).
func openChecked(parent int, name string, flags int, want *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Dev != want.Dev || st.Ino != want.Ino || st.Mode&unix.S_IFMT != want.Mode&unix.S_IFMT {
		unix.Close(fd)
		return -1, errors.New("changed while it was read")
	}
	*want = st
	return fd, nil
}

// readNames lists a directory's names, counting them into *seen and
// refusing once it passes max.
func readNames(fd int, seen *int, max int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "workspace")
	defer f.Close()
	var out []string
	for {
		names, err := f.Readdirnames(256)
		*seen += len(names)
		if *seen > max {
			return nil, fmt.Errorf("more than %d directory entries: %w", max, ErrTooLarge)
		}
		out = append(out, names...)
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// Decode parses and checks an archive; its entries' Data alias data.
func Decode(data []byte, lim Limits) ([]Entry, error) {
	if int64(len(data)) > lim.MaxBytes {
		return nil, fmt.Errorf("archive is %d bytes, over %d: %w", len(data), lim.MaxBytes, ErrTooLarge)
	}
	if !bytes.HasPrefix(data, []byte(magic)) {
		return nil, fmt.Errorf("no archive header: %w", ErrInvalid)
	}
	r := data[len(magic):]
	dirs := map[string]bool{"": true}
	seen := map[string]bool{}
	var out []Entry
	for {
		if len(r) == 0 {
			return nil, fmt.Errorf("no end marker: %w", ErrInvalid)
		}
		kind := r[0]
		r = r[1:]
		if kind == kindEnd {
			if len(r) != 0 {
				return nil, fmt.Errorf("bytes after the end marker: %w", ErrInvalid)
			}
			return out, nil
		}
		if kind != kindDir && kind != kindFile {
			return nil, fmt.Errorf("unknown entry kind: %w", ErrInvalid)
		}
		if len(out) >= lim.MaxEntries {
			return nil, fmt.Errorf("more than %d entries: %w", lim.MaxEntries, ErrTooLarge)
		}
		if len(r) < 4 {
			return nil, fmt.Errorf("entry header cut: %w", ErrInvalid)
		}
		mode := uint32(binary.BigEndian.Uint16(r[0:2]))
		plen := int(binary.BigEndian.Uint16(r[2:4]))
		r = r[4:]
		if mode&^0o777 != 0 {
			return nil, fmt.Errorf("mode bits beyond permissions: %w", ErrInvalid)
		}
		if plen > len(r) {
			return nil, fmt.Errorf("entry path cut: %w", ErrInvalid)
		}
		path := string(r[:plen])
		r = r[plen:]
		parent, err := checkPath(path, kind == kindDir, lim.MaxDepth)
		if err != nil {
			return nil, err
		}
		if !dirs[parent] {
			return nil, fmt.Errorf("an entry whose parent is not a directory listed before it: %w", ErrInvalid)
		}
		if seen[path] {
			return nil, fmt.Errorf("a duplicate entry: %w", ErrInvalid)
		}
		seen[path] = true
		e := Entry{Path: path, Dir: kind == kindDir}
		if e.Dir {
			dirs[path] = true
			e.Mode = mode&0o755 | 0o700
		} else {
			if len(r) < 8 {
				return nil, fmt.Errorf("file size cut: %w", ErrInvalid)
			}
			size := binary.BigEndian.Uint64(r[:8])
			r = r[8:]
			if size > uint64(len(r)) {
				return nil, fmt.Errorf("file content cut: %w", ErrInvalid)
			}
			e.Data, r = r[:size:size], r[size:]
			e.Mode = mode&0o755 | 0o600
		}
		out = append(out, e)
	}
}

// checkPath accepts a relative path of plain components passing through
// at most maxDepth directories (its own included for a directory) and
// returns its parent ("" for the top).
func checkPath(path string, dir bool, maxDepth int) (string, error) {
	if path == "" || len(path) > maxPathBytes {
		return "", fmt.Errorf("a path empty or over %d bytes: %w", maxPathBytes, ErrInvalid)
	}
	parts := strings.Split(path, "/")
	if depth := len(parts) - 1; depth > maxDepth || dir && depth+1 > maxDepth {
		return "", fmt.Errorf("a path deeper than %d directories: %w", maxDepth, ErrInvalid)
	}
	for _, c := range parts {
		if c == "" || c == "." || c == ".." || len(c) > maxNameBytes || strings.IndexByte(c, 0) >= 0 {
			return "", fmt.Errorf("a path with an empty, dot, dot-dot, NUL or over-long component: %w", ErrInvalid)
		}
	}
	return strings.Join(parts[:len(parts)-1], "/"), nil
}

// Unpack replaces dir's contents with the archive's. It checks the whole
// archive first (an invalid one changes nothing), then takes dir and what
// is below it back (owner the calling process, without following links:
// the guest's tree may deny the host even reading it), empties it and
// writes the entries. The tree is left to the calling process's uid; the
// caller gives it to the guest.
func Unpack(dir string, data []byte, lim Limits) error {
	entries, err := Decode(data, lim)
	if err != nil {
		return err
	}
	uid, gid := os.Getuid(), os.Getgid()
	root, err := takeDir(unix.AT_FDCWD, dir, uid, gid)
	if err != nil {
		return fmt.Errorf("take workspace: %w", err)
	}
	defer unix.Close(root)
	seen := 0
	if err := empty(root, uid, gid, 0, &seen, lim); err != nil {
		return fmt.Errorf("empty workspace: %w", err)
	}
	for i, e := range entries {
		if err := create(root, e); err != nil {
			return fmt.Errorf("restore entry %d: %w", i, err)
		}
	}
	// Directory modes last, deepest first: they stay writable while filled.
	for i := len(entries) - 1; i >= 0; i-- {
		if e := entries[i]; e.Dir {
			fd, err := openBelow(root, e.Path)
			if err != nil {
				return fmt.Errorf("restore entry %d: %w", i, err)
			}
			err = unix.Fchmod(fd, e.Mode)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("restore entry %d: %w", i, err)
			}
		}
	}
	return nil
}

// empty removes everything below fd, taking each directory back first.
func empty(fd, uid, gid, depth int, seen *int, lim Limits) error {
	max := lim.MaxEntries * seenFactor
	names, err := readNames(fd, seen, max)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat an entry: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Unlinkat(fd, name, 0); err != nil {
				return fmt.Errorf("remove an entry: %w", err)
			}
			continue
		}
		if depth >= lim.MaxDepth*2 {
			return fmt.Errorf("deeper than %d directories: %w", lim.MaxDepth*2, ErrTooLarge)
		}
		child, err := takeDir(fd, name, uid, gid)
		if err != nil {
			return fmt.Errorf("take a directory: %w", err)
		}
		err = empty(child, uid, gid, depth+1, seen, lim)
		unix.Close(child)
		if err != nil {
			return err
		}
		if err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR); err != nil {
			return fmt.Errorf("remove an entry: %w", err)
		}
	}
	return nil
}

// takeDir makes the directory name below parent the caller's (owner uid,
// mode 0700) and opens it, following no link: a guest's directory may deny
// its owner-to-be even a search. The change goes through an O_PATH
// descriptor (a link there is refused by O_DIRECTORY), the mode through
// /proc/self/fd, which names that very inode.
func takeDir(parent int, name string, uid, gid int) (int, error) {
	pfd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	if err := unix.Fchownat(pfd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return -1, err
	}
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(pfd), 0o700); err != nil {
		return -1, err
	}
	return unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

func create(root int, e Entry) error {
	dir, base := "", e.Path
	if i := strings.LastIndexByte(e.Path, '/'); i >= 0 {
		dir, base = e.Path[:i], e.Path[i+1:]
	}
	parent := root
	if dir != "" {
		fd, err := openBelow(root, dir)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		parent = fd
	}
	if e.Dir {
		return unix.Mkdirat(parent, base, 0o700)
	}
	fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "workspace entry")
	defer f.Close()
	if _, err := f.Write(e.Data); err != nil {
		return err
	}
	if err := f.Chmod(os.FileMode(e.Mode)); err != nil {
		return err
	}
	return f.Close()
}

// openBelow opens the directory at a checked relative path below root,
// one component at a time, following no link.
func openBelow(root int, rel string) (int, error) {
	cur := root
	for _, c := range strings.Split(rel, "/") {
		next, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if cur != root {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}
