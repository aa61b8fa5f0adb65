package rich

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// Reply files: the model writes them with the write_reply_file tool into
// the turn's outbox (OutboxDir in the workspace, emptied when a turn
// starts); the worker reads the outbox once the turn's final text is
// known, through the outbox's directory descriptor without following any
// link, and sends the files in its reply packet. The tool refuses a file
// over a bound, and the collection enforces the same bounds again on what
// is in the directory, whoever wrote it.
const (
	OutboxDir          = "outbox"
	ReplyFileTool      = "write_reply_file"
	maxOutboxListing   = 1024 // directory entries read when listing the outbox
	maxReplyFileName   = 100
	defaultReplyFileTy = "application/octet-stream"
)

var (
	// replyFileNameRe: a plain file name, never hidden, never a path.
	replyFileNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// errToolRefused: a worker tool refused its input; the reason is
	// fixed text the model may read.
	errToolRefused = errors.New("refused")
)

func refusedf(format string, a ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), errToolRefused)
}

// ValidReplyFileName reports whether name is a name the worker writes.
func ValidReplyFileName(name string) bool {
	return len(name) <= maxReplyFileName && replyFileNameRe.MatchString(name) && !strings.Contains(name, "..")
}

// replyTypes maps a file extension to the type the reply names.
var replyTypes = map[string]string{
	".txt": "text/plain", ".md": "text/markdown", ".csv": "text/csv", ".json": "application/json",
	".html": "text/html", ".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
	".gif": "image/gif", ".webp": "image/webp", ".pdf": "application/pdf",
}

func replyFileType(name string) string {
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		if t, ok := replyTypes[strings.ToLower(name[i:])]; ok {
			return t
		}
	}
	return defaultReplyFileTy
}

