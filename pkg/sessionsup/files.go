package sessionsup

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// resolveFlags: nothing on the path may be a symlink (magic links
// included) and nothing may resolve outside the root's directory, checked
// by the kernel during the one lookup, so swapping a directory for a
// symlink between checks has no window.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// maxGetDirDepth bounds a get-dir's nesting (each level holds a descriptor).
const maxGetDirDepth = 64

// fileError is a file operation's failure as an error event's code.
type fileError struct{ code, msg string }

func (e *fileError) Error() string { return e.msg }

func ferr(code, msg string) error { return &fileError{code, msg} }

// errnoError maps a resolution or open error to a generic failure.
func errnoError(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return ferr(sessionwire.ErrNotFound, "no such file or directory")
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		// ELOOP: a symlink on the path; EXDEV: out of the root.
		return ferr(sessionwire.ErrDenied, "a symlink on the path, a path out of its root, or no permission")
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR):
		return ferr(sessionwire.ErrNotRegular, "not a regular file or not a directory")
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return ferr(sessionwire.ErrTooLarge, "no space left in the session")
	}
	return ferr(sessionwire.ErrInternal, "the file operation failed")
}

// openBeneath opens rel beneath the directory of the session path's root.
func (s *Server) openBeneath(p string, flags int, mode uint32) (int, string, error) {
	root, rel, err := sessionwire.SplitPath(p)
	if err != nil {
		return -1, "", ferr(sessionwire.ErrBadRequest, "invalid path")
	}
	base := s.o.WorkDir
	switch root {
	case sessionwire.RootOutput:
		base = s.o.OutputDir
	case sessionwire.RootTmp:
		base = s.o.TmpDir
	}
	fd, err := openAt(base, rel, flags, mode)
	if err != nil {
		return -1, "", errnoError(err)
	}
	return fd, rel, nil
}

// openAt opens rel beneath the directory base (itself not a symlink) with
// resolveFlags: the kernel refuses ".." out of base (EXDEV), an absolute
// rel (EXDEV) and any symlink on the way (ELOOP).
func openAt(base, rel string, flags int, mode uint32) (int, error) {
	rootfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(rootfd)
	return unix.Openat2(rootfd, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveFlags})
}

// asGuest runs f on a throwaway thread whose filesystem ids are the
// guest's, in no supplementary group; changing the filesystem uid from 0
// makes the kernel drop the thread's filesystem capabilities (DAC_OVERRIDE,
// DAC_READ_SEARCH, FOWNER, CHOWN, FSETID...). When the supervisor is not
// root it is the guest already.
func (s *Server) asGuest(f func() error) error {
	var err error
	supervisor.OnThrowawayThread(func() {
		if s.root {
			if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
				err = fmt.Errorf("setgroups: %w", e)
				return
			}
			_ = unix.Setfsgid(s.o.GID)
			_ = unix.Setfsuid(s.o.UID)
			// setfsuid reports no error: read the ids back.
			if g, _ := unix.SetfsgidRetGid(-1); g != s.o.GID {
				err = errors.New("setfsgid did not take")
				return
			}
			if u, _ := unix.SetfsuidRetUid(-1); u != s.o.UID {
				err = errors.New("setfsuid did not take")
				return
			}
		}
		err = f()
	})
	return err
}

// finish sends the file operation's failure, if any.
func (s *Server) finish(id string, err error) {
	if err == nil {
		return
	}
	var fe *fileError
	if !errors.As(err, &fe) {
		s.log.Error("file operation failed", "id", id, "reason", err.Error())
		fe = &fileError{sessionwire.ErrInternal, "the file operation failed"}
	}
	s.fail(id, fe.code, fe.msg)
}

