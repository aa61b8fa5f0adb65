// Package sessions is a rich channel's conversation as JSONL files in its
// workspace (DESIGN.md section 13, the seed's "Pi isolation and
// continuity"), the compaction tiers and the compactor protocol.
//
// Guarantees: the sessions directory and its files are reached only through
// no-follow directory descriptors, so a symlink planted at sessions/,
// sessions/archive or a session file is refused or replaced, never
// followed; a session file is append-only, each entry one fsynced line of
// at most MaxLineBytes, the file at most MaxFileBytes; a file that is not a
// valid session (truncated line, invalid UTF-8, unknown field, oversized,
// broken reference) fails Open with ErrCorrupt and is left byte for byte
// as it was; memory holds only the current context (from the last
// compaction's first kept entry on), not the whole file. Standard library,
// x/sys/unix and atomicfile only: the worker uses it inside the container.
package sessions

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
)

// Bounds and names.
const (
	// DirName is the sessions directory in the workspace.
	DirName = "sessions"
	// ArchiveDirName is where Archive moves session files, inside DirName.
	ArchiveDirName = "archive"
	// Ext ends every session file name.
	Ext = ".jsonl"
	// MaxLineBytes bounds one entry's line, newline included: a turn's
	// largest message (eight 20 MiB images are the media issue's, sent as
	// references, not stored inline) stays well under it.
	MaxLineBytes = 16 << 20
	// MaxFileBytes bounds a session file: past it Append fails with
	// ErrFull and the channel needs a fresh start; the tiers compact long
	// before the context gets near it.
	MaxFileBytes = 512 << 20
	// MaxDirEntries bounds the names Open looks at in sessions/.
	MaxDirEntries = 4096
)

// ErrFull reports an entry that would take the file past MaxFileBytes.
var ErrFull = errors.New("session file full")

// Session is one open session file. Its methods are safe for concurrent use.
type Session struct {
	mu      sync.Mutex
	dirfd   int // sessions/
	f       *os.File
	name    string
	size    int64
	ids     map[string]struct{}
	entries []Entry // the current context: from the last compaction's first kept entry on
	now     func() time.Time
}

// Open continues the most recent session in workspace/sessions (the seed's
// continueRecent), or starts one when there is none. workspace itself is
// opened without following a final symlink; sessions/ is created when
// missing and refused when it is a symlink or not a directory.
func Open(workspace string) (*Session, error) {
	wfd, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sessions: open workspace: %w", err)
	}
	defer unix.Close(wfd)
	return OpenAt(wfd)
}

// OpenAt is Open for the workspace open as the directory descriptor wfd
// (not retained).
func OpenAt(wfd int) (*Session, error) {
	dfd, err := openSessionsDir(wfd)
	if err != nil {
		return nil, err
	}
	s, err := openIn(dfd)
	if err != nil {
		unix.Close(dfd)
		return nil, err
	}
	return s, nil
}

func openSessionsDir(wfd int) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	dfd, err := unix.Openat(wfd, DirName, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(wfd, DirName, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("sessions: create %s/: %w", DirName, err)
		}
		dfd, err = unix.Openat(wfd, DirName, flags, 0)
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("sessions: %s is a symlink or not a directory: refused (a fresh start replaces it)", DirName)
	case err != nil:
		return -1, fmt.Errorf("sessions: open %s/: %w", DirName, err)
	}
	return dfd, nil
}

