package cli

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

func TestParseAttach(t *testing.T) {
	for _, c := range []struct {
		in   string
		want richproto.Attachment
	}{
		{"https://e.com/a/cat.png", richproto.Attachment{URL: "https://e.com/a/cat.png", Name: "cat.png"}},
		{"https://e.com/a/my%20cat.png", richproto.Attachment{URL: "https://e.com/a/my%20cat.png", Name: "my cat.png"}},
		{"https://e.com/x,pic.png", richproto.Attachment{URL: "https://e.com/x", Name: "pic.png"}},
		{"http://127.0.0.1:8080/x,pic,image/png", richproto.Attachment{URL: "http://127.0.0.1:8080/x", Name: "pic", Type: "image/png"}},
	} {
		got, err := parseAttach(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseAttach(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for in, want := range map[string]string{
		"https://e.com/":             "names no file",
		"https://e.com/a,b,c,d":      "%2C",
		"file:///etc/passwd,p":       "http or https",
		"https://e.com/x,../etc":     "plain file name",
		"https://e.com/x,a,bad type": "media type",
	} {
		if _, err := parseAttach(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseAttach(%q) error %v, want one containing %q", in, err, want)
		}
	}
	if _, err := parseAttaches(strings.Split(strings.Repeat("https://e.com/a ", 11), " ")[:11]); err == nil {
		t.Error("11 --attach accepted")
	}
}