// put writes data (exactly f.Size bytes, which the decoder bounds) to a
// temporary file beside the target, syncs it and renames it over the
// target. The data is read to its end whatever happens, so the stream
// stays in step.
func (s *Server) put(id string, f sessionwire.File, data io.Reader) {
	defer io.Copy(io.Discard, data) //nolint:errcheck // the decoder keeps a framing error sticky
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
	}
	err := s.asGuest(func() error {
		dirPath, name := path.Split(f.Path)
		if name == "" || f.Path == "." || f.Path == sessionwire.RootOutput || f.Path == sessionwire.RootTmp {
			return ferr(sessionwire.ErrNotRegular, "a put names a file, not a root")
		}
		dirPath = path.Clean(dirPath)
		if dirPath == "" {
			dirPath = "."
		}
		dirfd, _, err := s.openBeneath(dirPath, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(dirfd)
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		tmp := ".sandbox-put-" + hex.EncodeToString(rnd[:])
		fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return errnoError(err)
		}
		file := os.NewFile(uintptr(fd), tmp)
		done := false
		defer func() {
			file.Close()
			if !done {
				_ = unix.Unlinkat(dirfd, tmp, 0)
			}
		}()
		n, err := io.Copy(file, data)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return errnoError(err) // the write failed (space)
			}
			return ferr(sessionwire.ErrBadRequest, "the put's data did not arrive whole")
		}
		if n != f.Size {
			return ferr(sessionwire.ErrBadRequest, "the put's data did not arrive whole")
		}
		if err := unix.Fchmod(fd, mode); err != nil {
			return errnoError(err)
		}
		if err := unix.Fsync(fd); err != nil {
			return errnoError(err)
		}
		if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
			return errnoError(err)
		}
		done = true
		// The rename is durable once the directory is synced.
		if dfd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			_ = unix.Fsync(dfd)
			unix.Close(dfd)
		}
		s.event(sessionwire.Event{ID: id, Kind: sessionwire.EventFile, File: &sessionwire.FileResult{Size: n}})
		return nil
	})
	s.finish(id, err)
}

// get sends a regular file's bytes, at most its size when opened (and at
// most MaxGetBytes), then a result that says whether it changed while read.
func (s *Server) get(id, p string) {
	err := s.asGuest(func() error {
		fd, _, err := s.openBeneath(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), "get")
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return errnoError(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return ferr(sessionwire.ErrNotRegular, "not a regular file")
		}
		if s.afterStat != nil {
			s.afterStat()
		}
		if st.Size > sessionwire.MaxGetBytes {
			return ferr(sessionwire.ErrTooLarge, fmt.Sprintf("the file is over %d bytes", sessionwire.MaxGetBytes))
		}
		sent, changed, err := s.sendFile(id, f, st.Size)
		if err != nil {
			return err
		}
		s.event(sessionwire.Event{ID: id, Kind: sessionwire.EventFile,
			File: &sessionwire.FileResult{Size: sent, Mode: st.Mode & 0o7777, Changed: changed}})
		return nil
	})
	s.finish(id, err)
}

// sendFile sends up to size bytes of f as file data; changed says it
// ended early or had more.
func (s *Server) sendFile(id string, f *os.File, size int64) (int64, bool, error) {
	buf := make([]byte, sessionwire.MaxFileChunk)
	var sent int64
	for sent < size {
		n, err := f.Read(buf[:min(int64(len(buf)), size-sent)])
		if n > 0 {
			if err := s.enc.Data(sessionwire.FrameFileData, id, buf[:n]); err != nil {
				return sent, false, err
			}
			sent += int64(n)
		}
		if err == io.EOF {
			return sent, true, nil // shrank
		}
		if err != nil {
			return sent, false, errnoError(err)
		}
	}
	n, _ := f.Read(buf[:1])
	return sent, n > 0, nil // grew when there is more
}

// list sends a directory's entries (not followed: lstat of each name) in
// batches, at most MaxListEntries.
func (s *Server) list(id, p string) {
	err := s.asGuest(func() error {
		fd, _, err := s.openBeneath(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(fd), "list")
		defer d.Close()
		batch := sessionwire.ListBatch{Entries: []sessionwire.Entry{}}
		total := 0
		for {
			des, err := d.ReadDir(sessionwire.MaxListBatch)
			for _, de := range des {
				if total == sessionwire.MaxListEntries {
					batch.Truncated = true
					break
				}
				total++
				var st unix.Stat_t
				if err := unix.Fstatat(fd, de.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					continue // gone since
				}
				batch.Entries = append(batch.Entries, entry(de.Name(), &st))
				if len(batch.Entries) == sessionwire.MaxListBatch {
					s.event(sessionwire.Event{ID: id, Kind: sessionwire.EventList, List: &batch})
					batch = sessionwire.ListBatch{Entries: []sessionwire.Entry{}}
				}
			}
			if batch.Truncated || err == io.EOF || len(des) == 0 {
				break
			}
			if err != nil {
				return errnoError(err)
			}
		}
		batch.Done = true
		s.event(sessionwire.Event{ID: id, Kind: sessionwire.EventList, List: &batch})
		return nil
	})
	s.finish(id, err)
}

