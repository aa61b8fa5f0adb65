package rich

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
	"github.com/roundtable-sandbox/sandbox/pkg/broker"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// hostileServer serves the hostile attachments on loopback.
func hostileServer(t *testing.T, cat []byte) *httptest.Server {
	t.Helper()
	// 100 MiB of zeros in about 100 KiB: one compressed MiB as 100 gzip
	// members, read as one stream (compressing the 100 MiB itself took 16 s
	// under -race).
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	bomb := bytes.Repeat(one.Bytes(), 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cat.png":
			w.Write(cat)
		case "/notes.txt":
			w.Write([]byte("plain notes"))
		case "/redirect":
			http.Redirect(w, r, "http://10.0.0.1/secret", http.StatusFound)
		case "/big":
			w.Write(bytes.Repeat([]byte("x"), 26<<20))
		case "/bomb":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb)
		case "/huge.png":
			w.Write(pngHeader(60000, 60000))
		case "/frames.gif":
			w.Write(gifFramesOf(1, 1, 10_000))
		case "/fake.png":
			w.Write([]byte("not an image at all"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAttachmentsHostile: the worker and the real broker (its safefetch
// fetcher, the attachment server in egress.allow) serve a turn carrying
// the hostile attachments after a symlink was planted at the
// attachments directory: the link is replaced, never followed (its target
// stays empty); the good files are stored under the turn's directory; the
// redirect to a private address, 26 MiB and the gzip bomb are noted as not
// fetched, the 60000x60000 PNG and the 10,000-frame GIF as stored but not
// shown, a text declared image/png as unsupported; the model sees the one
// real image as a base64 block right after the turn's text.
func TestAttachmentsHostile(t *testing.T) {
	cat := pngOf(t, 40, 30)
	srv := hostileServer(t, cat)
	dir, err := os.MkdirTemp("", "richattach")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	workspace, outside := filepath.Join(dir, "ws"), filepath.Join(dir, "outside")
	os.Mkdir(workspace, 0o700)
	os.Mkdir(outside, 0o700)
	if err := os.Symlink(outside, filepath.Join(workspace, AttachmentsDir)); err != nil {
		t.Fatal(err)
	}
	upstream := anthropictest.New(t, anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "I see a cat.")})
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	os.WriteFile(filepath.Join(credDir, "anthropic"), []byte(realKey+"\n"), 0o600)
	creds, err := credential.OpenDir(credDir, "")
	if err != nil {
		t.Fatal(err)
	}
	pol := &policy.Policy{Version: policy.Version, TurnID: "00112233445566778899aabbccddeeff",
		Identity:       policy.Identity{Channel: "guild/rich", ChannelTag: ids.ChannelTag("guild/rich")},
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(), Limits: policy.DefaultLimits(),
		EgressAllow: []string{strings.TrimPrefix(srv.URL, "http://")},
		Rich: &policy.Rich{URL: upstream.URL, AllowHTTP: true, Model: "claude-test", MaxOutputTokens: 8192,
			Thinking: "medium", Credential: "anthropic", CredentialKind: policy.CredentialAPIKey, MaxCalls: 16}}
	blog := &lockedBuffer{}
	b, err := broker.New(broker.Config{Policy: pol, Credentials: creds, ControlUID: os.Getuid(), PollWait: 300 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(blog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "b.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- b.Serve(bctx, ln) }()
	wlog := &lockedBuffer{}
	wb := NewBroker(sock, slog.New(slog.NewJSONHandler(wlog, nil)))
	w, err := New(Options{Pull: wb, Model: wb, Tools: wb, Attachments: wb, Sessions: WorkspaceSessions{Workspace: workspace},
		Workspace: workspace, Logger: slog.New(slog.NewJSONHandler(wlog, nil)), MinBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Serve(wctx) }()
	t.Cleanup(func() { wcancel(); <-wdone; bcancel(); <-bdone })

	turn := newTurn("what is in these?")
	atts := []struct{ path, typ, status string }{
		{"/cat.png", "image/png", noteImage},
		{"/notes.txt", "text/plain", noteStored},
		{"/redirect", "image/png", noteUnavailable},
		{"/big", "", noteTooLarge},
		{"/bomb", "", noteTooLarge},
		{"/huge.png", "image/png", noteImageBounds},
		{"/frames.gif", "image/gif", noteImageBounds},
		{"/fake.png", "image/png", noteUnsupported},
	}
	for _, a := range atts {
		turn.Attachments = append(turn.Attachments, richproto.Attachment{URL: srv.URL + a.path, Name: strings.TrimPrefix(a.path, "/"), Type: a.typ})
	}
	bind := policy.Bind{Turn: *turn, Identity: policy.Identity{Channel: pol.Identity.Channel, ChannelTag: pol.Identity.ChannelTag, SpeakerID: "u1"}}
	data, _ := json.Marshal(bind)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	resp, err := c.Post("http://broker"+policy.RouteControlTurn, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var res richproto.Result
	if resp.StatusCode != 200 || json.Unmarshal(body, &res) != nil || !res.OK || res.Text != "I see a cat." {
		t.Fatalf("turn: %d %s; worker logs:\n%s", resp.StatusCode, body, wlog.String())
	}

	// The planted link was replaced, its target untouched.
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the link's target got %d entries", len(ents))
	}
	if fi, err := os.Lstat(filepath.Join(workspace, AttachmentsDir)); err != nil || !fi.IsDir() {
		t.Fatalf("attachments is not a directory: %v %v", fi, err)
	}
	tdir := filepath.Join(workspace, AttachmentsDir, turn.ID)
	ents, _ := os.ReadDir(tdir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := "[01-cat.png 02-notes.txt 06-huge.png 07-frames.gif 08-fake.png]"; fmt.Sprint(names) != want {
		t.Errorf("stored %v, want %s", names, want)
	}
	if got, _ := os.ReadFile(filepath.Join(tdir, "02-notes.txt")); string(got) != "plain notes" {
		t.Errorf("stored notes %q", got)
	}

	reqs := upstream.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests", len(reqs))
	}
	var req Request
	if err := json.Unmarshal(reqs[0].Body, &req); err != nil {
		t.Fatal(err)
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != RoleUser || len(last.Content) != 2 || last.Content[0].Type != BlockText || last.Content[1].Type != "image" {
		t.Fatalf("user message %+v", last)
	}
	img := last.Content[1].Source
	if img == nil || img.MediaType != "image/png" || img.Data != base64.StdEncoding.EncodeToString(cat) {
		t.Errorf("image block %+v", img)
	}
	var user struct {
		Message     string           `json:"message"`
		Attachments []attachmentNote `json:"attachments"`
	}
	if err := json.Unmarshal([]byte(last.Content[0].Text), &user); err != nil || len(user.Attachments) != len(atts) {
		t.Fatalf("user text %s (%v)", last.Content[0].Text, err)
	}
	for i, a := range atts {
		n := user.Attachments[i]
		if n.Status != a.status || n.Name != strings.TrimPrefix(a.path, "/") {
			t.Errorf("attachment %s: note %+v, want status %q", a.path, n, a.status)
		}
		if (n.Path != "") != strings.HasPrefix(a.status, "stored") {
			t.Errorf("attachment %s: path %q with status %q", a.path, n.Path, n.Status)
		}
	}
	// The session keeps the note, never the image bytes.
	filepath.WalkDir(workspace, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".jsonl") {
			data, _ := os.ReadFile(p)
			if bytes.Contains(data, []byte(base64.StdEncoding.EncodeToString(cat)[:40])) {
				t.Errorf("session %s holds the image bytes", p)
			}
		}
		return nil
	})
	for _, l := range []string{wlog.String(), blog.String()} {
		if strings.Contains(l, srv.URL) || strings.Contains(l, "cat.png") {
			t.Errorf("a log names an attachment URL or name:\n%s", l)
		}
	}
}

// fakeAttachments answers attachments from memory.
type fakeAttachments map[int][]byte

func (f fakeAttachments) Attachment(_ context.Context, i int) ([]byte, error) {
	if d, ok := f[i]; ok {
		return d, nil
	}
	return nil, errors.New("unavailable")
}

// TestAttachmentImageBounds: at most 8 images a turn, 64 MiB decoded in
// total (checked from the headers), an existing turn directory refused.
func TestAttachmentImageBounds(t *testing.T) {
	ws := t.TempDir()
	dirfd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	run := func(id string, data ...[]byte) []attachmentNote {
		f := fakeAttachments{}
		turn := &richproto.Turn{ID: id}
		for i, d := range data {
			f[i] = d
			turn.Attachments = append(turn.Attachments, richproto.Attachment{URL: "https://e.com/x", Name: fmt.Sprintf("i%d.png", i), Type: "image/png"})
		}
		tr := &turnRun{w: &Worker{attachments: f}, turn: turn, log: slog.New(slog.DiscardHandler)}
		notes, images := tr.collectAttachments(context.Background(), dirfd)
		shown := 0
		for _, n := range notes {
			if n.Status == noteImage {
				shown++
			}
		}
		if shown != len(images) {
			t.Errorf("%d notes say shown, %d image blocks", shown, len(images))
		}
		return notes
	}
	small := pngOf(t, 4, 4)
	var nine [][]byte
	for i := 0; i < 9; i++ {
		nine = append(nine, small)
	}
	notes := run(strings.Repeat("a", 32), nine...)
	if notes[7].Status != noteImage || notes[8].Status != noteImageCount {
		t.Errorf("eighth %q, ninth %q", notes[7].Status, notes[8].Status)
	}
	// 2900 x 2900 x 4 = 33.6 MB each: the second goes over 64 MiB.
	notes = run(strings.Repeat("b", 32), pngHeader(2900, 2900), pngHeader(2900, 2900), small)
	if notes[0].Status != noteImage || notes[1].Status != noteImageBounds || notes[2].Status != noteImage {
		t.Errorf("decoded total: %q %q %q", notes[0].Status, notes[1].Status, notes[2].Status)
	}
	// A turn directory that exists (planted) is not reused: nothing stored.
	os.MkdirAll(filepath.Join(ws, AttachmentsDir, strings.Repeat("c", 32)), 0o700)
	notes = run(strings.Repeat("c", 32), small)
	if notes[0].Status != noteNotStored || notes[0].Path != "" {
		t.Errorf("existing turn directory: %+v", notes[0])
	}
}

// TestBrokerAttachmentTransport: the worker's transport maps the broker's
// 413 to ErrAttachmentTooLarge and refuses an answer over 25 MiB (a broker
// that ignored its bound) instead of holding it.
func TestBrokerAttachmentTransport(t *testing.T) {
	dir, err := os.MkdirTemp("", "richatt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "b.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	over := make([]byte, richproto.MaxAttachmentBytes+1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req richproto.AttachmentRequest
		if r.URL.Path != richproto.RouteAttachment || json.NewDecoder(r.Body).Decode(&req) != nil {
			w.WriteHeader(400)
			return
		}
		switch req.Index {
		case 0:
			w.Write([]byte("bytes"))
		case 1:
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		case 2:
			w.Write(over)
		default:
			w.WriteHeader(http.StatusBadGateway)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	b := NewBroker(sock, nil)
	if got, err := b.Attachment(context.Background(), 0); err != nil || string(got) != "bytes" {
		t.Errorf("attachment 0: %q %v", got, err)
	}
	if _, err := b.Attachment(context.Background(), 1); !errors.Is(err, ErrAttachmentTooLarge) {
		t.Errorf("413: %v, want ErrAttachmentTooLarge", err)
	}
	if got, err := b.Attachment(context.Background(), 2); !errors.Is(err, ErrBroker) || got != nil {
		t.Errorf("25 MiB + 1: %d bytes, %v; want ErrBroker", len(got), err)
	}
	var status *StatusError
	if _, err := b.Attachment(context.Background(), 3); !errors.As(err, &status) || status.Status != http.StatusBadGateway {
		t.Errorf("502: %v", err)
	}
}

// TestUnplantAttachments: a fresh start removes a link or file planted at
// attachments (the target untouched) and keeps a real directory.
func TestUnplantAttachments(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), []byte("k"), 0o600)
	dirfd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	at := filepath.Join(ws, AttachmentsDir)
	if err := unplantAttachments(dirfd); err != nil {
		t.Errorf("nothing there: %v", err)
	}
	os.Symlink(outside, at)
	if err := unplantAttachments(dirfd); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(at); !os.IsNotExist(err) {
		t.Errorf("link still there: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(outside, "keep")); string(got) != "k" {
		t.Error("the link's target changed")
	}
	os.WriteFile(at, []byte("x"), 0o600)
	if err := unplantAttachments(dirfd); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(at); !os.IsNotExist(err) {
		t.Errorf("file still there: %v", err)
	}
	os.Mkdir(at, 0o700)
	os.WriteFile(filepath.Join(at, "a"), []byte("a"), 0o600)
	if err := unplantAttachments(dirfd); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(at, "a")); err != nil {
		t.Errorf("a real attachments directory was touched: %v", err)
	}
}
