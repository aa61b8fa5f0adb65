package client

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// maxTurnAnswerBytes bounds a turn's answer: reply files of up to 50 MiB
// in base64, the text, and room for the JSON around them.
const maxTurnAnswerBytes = richproto.MaxPacketBytes + 1<<20

// ErrUnsafeFileName refuses a reply file name that is not one plain,
// visible file name.
var ErrUnsafeFileName = errors.New("reply file name is not a plain file name")

// CheckReplyFileName refuses a name that is not a plain, visible file name
// (richproto.ValidFileName): empty or over 255 bytes, not UTF-8, a path
// separator, a control or format character (a direction override, a
// zero-width character, a C1 control), or a leading '.' (which also
// refuses "." and ".."). The error quotes the name escaped.
func CheckReplyFileName(name string) error {
	if !richproto.ValidFileName(name) {
		return fmt.Errorf("%+q: %w", name, ErrUnsafeFileName)
	}
	return nil
}

// checkReplyFiles applies the reply-file bounds to what the host sent.
func checkReplyFiles(files []richproto.File) error {
	if len(files) > richproto.MaxReplyFiles {
		return fmt.Errorf("%d reply files; at most %d", len(files), richproto.MaxReplyFiles)
	}
	sum := 0
	for _, f := range files {
		if err := CheckReplyFileName(f.Name); err != nil {
			return err
		}
		if len(f.Type) > richproto.MaxAttachmentType || strings.IndexFunc(f.Type, func(c rune) bool { return c <= ' ' || c >= 0x7f }) >= 0 {
			return fmt.Errorf("reply file %q has a type that is not a media type", f.Name)
		}
		if len(f.Data) > richproto.MaxReplyFileBytes {
			return fmt.Errorf("reply file %q is over %d bytes", f.Name, richproto.MaxReplyFileBytes)
		}
		sum += len(f.Data)
	}
	if sum > richproto.MaxReplyFilesSum {
		return fmt.Errorf("reply files are over %d bytes in total", richproto.MaxReplyFilesSum)
	}
	return nil
}

// WriteReplyFiles writes files into the directory dir and returns the
// paths written. Every name and bound is checked before anything is
// written; each file is created exclusively under dir's descriptor without
// following a link (never over an existing file, never through a symlink
// planted at its name), written to a temporary name, synced and renamed
// into place without replacing anything. A file that cannot be placed
// stops the writing; those already written stay.
func WriteReplyFiles(dir string, files []richproto.File) ([]string, error) {
	if err := checkReplyFiles(files); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f.Name] {
			return nil, fmt.Errorf("reply file %q named twice", f.Name)
		}
		seen[f.Name] = true
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("files directory %q: %w", dir, err)
	}
	defer unix.Close(dfd)
	var written []string
	for _, f := range files {
		if err := writeOne(dfd, f); err != nil {
			return written, fmt.Errorf("write %q: %w", strings.TrimSuffix(dir, "/")+"/"+f.Name, err)
		}
		written = append(written, strings.TrimSuffix(dir, "/")+"/"+f.Name)
	}
	if len(written) > 0 {
		if err := unix.Fsync(dfd); err != nil {
			return written, fmt.Errorf("sync %s: %w", dir, err)
		}
	}
	return written, nil
}

func writeOne(dfd int, f richproto.File) error {
	return atomicfile.CreateAt(dfd, f.Name, f.Data, 0o600)
}