func entry(name string, st *unix.Stat_t) sessionwire.Entry {
	e := sessionwire.Entry{Name: name, Type: sessionwire.EntryOther, Mode: st.Mode & 0o7777}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type, e.Size = sessionwire.EntryFile, st.Size
	case unix.S_IFDIR:
		e.Type = sessionwire.EntryDir
	case unix.S_IFLNK:
		e.Type = sessionwire.EntrySymlink
	}
	return e
}

// tarOut frames a tar stream as file data and bounds it.
type tarOut struct {
	s   *Server
	id  string
	n   int64
	err error
}

func (t *tarOut) Write(p []byte) (int, error) {
	if t.n+int64(len(p)) > sessionwire.MaxTarBytes {
		t.err = ferr(sessionwire.ErrTooLarge, fmt.Sprintf("the directory's tar is over %d bytes", sessionwire.MaxTarBytes))
		return 0, t.err
	}
	if err := t.s.enc.Data(sessionwire.FrameFileData, t.id, p); err != nil {
		return 0, err
	}
	t.n += int64(len(p))
	return len(p), nil
}

// getDir sends a directory as a tar stream of its directories and regular
// files (no symlink followed or stored; others skipped and counted),
// bounded by MaxTarBytes: past it the request ends in a too_large error
// and the host drops what it received.
func (s *Server) getDir(id, p string) {
	err := s.asGuest(func() error {
		fd, _, err := s.openBeneath(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		out := &tarOut{s: s, id: id}
		tw := tar.NewWriter(out)
		g := &getDirWalk{tw: tw}
		werr := g.walk(fd, "", 0)
		unix.Close(fd)
		if werr == nil {
			werr = tw.Close()
		}
		if werr != nil {
			if out.err != nil {
				return out.err
			}
			return werr
		}
		s.event(sessionwire.Event{ID: id, Kind: sessionwire.EventFile,
			File: &sessionwire.FileResult{Size: out.n, Changed: g.changed, Skipped: g.skipped}})
		return nil
	})
	s.finish(id, err)
}

type getDirWalk struct {
	tw      *tar.Writer
	skipped int
	changed bool
}

// walk adds the entries of the directory dirfd (named prefix in the tar).
func (g *getDirWalk) walk(dirfd int, prefix string, depth int) error {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return errnoError(err)
	}
	d := os.NewFile(uintptr(dup), "dir")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return errnoError(err)
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			g.skipped++
			continue
		}
		tname := prefix + name
		mt := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if depth >= maxGetDirDepth {
				g.skipped++
				continue
			}
			cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				g.skipped++
				continue
			}
			if err := g.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: tname + "/", Mode: int64(st.Mode & 0o777), ModTime: mt}); err != nil {
				unix.Close(cfd)
				return err
			}
			err = g.walk(cfd, tname+"/", depth+1)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			ffd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				g.skipped++
				continue
			}
			f := os.NewFile(uintptr(ffd), name)
			var fst unix.Stat_t
			if err := unix.Fstat(ffd, &fst); err != nil || fst.Mode&unix.S_IFMT != unix.S_IFREG {
				f.Close()
				g.skipped++
				continue
			}
			err = g.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: tname, Mode: int64(fst.Mode & 0o777), Size: fst.Size, ModTime: mt})
			if err == nil {
				// Exactly the size announced: a file that grew is cut, one
				// that shrank padded with zeros, and the result says so.
				var n int64
				n, err = io.Copy(g.tw, io.LimitReader(f, fst.Size))
				if err == nil && n < fst.Size {
					g.changed = true
					_, err = io.Copy(g.tw, io.LimitReader(zeros{}, fst.Size-n))
				}
			}
			f.Close()
			if err != nil {
				return err
			}
		default:
			g.skipped++
		}
	}
	return nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
