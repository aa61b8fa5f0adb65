package rich

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

func openTestOutbox(t *testing.T, ws string) *outbox {
	t.Helper()
	dfd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	o, err := openOutbox(dfd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.close)
	return o
}

func writeArgs(name, text string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"name": name, "text": text})
	return b
}

func TestReplyFileTurnEndToEnd(t *testing.T) {
	h := newHarness(t, bigTiers)
	png := []byte("\x89PNG\r\n\x1a\nnot really")
	b64, _ := json.Marshal(map[string]string{"name": "chart.png", "base64": base64.StdEncoding.EncodeToString(png)})
	h.broker.setScript(
		toolAnswer("toolu_1", ReplyFileTool, string(writeArgs("notes.md", "# Notes\n"))),
		toolAnswer("toolu_2", ReplyFileTool, string(b64)),
		toolAnswer("toolu_3", ReplyFileTool, string(writeArgs("notes.md", "again"))),
		textAnswer("Here are your files."),
	)
	res := h.run(newTurn("draw"))
	if !res.OK {
		t.Fatalf("result = %+v; logs:\n%s", res, h.logs.String())
	}
	want := []richproto.File{{Name: "chart.png", Type: "image/png", Data: png}, {Name: "notes.md", Type: "text/markdown", Data: []byte("# Notes\n")}}
	if len(res.Files) != len(want) {
		t.Fatalf("files = %+v, want %+v", res.Files, want)
	}
	for i := range want {
		if res.Files[i].Name != want[i].Name || res.Files[i].Type != want[i].Type || !bytes.Equal(res.Files[i].Data, want[i].Data) {
			t.Errorf("files[%d] = %s %s %q, want %+v", i, res.Files[i].Name, res.Files[i].Type, res.Files[i].Data, want[i])
		}
	}
	// The second write of a name is refused to the model.
	reqs := h.broker.modelRequests()
	last, _ := json.Marshal(reqs[len(reqs)-1].Messages)
	if !strings.Contains(string(last), "already attached") {
		t.Errorf("the refused duplicate was not reported to the model: %s", last)
	}
	// The next turn starts with an empty outbox: no files carried over.
	h.broker.setScript(textAnswer("no files"))
	if res := h.run(newTurn("again")); !res.OK || len(res.Files) != 0 {
		t.Errorf("next turn = %+v, want ok without files", res)
	}
}

func TestReplyFileToolRefusals(t *testing.T) {
	checkToolRefusals(t, []toolRefusal{
		{"path name", nil, writeArgs("../x", "a"), "plain file name"},
		{"slash", nil, writeArgs("a/b", "a"), "plain file name"},
		{"hidden", nil, writeArgs(".bashrc", "a"), "plain file name"},
		{"dots", nil, writeArgs("a..b", "a"), "plain file name"},
		{"long", nil, writeArgs(strings.Repeat("a", 101), "a"), "plain file name"},
		{"both contents", nil, json.RawMessage(`{"name":"a","text":"x","base64":"eA=="}`), "exactly one"},
		{"no content", nil, json.RawMessage(`{"name":"a"}`), "exactly one"},
		{"unknown field", nil, json.RawMessage(`{"name":"a","text":"x","path":"/etc/passwd"}`), "arguments must be"},
		{"bad base64", nil, json.RawMessage(`{"name":"a","base64":"!!"}`), "not valid"},
		{"eleventh file", func(o *outbox) {
			for i := range richproto.MaxReplyFiles {
				mustWrite(t, o, fmt.Sprintf("f%d", i), "x")
			}
		}, writeArgs("eleven", "x"), "at most 10 files"},
	})
}

// TestReplyFileToolBounds: TestReplyFileToolRefusals at the size bounds,
// 10 MiB files.
func TestReplyFileToolBounds(t *testing.T) {
	if raceEnabled {
		// About 15 s of make unit under -race; nothing here runs
		// concurrently.
		t.Skip("writes 10 to 50 MiB of files: runs without -race in make unit's second pass")
	}
	big := strings.Repeat("x", richproto.MaxReplyFileBytes)
	checkToolRefusals(t, []toolRefusal{
		{"over 10 MiB", nil, writeArgs("a", big+"x"), "at most 10485760 bytes"},
		{"over 10 MiB base64", nil, json.RawMessage(`{"name":"a","base64":"` + base64.StdEncoding.EncodeToString([]byte(big+"x")) + `"}`), "at most 10485760 bytes"},
		{"over 50 MiB total", func(o *outbox) {
			for i := range 5 {
				mustWrite(t, o, fmt.Sprintf("f%d", i), big)
			}
		}, writeArgs("one-more", "x"), "at most 52428800 bytes in total"},
	})
}

