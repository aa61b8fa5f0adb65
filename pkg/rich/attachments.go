package rich

// A turn's attachments (richproto.Turn.Attachments): the worker asks its
// broker for each by index (the broker fetches it through safefetch within
// 25 MiB each and 50 MiB a turn), stores the bytes exclusively under
// <workspace>/attachments/<turn id>/ through no-follow directory
// descriptors (a link or file planted at "attachments" is removed, never
// followed; an existing name is never overwritten), and prepares images
// from the bytes in memory, never by reopening a path: at most
// richproto.MaxImages, each checked from its headers (prepareImage), the
// turn's decoded total at most richproto.MaxDecodedImages. The model gets a
// note for each attachment (stored where, shown as an image, or why not)
// in the turn's user message, and the images as base64 blocks after it in
// this turn's requests (never in the session file: later turns have the
// note and the stored file).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"net/http"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// AttachmentsDir is the workspace directory of stored attachments.
const AttachmentsDir = "attachments"

// Attachments is the broker's /worker/attachment: one attachment's bytes
// by index. ErrAttachmentTooLarge: over a bound (the broker's 413).
type Attachments interface {
	Attachment(ctx context.Context, index int) ([]byte, error)
}

// ErrAttachmentTooLarge is an attachment refused for its size.
var ErrAttachmentTooLarge = errors.New("attachment over its size bound")

// Fixed notes the model reads (never error text).
const (
	noteStored      = "stored"
	noteImage       = "stored; shown as an image"
	noteTooLarge    = "not fetched: over the size limit (25 MiB each, 50 MiB a turn)"
	noteUnavailable = "not fetched: unavailable"
	noteNotStored   = "fetched but not stored: the workspace refused it"
	noteUnsupported = "stored; not shown: unsupported image type (PNG, JPEG, WebP and GIF are)"
	noteImageBounds = "stored; not shown: image over the limits (20 MiB, 8000 px a side, 500 frames, 64 MiB decoded a turn)"
	noteImageCount  = "stored; not shown: at most 8 images a turn"
	noteImageBad    = "stored; not shown: image data malformed"
)

// attachmentNote is what the model reads of one attachment.
type attachmentNote struct {
	Name   string `json:"name"`
	Type   string `json:"type,omitempty"` // as declared (untrusted)
	Status string `json:"status"`
	Path   string `json:"path,omitempty"` // workspace-relative
	Bytes  int    `json:"bytes,omitempty"`
}

// collectAttachments fetches, stores and prepares the turn's attachments.
// It never fails the turn: what cannot be done is noted for the model.
func (t *turnRun) collectAttachments(ctx context.Context, dirfd int) ([]attachmentNote, []ContentBlock) {
	atts := t.turn.Attachments
	if len(atts) == 0 {
		return nil, nil
	}
	notes := make([]attachmentNote, len(atts))
	var images []ContentBlock
	var decoded int64
	dir, dirErr := openTurnAttachments(dirfd, t.turn.ID)
	if dir >= 0 {
		defer unix.Close(dir)
	}
	counts := map[string]int{}
	for i, a := range atts {
		n := &notes[i]
		n.Name, n.Type = a.Name, a.Type
		var data []byte
		var err error
		if t.w.attachments == nil {
			err = errors.New("no attachment route")
		} else {
			data, err = t.w.attachments.Attachment(ctx, i)
		}
		switch {
		case errors.Is(err, ErrAttachmentTooLarge):
			n.Status = noteTooLarge
		case err != nil:
			n.Status = noteUnavailable
		case dirErr != nil:
			n.Status = noteNotStored
		default:
			name := storedName(i, a.Name)
			if err := storeExclusive(dir, name, data); err != nil {
				n.Status = noteNotStored
				break
			}
			n.Path, n.Bytes, n.Status = AttachmentsDir+"/"+t.turn.ID+"/"+name, len(data), noteStored
			info, err := prepareImage(data)
			switch {
			case errors.Is(err, errNotImage):
				if strings.HasPrefix(a.Type, "image/") {
					n.Status = noteUnsupported
				}
			case errors.Is(err, errImageTooLarge):
				n.Status = noteImageBounds
			case err != nil:
				n.Status = noteImageBad
			case len(images) >= richproto.MaxImages:
				n.Status = noteImageCount
			case decoded+info.decoded > richproto.MaxDecodedImages:
				n.Status = noteImageBounds
			default:
				decoded += info.decoded
				n.Status = noteImage
				images = append(images, ContentBlock{Type: anthropic.BlockImage,
					Source: &anthropic.ImageSource{Type: "base64", MediaType: info.mediaType, Data: base64.StdEncoding.EncodeToString(data)}})
			}
		}
		counts[n.Status]++
	}
	attrs := []any{"attachments", len(atts), "images", len(images), "decoded_bytes", decoded}
	if dirErr != nil {
		attrs = append(attrs, "store", "refused")
	}
	for _, s := range []struct{ k, v string }{{"too_large", noteTooLarge}, {"unavailable", noteUnavailable}, {"not_stored", noteNotStored},
		{"image_refused", noteImageBounds}, {"image_malformed", noteImageBad}, {"unsupported", noteUnsupported}, {"over_count", noteImageCount}} {
		if counts[s.v] > 0 {
			attrs = append(attrs, s.k, counts[s.v])
		}
	}
	t.log.Info("attachments", attrs...)
	return notes, images
}

