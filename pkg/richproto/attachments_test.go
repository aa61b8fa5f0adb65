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
