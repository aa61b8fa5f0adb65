package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

func TestRunTurnReadsReplyFiles(t *testing.T) {
	if raceEnabled {
		// About 15 s of make unit under -race, most of it encoding and
		// decoding the 70 MB answer; TestRunTurnRefusesHostileReplyFiles
		// runs the same decoding under -race.
		t.Skip("reads a 70 MB answer: runs without -race in make unit's second pass")
	}
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, richproto.MaxReplyFileBytes))
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		// Five files of 10 MiB: an answer far over the 1 MiB status bound.
		var files []string
		for i := range 5 {
			files = append(files, fmt.Sprintf(`{"name":"f%d.bin","data":%q}`, i, big))
		}
		fmt.Fprintf(w, `{"ok":true,"text":"t","turnId":"x","files":[%s]}`, strings.Join(files, ","))
	})
	reply, err := c.RunTurn(context.Background(), "room", apiwire.Speaker{ID: "u"}, "hi")
	if err != nil || len(reply.Files) != 5 || len(reply.Files[4].Data) != richproto.MaxReplyFileBytes || reply.Files[4].Name != "f4.bin" {
		t.Fatalf("reply = %d files, %v", len(reply.Files), err)
	}
}

func TestRunTurnRefusesHostileReplyFiles(t *testing.T) {
	for name, files := range map[string]string{
		"path":   `[{"name":"../../.bashrc","data":"eA=="}]`,
		"hidden": `[{"name":".profile","data":"eA=="}]`,
		"rlo":    `[{"name":"invoice\u202efdp.exe","data":"eA=="}]`,
		"type":   `[{"name":"a","type":"text/html\r\nX-Evil: 1","data":""}]`,
		"count":  "[" + strings.TrimSuffix(strings.Repeat(`{"name":"a","data":""},`, 11), ",") + "]",
	} {
		c := server(t, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"ok":true,"text":"t","turnId":"x","files":%s}`, files)
		})
		if _, err := c.RunTurn(context.Background(), "room", apiwire.Speaker{ID: "u"}, "hi"); err == nil || !strings.Contains(err.Error(), "bad answer") {
			t.Errorf("%s: err = %v, want a bad answer", name, err)
		}
	}
}

func TestWriteReplyFiles(t *testing.T) {
	dir := t.TempDir()
	files := []richproto.File{{Name: "a.txt", Data: []byte("alpha")}, {Name: "b c.png", Type: "image/png", Data: []byte{0x89, 'P'}}}
	written, err := WriteReplyFiles(dir, files)
	if err != nil || len(written) != 2 || written[1] != filepath.Join(dir, "b c.png") {
		t.Fatalf("written %v, %v", written, err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(dir, f.Name))
		fi, _ := os.Stat(filepath.Join(dir, f.Name))
		if err != nil || !bytes.Equal(got, f.Data) || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s = %q (%v), %v", f.Name, got, fi.Mode(), err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries (a temporary file left?)", len(entries))
	}
}

func TestWriteReplyFilesNeverOverAFileNorThroughALink(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "target")
	os.WriteFile(outside, []byte("outside"), 0o600)
	os.WriteFile(filepath.Join(dir, "exists.txt"), []byte("mine"), 0o600)
	os.Symlink(outside, filepath.Join(dir, "link.txt"))
	os.Symlink(filepath.Join(t.TempDir(), "nowhere"), filepath.Join(dir, "dangling.txt"))
	for _, name := range []string{"exists.txt", "link.txt", "dangling.txt"} {
		_, err := WriteReplyFiles(dir, []richproto.File{{Name: name, Data: []byte("evil")}})
		if !errors.Is(err, os.ErrExist) {
			t.Errorf("%s: err = %v, want exists", name, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "outside" {
		t.Errorf("the link's target was written: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "exists.txt")); string(b) != "mine" {
		t.Errorf("an existing file was overwritten: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(t.TempDir(), "nowhere")); err == nil {
		t.Errorf("a dangling link was followed")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("directory holds %d entries, want the 3 planted", len(entries))
	}
}

func TestWriteReplyFilesRefusals(t *testing.T) {
	big := make([]byte, richproto.MaxReplyFileBytes)
	many := make([]richproto.File, richproto.MaxReplyFiles+1)
	for i := range many {
		many[i] = richproto.File{Name: fmt.Sprintf("f%d", i)}
	}
	cases := map[string][]richproto.File{
		"slash":        {{Name: "a/b"}},
		"parent":       {{Name: ".."}},
		"dot":          {{Name: "."}},
		"hidden":       {{Name: ".ssh"}},
		"backslash":    {{Name: `a\b`}},
		"newline":      {{Name: "a\nb"}},
		"nul":          {{Name: "a\x00"}},
		"empty":        {{Name: ""}},
		"long":         {{Name: strings.Repeat("a", 256)}},
		"not utf-8":    {{Name: "a\xff"}},
		"rlo":          {{Name: "invoice\u202efdp.exe"}},
		"zero width":   {{Name: "a\u200bb"}},
		"c1":           {{Name: "a\u009bb"}},
		"line sep":     {{Name: "a\u2028b"}},
		"eleven files": many,
		"over 10 MiB":  {{Name: "big", Data: append(big, 0)}},
		"over 50 MiB":  {{Name: "a", Data: big}, {Name: "b", Data: big}, {Name: "c", Data: big}, {Name: "d", Data: big}, {Name: "e", Data: big}, {Name: "f", Data: []byte{1}}},
		"twice":        {{Name: "a"}, {Name: "a"}},
		"bad one last": {{Name: "ok.txt"}, {Name: "../x"}},
	}
	for name, files := range cases {
		dir := t.TempDir()
		if _, err := WriteReplyFiles(dir, files); err == nil {
			t.Errorf("%s: written", name)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: %d files written before the refusal", name, len(entries))
		}
	}
	if _, err := WriteReplyFiles(filepath.Join(t.TempDir(), "missing"), []richproto.File{{Name: "a"}}); err == nil {
		t.Errorf("a missing directory was accepted")
	}
}