// storedName is the file name of attachment i: its index first, so two
// attachments of one name never meet, cut to 255 bytes.
func storedName(i int, name string) string {
	s := fmt.Sprintf("%02d-%s", i+1, name)
	for len(s) > 255 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// openTurnAttachments opens <workspace>/attachments/<turn>/, creating both
// without following a link: a link or a file planted at "attachments" is
// removed (its target untouched) and a directory made in its place; the
// turn's directory must be new.
func openTurnAttachments(dirfd int, turnID string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, AttachmentsDir, flags, 0)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			if err := unix.Unlinkat(dirfd, AttachmentsDir, 0); err != nil {
				return -1, fmt.Errorf("replace %s: %w", AttachmentsDir, err)
			}
		}
		if err := unix.Mkdirat(dirfd, AttachmentsDir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("create %s: %w", AttachmentsDir, err)
		}
		if fd, err = unix.Openat(dirfd, AttachmentsDir, flags, 0); err != nil {
			return -1, fmt.Errorf("open %s: %w", AttachmentsDir, err)
		}
	}
	defer unix.Close(fd)
	if err := unix.Mkdirat(fd, turnID, 0o700); err != nil {
		return -1, fmt.Errorf("create the turn's directory: %w", err)
	}
	tfd, err := unix.Openat(fd, turnID, flags, 0)
	if err != nil {
		return -1, fmt.Errorf("open the turn's directory: %w", err)
	}
	return tfd, nil
}

// storeExclusive creates name in dir (never an existing name, never
// through a link), writes data and syncs it; a failed write removes it.
func storeExclusive(dir int, name string, data []byte) error {
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	for p := data; len(p) > 0; {
		n, err := unix.Write(fd, p)
		if err != nil {
			unix.Close(fd)
			unix.Unlinkat(dir, name, 0)
			return err
		}
		p = p[n:]
	}
	err = unix.Fsync(fd)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(dir, name, 0)
	}
	return err
}

// userMessage is the turn's user text: speaker, message and the
// attachment notes as JSON.
func (t *turnRun) userMessage(notes []attachmentNote) string {
	user, _ := json.Marshal(struct {
		Speaker     richproto.Speaker `json:"speaker"`
		Message     string            `json:"message"`
		Attachments []attachmentNote  `json:"attachments,omitempty"`
	}{t.turn.Speaker, t.turn.Text, notes})
	return string(user)
}

// withImages puts the turn's images right after its user text block in a
// request's messages (the block is gone once compacted: then so are they).
func (t *turnRun) withImages(msgs []Message) []Message {
	if len(t.images) == 0 {
		return msgs
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != RoleUser {
			continue
		}
		for j, b := range msgs[i].Content {
			if b.Type == BlockText && b.Text == t.userText {
				c := make([]ContentBlock, 0, len(msgs[i].Content)+len(t.images))
				c = append(c, msgs[i].Content[:j+1]...)
				c = append(c, t.images...)
				msgs[i].Content = append(c, msgs[i].Content[j+1:]...)
				return msgs
			}
		}
	}
	return msgs
}

// Attachment implements Attachments: POST /worker/attachment {index},
// the raw bytes of a 200 answer, at most richproto.MaxAttachmentBytes.
func (b *Broker) Attachment(ctx context.Context, index int) ([]byte, error) {
	resp, _, err := b.post(ctx, richproto.RouteAttachment, richproto.AttachmentRequest{Index: index}, "application/octet-stream")
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusRequestEntityTooLarge:
		drain(resp)
		return nil, ErrAttachmentTooLarge
	default:
		drain(resp)
		return nil, &StatusError{Status: resp.StatusCode}
	}
	defer resp.Body.Close()
	data, err := protocol.ReadBounded(resp.Body, richproto.MaxAttachmentBytes)
	if err != nil {
		return nil, fmt.Errorf("read attachment: %v: %w", err, ErrBroker)
	}
	return data, nil
}

// unplantAttachments removes whatever is at "attachments" when it is not a
// directory (a link the guest planted: removed, never followed; its target
// untouched), as the seed's fresh start does.
func unplantAttachments(dirfd int) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, AttachmentsDir, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil
	}
	return unix.Unlinkat(dirfd, AttachmentsDir, 0)
}