// toolRefusal is a write_reply_file call the outbox must refuse, naming
// want, after setup.
type toolRefusal struct {
	name  string
	setup func(o *outbox)
	args  json.RawMessage
	want  string
}

func checkToolRefusals(t *testing.T, cases []toolRefusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := openTestOutbox(t, t.TempDir())
			if c.setup != nil {
				c.setup(o)
			}
			files, bytesBefore := o.files, o.bytes
			_, err := o.write(c.args)
			if !errors.Is(err, errToolRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a refusal naming %q", err, c.want)
			}
			if o.files != files || o.bytes != bytesBefore {
				t.Errorf("a refused write was counted")
			}
		})
	}
}

func mustWrite(t *testing.T, o *outbox, name, text string) {
	t.Helper()
	if _, err := o.write(writeArgs(name, text)); err != nil {
		t.Fatal(err)
	}
}

// The outbox is read without following links and its bounds hold on what
// is in the directory, whoever put it there.
func TestOutboxCollectionBounds(t *testing.T) {
	ws := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	o := openTestOutbox(t, ws)
	dir := filepath.Join(ws, OutboxDir)
	put := func(name string, n int) {
		if err := os.WriteFile(filepath.Join(dir, name), bytes.Repeat([]byte("y"), n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put("a-big", richproto.MaxReplyFileBytes+1) // over the size: refused
	for i := range 4 {
		put(fmt.Sprintf("b%d", i), richproto.MaxReplyFileBytes) // 40 MiB
	}
	put("c-fills", richproto.MaxReplyFileBytes-100) // 100 bytes below 50 MiB in total
	put("d-over-total", 101)                        // 50 MiB + 1: refused
	os.Symlink(secret, filepath.Join(dir, "e-link"))
	syscall.Mkfifo(filepath.Join(dir, "f-fifo"), 0o600)
	os.Mkdir(filepath.Join(dir, "g-dir"), 0o700)
	put(".hidden", 1)
	for i := range 6 {
		put(fmt.Sprintf("h%d", i), 1) // count: only five fit under ten
	}
	files, err := o.collect(log)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	sum := 0
	for _, f := range files {
		got = append(got, f.Name)
		sum += len(f.Data)
		if strings.Contains(string(f.Data), "host secret") {
			t.Errorf("a link was followed")
		}
	}
	want := "b0 b1 b2 b3 c-fills h0 h1 h2 h3 h4"
	if strings.Join(got, " ") != want {
		t.Errorf("collected %v, want %s", got, want)
	}
	if sum > richproto.MaxReplyFilesSum {
		t.Errorf("total %d over %d", sum, richproto.MaxReplyFilesSum)
	}
	res := richproto.Result{TurnID: strings.Repeat("a", 32), OK: true, Text: "x", Files: files}
	if err := res.Validate(); err != nil {
		t.Errorf("collected files fail the packet's validation: %v", err)
	}
	for _, reason := range []string{`"reason":"size"`, `"reason":"total"`, `"reason":"not a regular file"`, `"reason":"name"`, `"reason":"count"`} {
		if !strings.Contains(logs.String(), reason) {
			t.Errorf("no refusal logged with %s", reason)
		}
	}
}

// A link planted at the outbox's name is replaced, never followed; old
// files are removed when a turn starts.
func TestOutboxLinkReplacedAndEmptied(t *testing.T) {
	ws := t.TempDir()
	target := t.TempDir()
	os.WriteFile(filepath.Join(target, "keep"), []byte("k"), 0o600)
	if err := os.Symlink(target, filepath.Join(ws, OutboxDir)); err != nil {
		t.Fatal(err)
	}
	o := openTestOutbox(t, ws)
	mustWrite(t, o, "new.txt", "n")
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Errorf("the link's target was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, "new.txt")); err == nil {
		t.Errorf("a file was written through the link")
	}
	if fi, err := os.Lstat(filepath.Join(ws, OutboxDir)); err != nil || !fi.IsDir() {
		t.Fatalf("outbox is not a directory: %v", err)
	}
	o.close()
	o2 := openTestOutbox(t, ws)
	files, err := o2.collect(slog.New(slog.DiscardHandler))
	if err != nil || len(files) != 0 {
		t.Errorf("outbox after a new turn = %v, %v; want empty", files, err)
	}
}

func TestValidReplyFileName(t *testing.T) {
	for name, want := range map[string]bool{"a.txt": true, "Chart_1-final.PNG": true, "": false, ".": false, "..": false,
		".x": false, "-x": false, "a b": false, "a/b": false, "a\\b": false, "a\x00": false, "é.txt": false, "a..b": false} {
		if got := ValidReplyFileName(name); got != want {
			t.Errorf("ValidReplyFileName(%q) = %v, want %v", name, got, want)
		}
	}
}
