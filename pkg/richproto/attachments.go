package richproto

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// RouteAttachment is the worker's request for one of the turn's
// attachments: the broker fetches it through safefetch and answers the
// bytes (AttachmentRequest in, raw bytes out; 413 over a bound, 502 when
// the fetch was refused or failed).
const RouteAttachment = "/worker/attachment"

// Attachment and image bounds (the seed's rich mode).
const (
	MaxAttachments     = 10
	MaxAttachmentBytes = 25 << 20 // one fetched attachment
	MaxAttachmentsSum  = 50 << 20 // all of a turn's
	MaxAttachmentURL   = 2048     // bytes
	MaxAttachmentName  = 255      // bytes
	MaxAttachmentType  = 127      // bytes
	MaxImages          = 8        // images sent to the model in a turn
	MaxImageBytes      = 20 << 20 // one image's bytes
	MaxDecodedImages   = 64 << 20 // width*height*4 (times GIF frames), summed over a turn
)

// Attachment is one file a turn carries: a URL the frontend gives with a
// display name and a declared media type (a hint; the worker sniffs).
type Attachment struct {
	URL  string `json:"url"`
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
}

// AttachmentRequest is the body of POST /worker/attachment: the index of
// the attachment in the admitted turn (never a URL).
type AttachmentRequest struct {
	Index int `json:"index"`
}

// ValidAttachments checks a turn's attachment list.
func ValidAttachments(as []Attachment) error {
	if len(as) > MaxAttachments {
		return bad("at most %d attachments", MaxAttachments)
	}
	for i, a := range as {
		if a.URL == "" || len(a.URL) > MaxAttachmentURL || !utf8.ValidString(a.URL) {
			return bad("attachments[%d].url must be 1 to %d bytes", i, MaxAttachmentURL)
		}
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return bad("attachments[%d].url must be a credential-free http or https URL", i)
		}
		if !ValidFileName(a.Name) || len(a.Name) > MaxAttachmentName {
			return bad("attachments[%d].name must be a plain file name of 1 to %d bytes", i, MaxAttachmentName)
		}
		if len(a.Type) > MaxAttachmentType || strings.IndexFunc(a.Type, func(c rune) bool { return c <= ' ' || c >= 0x7f }) >= 0 {
			return bad("attachments[%d].type must be a media type of at most %d printable bytes", i, MaxAttachmentType)
		}
	}
	return nil
}

// ValidFileName reports whether s is a plain file name: 1 to 255 bytes of
// UTF-8, no separator, not . or .., not hidden, and no control or format
// character (Unicode categories Cc, C1 included, Cf, Zl and Zp), which
// would make a frontend or a terminal show another name than the stored
// one (U+202E turns "invoice\u202efdp.exe" into "invoiceexe.pdf"). It is
// the one check of every attachment and reply file name: richproto's
// packets, pkg/client and the CLI.
func ValidFileName(s string) bool {
	if s == "" || len(s) > 255 || !utf8.ValidString(s) || s == "." || s == ".." || s[0] == '.' {
		return false
	}
	for _, c := range s {
		if c == '/' || c == '\\' || hiddenChar(c) {
			return false
		}
	}
	return true
}

// hiddenChar: a control or format character, or a line or paragraph
// separator.
func hiddenChar(c rune) bool {
	return unicode.In(c, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}