var replyFileSpec = protocol.ToolSpec{
	Name: ReplyFileTool,
	Description: fmt.Sprintf("Attach a file to your reply. Give a plain file name (letters, digits, '.', '_', '-'; at most %d characters) and exactly one of text (UTF-8 content) or base64 (binary content). At most %d files per reply, %d MiB each, %d MiB in total; a name can be written once per reply.",
		maxReplyFileName, richproto.MaxReplyFiles, richproto.MaxReplyFileBytes>>20, richproto.MaxReplyFilesSum>>20),
	Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"text":{"type":"string"},"base64":{"type":"string"}},"required":["name"],"additionalProperties":false}`),
}

// outbox is a turn's open outbox directory.
type outbox struct {
	fd    int
	files int
	bytes int
}

// openOutbox opens (creating it) the outbox under the workspace
// descriptor and empties it. Anything else found at its name (a link, a
// file) is removed, never followed.
func openOutbox(dirfd int) (*outbox, error) {
	fd, err := unix.Openat(dirfd, OutboxDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			// A link or a file planted at the name: remove it.
			if err := unix.Unlinkat(dirfd, OutboxDir, 0); err != nil {
				return nil, fmt.Errorf("replace outbox: %w", err)
			}
		}
		if err := unix.Mkdirat(dirfd, OutboxDir, 0o700); err != nil {
			return nil, fmt.Errorf("create outbox: %w", err)
		}
		if fd, err = unix.Openat(dirfd, OutboxDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("open outbox: %w", err)
		}
	}
	o := &outbox{fd: fd}
	names, err := o.list()
	if err != nil {
		o.close()
		return nil, err
	}
	for _, n := range names {
		// Entries of the last turn (a directory left by anyone: removed
		// only when empty; then the turn fails, as the outbox is unusable).
		if err := unix.Unlinkat(fd, n, 0); err != nil {
			if err := unix.Unlinkat(fd, n, unix.AT_REMOVEDIR); err != nil {
				o.close()
				return nil, fmt.Errorf("empty outbox: %w", err)
			}
		}
	}
	return o, nil
}

func (o *outbox) close() {
	if o != nil && o.fd >= 0 {
		unix.Close(o.fd)
		o.fd = -1
	}
}

// list reads the outbox's names through a new descriptor of the same
// directory (its own offset), at most maxOutboxListing of them.
func (o *outbox) list() ([]string, error) {
	fd, err := unix.Openat(o.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	f := os.NewFile(uintptr(fd), OutboxDir)
	defer f.Close()
	names, err := f.Readdirnames(maxOutboxListing)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list outbox: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// write is the write_reply_file tool.
func (o *outbox) write(input json.RawMessage) (string, error) {
	var in struct {
		Name   string  `json:"name"`
		Text   *string `json:"text"`
		Base64 *string `json:"base64"`
	}
	if protocol.DecodeStrict(input, &in) != nil {
		return "", refusedf("arguments must be an object with name and one of text or base64")
	}
	if !ValidReplyFileName(in.Name) {
		return "", refusedf("the name must be a plain file name of letters, digits, '.', '_' and '-', at most %d characters, not starting with '.'", maxReplyFileName)
	}
	if (in.Text == nil) == (in.Base64 == nil) {
		return "", refusedf("give exactly one of text or base64")
	}
	var data []byte
	if in.Text != nil {
		data = []byte(*in.Text)
	} else {
		if base64.StdEncoding.DecodedLen(len(*in.Base64)) > richproto.MaxReplyFileBytes+3 {
			return "", refusedf("a reply file is at most %d bytes", richproto.MaxReplyFileBytes)
		}
		var err error
		if data, err = base64.StdEncoding.DecodeString(*in.Base64); err != nil {
			return "", refusedf("base64 is not valid standard base64")
		}
	}
	switch {
	case o.files >= richproto.MaxReplyFiles:
		return "", refusedf("a reply carries at most %d files", richproto.MaxReplyFiles)
	case len(data) > richproto.MaxReplyFileBytes:
		return "", refusedf("a reply file is at most %d bytes", richproto.MaxReplyFileBytes)
	case o.bytes+len(data) > richproto.MaxReplyFilesSum:
		return "", refusedf("a reply's files are at most %d bytes in total", richproto.MaxReplyFilesSum)
	}
	fd, err := unix.Openat(o.fd, in.Name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return "", refusedf("a file of that name is already attached to this reply")
	}
	if err != nil {
		return "", fmt.Errorf("create reply file: %w", err)
	}
	f := os.NewFile(uintptr(fd), in.Name)
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(o.fd, in.Name, 0)
		return "", fmt.Errorf("write reply file: %w", err)
	}
	o.files++
	o.bytes += len(data)
	return fmt.Sprintf("Attached %s (%d bytes) to your reply.", in.Name, len(data)), nil
}

// collect reads the outbox's files for the reply packet, in name order:
// regular files only, opened without following a link and without
// blocking on a FIFO; a name, a count, a size or a total over a bound is
// refused (left out and logged), whoever wrote it.
func (o *outbox) collect(log *slog.Logger) ([]richproto.File, error) {
	names, err := o.list()
	if err != nil {
		return nil, err
	}
	var files []richproto.File
	sum := 0
	for _, n := range names {
		refuse := func(reason string) { log.Warn("reply file refused", "reason", reason) }
		if !ValidReplyFileName(n) {
			refuse("name")
			continue
		}
		if len(files) >= richproto.MaxReplyFiles {
			refuse("count")
			continue
		}
		data, reason, err := readReplyFile(o.fd, n)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			refuse(reason)
			continue
		}
		if sum+len(data) > richproto.MaxReplyFilesSum {
			refuse("total")
			continue
		}
		sum += len(data)
		files = append(files, richproto.File{Name: n, Type: replyFileType(n), Data: data})
	}
	return files, nil
}

// readReplyFile reads one outbox entry; reason names a refusal (not a
// regular file, over the size bound).
func readReplyFile(dirfd int, name string) (data []byte, reason string, err error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT) {
		return nil, "not a regular file", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("open reply file: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, "", fmt.Errorf("stat reply file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, "not a regular file", nil
	}
	if st.Size > richproto.MaxReplyFileBytes {
		return nil, "size", nil
	}
	// The size can change under us: read at most one byte more.
	data, err = io.ReadAll(io.LimitReader(f, richproto.MaxReplyFileBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("read reply file: %w", err)
	}
	if len(data) > richproto.MaxReplyFileBytes {
		return nil, "size", nil
	}
	return data, "", nil
}

// replyFileTool runs write_reply_file for the turn.
func (t *turnRun) replyFileTool(_ context.Context, input json.RawMessage) (string, error) {
	if t.outbox == nil {
		return "", errors.New("no outbox")
	}
	return t.outbox.write(input)
}
