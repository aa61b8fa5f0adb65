package richproto

import (
	"errors"
	"strings"
	"testing"
)

func TestValidAttachments(t *testing.T) {
	ok := Attachment{URL: "https://example.com/a.png", Name: "a.png", Type: "image/png"}
	if err := ValidAttachments([]Attachment{ok, {URL: "http://10.0.0.1:8080/x", Name: "x y.txt"}}); err != nil {
		t.Fatalf("valid attachments refused: %v", err)
	}
	many := make([]Attachment, MaxAttachments+1)
	for i := range many {
		many[i] = ok
	}
	if err := ValidAttachments(many[:MaxAttachments]); err != nil {
		t.Errorf("%d attachments refused: %v", MaxAttachments, err)
	}
	for name, as := range map[string][]Attachment{
		"eleven":       many,
		"no url":       {{Name: "a"}},
		"long url":     {{URL: "https://e.com/" + strings.Repeat("a", MaxAttachmentURL), Name: "a"}},
		"file scheme":  {{URL: "file:///etc/passwd", Name: "a"}},
		"credentials":  {{URL: "https://u:p@e.com/", Name: "a"}},
		"no host":      {{URL: "https:///x", Name: "a"}},
		"no name":      {{URL: "https://e.com/"}},
		"path name":    {{URL: "https://e.com/", Name: "../x"}},
		"dot name":     {{URL: "https://e.com/", Name: ".."}},
		"hidden name":  {{URL: "https://e.com/", Name: ".bashrc"}},
		"control name": {{URL: "https://e.com/", Name: "a\nb"}},
		"long name":    {{URL: "https://e.com/", Name: strings.Repeat("a", 256)}},
		"type space":   {{URL: "https://e.com/", Name: "a", Type: "image/png x"}},
		"type long":    {{URL: "https://e.com/", Name: "a", Type: strings.Repeat("a", MaxAttachmentType+1)}},
	} {
		if err := ValidAttachments(as); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	turn := Turn{ID: strings.Repeat("a", 32), Text: "hi", Speaker: Speaker{ID: "s"}, Thinking: "off", DeadlineUnixMs: 1, Attachments: many}
	if err := turn.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("turn with %d attachments: got %v, want ErrInvalid", len(many), err)
	}
}

// TestValidFileName: one check for every name a frontend or a terminal
// shows (attachment and reply file names): no separator, no hidden name,
// and no control or format character (categories Cc with C1, Cf, Zl, Zp),
// which would show a name other than the one stored.
func TestValidFileName(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want bool
	}{
		{"plain", "report.pdf", true},
		{"space", "a b.txt", true},
		{"non-ASCII letters", "résumé – 2026.pdf", true},
		{"CJK", "報告.txt", true},
		{"emoji", "cat 🐈.png", true},
		{"255 bytes", strings.Repeat("a", 255), true},
		{"empty", "", false},
		{"256 bytes", strings.Repeat("a", 256), false},
		{"slash", "a/b", false},
		{"backslash", `a\b`, false},
		{"dot", ".", false},
		{"dotdot", "..", false},
		{"hidden", ".bashrc", false},
		{"not UTF-8", "a\xff", false},
		{"NUL", "a\x00b", false},
		{"newline", "a\nb", false},
		{"escape", "a\x1b[31mb", false},
		{"DEL", "a\x7fb", false},
		{"C1 NEL", "a\u0085b", false},
		{"C1 CSI", "a\u009bb", false},
		{"right-to-left override", "invoice\u202efdp.exe", false},
		{"left-to-right isolate", "a\u2066b", false},
		{"pop directional formatting", "a\u202cb", false},
		{"zero-width space", "a\u200bb", false},
		{"zero-width joiner", "a\u200db", false},
		{"byte order mark", "\ufeffa", false},
		{"soft hyphen", "a\u00adb", false},
		{"tag character", "a\U000E0041b", false},
		{"line separator", "a\u2028b", false},
		{"paragraph separator", "a\u2029b", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidFileName(tt.in); got != tt.want {
				t.Errorf("ValidFileName(%q) = %v, want %v", tt.in, got, tt.want)
			}
			r := Result{TurnID: strings.Repeat("b", 32), OK: true, Files: []File{{Name: tt.in}}}
			if err := r.Validate(); (err == nil) != tt.want {
				t.Errorf("reply file %q: Validate = %v, want ok %v", tt.in, err, tt.want)
			}
			err := ValidAttachments([]Attachment{{URL: "https://example.com/a", Name: tt.in}})
			if (err == nil) != tt.want {
				t.Errorf("attachment %q: ValidAttachments = %v, want ok %v", tt.in, err, tt.want)
			}
		})
	}
}
