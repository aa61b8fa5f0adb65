package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeTurnHost answers every turn with answer on a Unix socket.
func fakeTurnHost(t *testing.T, answer string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, answer) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestTurnFilesDir(t *testing.T) {
	sock := fakeTurnHost(t, `{"ok":true,"text":"here","turnId":"t1","files":[{"name":"a.txt","type":"text/plain","data":"YWxwaGE="},{"name":"b.png","data":"iVA="}]}`)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"--socket", sock, "turn", "room", "--speaker-id", "s", "--text", "x"}, args...),
			Inputs{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}
	dir := t.TempDir()
	code, out, stderr := run("--files-dir", dir)
	if code != 0 || strings.TrimSpace(out) != "here" || !strings.Contains(stderr, "wrote "+strconv.Quote(filepath.Join(dir, "a.txt"))+" (5 bytes)") {
		t.Fatalf("turn --files-dir: %d %q %q", code, out, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(b) != "alpha" {
		t.Errorf("a.txt = %q, %v", b, err)
	}
	// A second run meets the files of the first: nothing is overwritten,
	// the command fails naming the file.
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("edited"), 0o600)
	code, _, stderr = run("--files-dir", dir)
	if code == 0 || !strings.Contains(stderr, "a.txt") {
		t.Errorf("second run: %d %q", code, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "edited" {
		t.Errorf("a.txt overwritten: %q", b)
	}
	// Without --files-dir the files are named as not written.
	if code, _, stderr := run(); code != 0 || !strings.Contains(stderr, "2 reply files not written (use --files-dir DIR)") {
		t.Errorf("without --files-dir: %d %q", code, stderr)
	}
}

func TestTurnFilesDirRefusesHostileName(t *testing.T) {
	sock := fakeTurnHost(t, `{"ok":true,"text":"here","turnId":"t1","files":[{"name":"../escape.txt","data":"eA=="}]}`)
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"--socket", sock, "turn", "room", "--speaker-id", "s", "--text", "x", "--files-dir", sub},
		Inputs{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	if code == 0 || !strings.Contains(errb.String(), "not a plain file name") {
		t.Errorf("hostile name: %d %q", code, errb.String())
	}
	if _, err := os.Lstat(filepath.Join(dir, "escape.txt")); err == nil {
		t.Errorf("a file escaped the directory")
	}
}

// TestTurnFilesDirRefusesHiddenCharacters: a name that would show as
// another (a direction override, a zero-width or C1 character, a line
// separator) is refused before anything is written, and the terminal gets
// it escaped, never raw.
func TestTurnFilesDirRefusesHiddenCharacters(t *testing.T) {
	for _, tt := range []struct{ name, json, raw, escaped string }{
		{"right-to-left override", `invoice\u202efdp.exe`, "\u202e", `\u202e`},
		{"zero-width space", `a\u200b.txt`, "\u200b", `\u200b`},
		{"C1 CSI", `a\u009b31m.txt`, "\u009b", `\u009b`},
		{"line separator", `a\u2028b.txt`, "\u2028", `\u2028`},
		{"escape", `a\u001b[2J.txt`, "\x1b", `\x1b`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := fakeTurnHost(t, `{"ok":true,"text":"here","turnId":"t1","files":[{"name":"`+tt.json+`","data":"eA=="}]}`)
			dir := t.TempDir()
			var out, errb bytes.Buffer
			code := Main(context.Background(), []string{"--socket", sock, "turn", "room", "--speaker-id", "s", "--text", "x", "--files-dir", dir},
				Inputs{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
			if code == 0 || !strings.Contains(errb.String(), "not a plain file name") {
				t.Errorf("exit %d, stderr %q: want the name refused", code, errb.String())
			}
			if strings.Contains(out.String()+errb.String(), tt.raw) || !strings.Contains(errb.String(), tt.escaped) {
				t.Errorf("stderr %q: want the name escaped (%s), never raw", errb.String(), tt.escaped)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("%d files written", len(entries))
			}
		})
	}
}