func openIn(dfd int) (*Session, error) {
	name, err := mostRecent(dfd)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return create(dfd, time.Now)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sessions: open %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	s := &Session{dirfd: dfd, f: f, name: name, ids: map[string]struct{}{}, now: time.Now}
	if err := s.load(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// mostRecent names the session file modified last (ties: the greater
// name), or "" when there is none.
func mostRecent(dfd int) (string, error) {
	files, err := sessionFiles(dfd)
	if err != nil {
		return "", err
	}
	var best sessionFile
	for _, f := range files {
		if best.name == "" || f.mtime > best.mtime || (f.mtime == best.mtime && f.name > best.name) {
			best = f
		}
	}
	return best.name, nil
}

// create starts a new session file whose header is written atomically, so
// a session file always has its header.
func create(dfd int, now func() time.Time) (*Session, error) {
	t := now().UTC()
	id := newID()
	name := t.Format("20060102T150405.000000000Z") + "_" + id + Ext
	h := Entry{Type: TypeSession, ID: id, Timestamp: t.Format(time.RFC3339Nano), Version: Version}
	line, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	line = append(line, '\n')
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("sessions: new session name %s taken", name)
	}
	if err := atomicfile.WriteAt(dfd, name, line, 0o600); err != nil {
		return nil, fmt.Errorf("sessions: create %s: %w", name, err)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDWR|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sessions: open %s: %w", name, err)
	}
	return &Session{
		dirfd: dfd, f: os.NewFile(uintptr(fd), name), name: name, size: int64(len(line)),
		ids: map[string]struct{}{id: {}}, now: now,
	}, nil
}

func newID() string {
	var b [8]byte
	if _, err := unix.Getrandom(b[:], 0); err != nil {
		// Unreachable on Linux ≥ 3.17; time keeps ids distinct enough.
		n := time.Now().UnixNano()
		for i := range b {
			b[i] = byte(n >> (8 * i))
		}
	}
	return hex.EncodeToString(b[:])
}

// corrupt wraps a load failure with the file and line it names.
func (s *Session) corrupt(line int, format string, a ...any) error {
	where := s.name
	if line > 0 {
		where = fmt.Sprintf("%s line %d", s.name, line)
	}
	return fmt.Errorf("sessions: %s: %s: %w", where, fmt.Sprintf(format, a...), ErrCorrupt)
}

// errNoNewline marks a last line without its newline (a torn write).
var errNoNewline = errors.New("last line has no newline")

// splitLines is bufio.ScanLines without its leniency: '\n' only, and a
// final line without one is an error.
func splitLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return 0, nil, errNoNewline
	}
	return 0, nil, nil
}

// load reads the whole file once, strictly, keeping the current context.
func (s *Session) load() error {
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("sessions: stat %s: %w", s.name, err)
	}
	if !st.Mode().IsRegular() {
		return s.corrupt(0, "not a regular file")
	}
	if st.Size() > MaxFileBytes {
		return s.corrupt(0, "%d bytes, limit %d", st.Size(), MaxFileBytes)
	}
	sc := bufio.NewScanner(io.LimitReader(s.f, MaxFileBytes+1))
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	sc.Split(splitLines)
	n := 0
	var size int64
	for sc.Scan() {
		n++
		line := sc.Bytes()
		size += int64(len(line)) + 1
		if size > MaxFileBytes {
			return s.corrupt(n, "file over %d bytes", MaxFileBytes)
		}
		e, err := decodeEntry(line)
		if err != nil {
			return s.corrupt(n, "%v", err)
		}
		if err := e.check(); err != nil {
			return s.corrupt(n, "%v", err)
		}
		if (n == 1) != (e.Type == TypeSession) {
			return s.corrupt(n, "the header must be the first line and only the first")
		}
		if err := s.admit(e); err != nil {
			return s.corrupt(n, "%v", err)
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return s.corrupt(n+1, "line over %d bytes", MaxLineBytes)
	case errors.Is(err, errNoNewline):
		return s.corrupt(n+1, "truncated: %v", err)
	case err != nil:
		return fmt.Errorf("sessions: read %s: %w", s.name, err)
	}
	if n == 0 {
		return s.corrupt(0, "empty: no header")
	}
	s.size = size
	return nil
}

// admit adds a checked entry to the in-memory state: unique id, and a
// compaction's first kept entry must be a message of the current context.
func (s *Session) admit(e Entry) error {
	if _, dup := s.ids[e.ID]; dup {
		return errors.New("duplicate entry id")
	}
	if e.Type == TypeSession {
		s.ids[e.ID] = struct{}{}
		return nil
	}
	if e.Type == TypeCompaction {
		keep := len(s.entries)
		if k := e.Compaction.FirstKeptEntryID; k != "" {
			keep = -1
			for i := range s.entries {
				if s.entries[i].ID == k && s.entries[i].isMessage() {
					keep = i
					break
				}
			}
			if keep < 0 {
				return errors.New("compaction's firstKeptEntryId is not a message of the current context")
			}
		}
		// Copy so the summarized entries' memory is released. The reader
		// record the kept entries fall under stays with them (readers.go).
		kept := []Entry(nil)
		if r := lastReaders(s.entries[:keep]); r != nil && (keep == len(s.entries) || s.entries[keep].Type != TypeReaders) {
			kept = append(kept, *r)
		}
		s.entries = append(append(kept, s.entries[keep:]...), e)
	} else {
		s.entries = append(s.entries, e)
	}
	s.ids[e.ID] = struct{}{}
	return nil
}

// Name is the session file's name in sessions/.
func (s *Session) Name() string { return s.name }

// Size is the session file's size in bytes.
func (s *Session) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// Append checks e, gives it an id and a timestamp when it has none, and
// writes it as one line, fsynced before Append returns. A refused entry
// (ErrInvalid, ErrFull) writes nothing; a failed write is truncated away.
func (s *Session) Append(e Entry) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return e, errors.New("sessions: session closed")
	}
	if e.Type == TypeSession {
		return e, fmt.Errorf("sessions: a header cannot be appended: %w", ErrInvalid)
	}
	if e.ID == "" {
		for e.ID = newID(); ; e.ID = newID() {
			if _, dup := s.ids[e.ID]; !dup {
				break
			}
		}
	}
	if e.Timestamp == "" {
		e.Timestamp = s.now().UTC().Format(time.RFC3339Nano)
	}
	if err := e.check(); err != nil {
		return e, fmt.Errorf("sessions: %v: %w", err, ErrInvalid)
	}
	if _, dup := s.ids[e.ID]; dup {
		return e, fmt.Errorf("sessions: duplicate entry id: %w", ErrInvalid)
	}
	line, err := json.Marshal(e)
	if err != nil {
		return e, fmt.Errorf("sessions: encode: %v: %w", err, ErrInvalid)
	}
	line = append(line, '\n')
	if len(line) > MaxLineBytes {
		return e, fmt.Errorf("sessions: entry of %d bytes over %d: %w", len(line), MaxLineBytes, ErrInvalid)
	}
	if s.size+int64(len(line)) > MaxFileBytes {
		return e, fmt.Errorf("sessions: %s would pass %d bytes: %w", s.name, MaxFileBytes, ErrFull)
	}
	// Check references before writing; admit mutates only on success.
	saved := s.entries
	if err := s.admit(e); err != nil {
		s.entries = saved
		return e, fmt.Errorf("sessions: %v: %w", err, ErrInvalid)
	}
	if err := s.write(line); err != nil {
		s.entries = saved
		delete(s.ids, e.ID)
		return e, err
	}
	return e, nil
}

func (s *Session) write(line []byte) error {
	if _, err := s.f.Write(line); err != nil {
		// A torn line would make the file corrupt: cut it off.
		_ = s.f.Truncate(s.size)
		return fmt.Errorf("sessions: write %s: %w", s.name, err)
	}
	if err := s.f.Sync(); err != nil {
		_ = s.f.Truncate(s.size)
		return fmt.Errorf("sessions: fsync %s: %w", s.name, err)
	}
	s.size += int64(len(line))
	return nil
}

// Entries are the current context's entries in file order: from the last
// compaction's first kept entry on, that compaction and everything after
// it. Older entries stay in the file only.
func (s *Session) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Entry(nil), s.entries...)
}

// Context is what the worker sends the model.
type Context struct {
	// Summary is the last compaction's summary ("" before the first),
	// which goes first.
	Summary string
	// Compaction is the last compaction entry, nil before the first.
	Compaction *Entry
	// Messages are the user, assistant and toolResult entries from the
	// last compaction's first kept entry on, in order (readers records and
	// the compaction itself left out).
	Messages []Entry
	// Kept is how many of Messages precede the last compaction (the kept
	// ones): usage reported for them measured the context before it.
	Kept int
	// Owner maps a message's entry id to the reader record of its turn;
	// a message without one (written before reader records) is absent.
	Owner map[string]ReaderRecord
}

// Context returns the context to send.
func (s *Session) Context() Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Context{Owner: map[string]ReaderRecord{}}
	var owner *ReaderRecord
	for i := range s.entries {
		e := s.entries[i]
		switch {
		case e.Type == TypeReaders:
			r, _ := decodeReaders(e.Readers) // checked at admission
			owner = &r
		case e.isMessage() && owner != nil:
			c.Owner[e.ID] = *owner
			c.Messages = append(c.Messages, e)
		case e.Type == TypeCompaction:
			c.Compaction = &e
			c.Summary = e.Compaction.Summary
			c.Kept = len(c.Messages)
		case e.isMessage():
			c.Messages = append(c.Messages, e)
		}
	}
	return c
}

// Close closes the file and the directory descriptor.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	unix.Close(s.dirfd)
	s.f = nil
	return err
}
