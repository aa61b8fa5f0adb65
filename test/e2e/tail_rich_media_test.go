package e2e

// Rich channels, part 2 (issue 16) end to end: an image attachment served
// by a local page server the operator allowed (egress.allow), fetched by
// the real channel broker and shown to the model as an image block; a
// skill read from the operator's tree mounted read-only at /skills; a reply
// file written by the model that reaches the CLI's --files-dir. This file
// sorts after scenarios_test.go (see tail_egress_test.go).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
)

// toolUseReply is a model answer asking for one tool call.
func toolUseReply(id, name, input string) anthropictest.Reply {
	ev := []anthropictest.Event{anthropictest.Start(richModel),
		anthropictest.BlockStart(0, `{"type":"tool_use","id":"`+id+`","name":"`+name+`","input":{}}`),
		anthropictest.InputDelta(0, input), anthropictest.BlockStop(0)}
	return anthropictest.Reply{Events: append(ev, anthropictest.End("tool_use")...)}
}

func TestRichMediaAttachmentSkillAndReplyFile(t *testing.T) {
	diagnose(t)
	// The picture: a real 6x4 PNG on a page server on loopback.
	img := image.NewRGBA(image.Rect(0, 0, 6, 4))
	for x := range 6 {
		img.Set(x, 1, color.RGBA{R: 200, A: 255})
	}
	var pic bytes.Buffer
	png.Encode(&pic, img)
	var served atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/pic.png" {
			http.NotFound(w, r)
			return
		}
		served.Add(1)
		w.Header().Set("Content-Type", "image/png")
		w.Write(pic.Bytes())
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()

	// The operator's skills tree.
	skills := "/srv/roundtable-e2e-skills-" + randHex(4)
	if err := os.MkdirAll(filepath.Join(skills, "drawing"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(skills) })
	skillMarker := "SKILL-MARKER-" + randHex(4)
	os.WriteFile(filepath.Join(skills, "drawing", "SKILL.md"), []byte("---\nname: drawing\ndescription: Draw answers as files\n---\n"+skillMarker+"\n"), 0o644)

	fake := anthropictest.New(t)
	u, _ := net.ResolveTCPAddr("tcp", strings.TrimPrefix(fake.URL, "http://"))
	c := baseConfig()
	c.GraceSeconds = 0
	c.RichPort, c.RichIdle = u.Port, 30
	c.FetchAllow = addr
	c.RichSkills = skills
	withConfig(t, c)
	const ch = "e2e-rich-media"
	richOn(t, ch)

	replyBody := "reply file body " + randHex(4)
	fileArgs, _ := json.Marshal(map[string]string{"name": "answer.txt", "text": replyBody})
	fake.Push(
		toolUseReply("toolu_skill", "read_skill", `{"path":"drawing/SKILL.md"}`),
		toolUseReply("toolu_file", "write_reply_file", string(fileArgs)),
		textReply("done"),
	)
	out := t.TempDir()
	start := time.Now()
	stdout, err := cli("turn", ch, "--speaker-id", "alice", "--text", "describe the picture",
		"--attach", "http://"+addr+"/pic.png,pic.png,image/png", "--files-dir", out)
	took := time.Since(start)
	if err != nil || !strings.Contains(stdout, "done") {
		t.Fatalf("turn: %v\n%s", err, stdout)
	}
	t.Logf("rich turn with an attachment, a skill read and a reply file: %v (session start included)", took.Round(time.Millisecond))
	if n := served.Load(); n != 1 {
		t.Errorf("the page server served the picture %d times, want 1", n)
	}
	reqs := messagesRequests(fake)
	if len(reqs) != 3 {
		t.Fatalf("the upstream saw %d message requests, want 3", len(reqs))
	}
	first := string(reqs[0].Body)
	if !strings.Contains(first, `"type":"image"`) || !strings.Contains(first, base64.StdEncoding.EncodeToString(pic.Bytes())) {
		t.Errorf("the first model request carries no image block with the picture's bytes")
	}
	if !strings.Contains(first, `"name":"read_skill"`) || !strings.Contains(first, "drawing: Draw answers as files") {
		t.Errorf("read_skill with the skill index was not offered")
	}
	if !strings.Contains(string(reqs[1].Body), skillMarker) {
		t.Errorf("the skill's text did not reach the model through read_skill")
	}
	got, err := os.ReadFile(filepath.Join(out, "answer.txt"))
	if err != nil || string(got) != replyBody {
		t.Errorf("reply file = %q, %v; want %q", got, err, replyBody)
	}
	if !strings.Contains(stdout, "wrote "+strconv.Quote(filepath.Join(out, "answer.txt"))+" ("+strconv.Itoa(len(replyBody))+" bytes)") {
		t.Errorf("the CLI did not report the file:\n%s", stdout)
	}

	// The same reply again into the same directory: the file is there, so
	// the CLI fails naming it and leaves it as it was.
	os.WriteFile(filepath.Join(out, "answer.txt"), []byte("edited"), 0o600)
	fake.Push(toolUseReply("toolu_file2", "write_reply_file", string(fileArgs)), textReply("again"))
	stdout, err = cli("turn", ch, "--speaker-id", "alice", "--text", "once more", "--files-dir", out)
	if err == nil || !strings.Contains(stdout, "answer.txt") {
		t.Errorf("second turn into the same directory: %v\n%s", err, stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "answer.txt")); string(b) != "edited" {
		t.Errorf("an existing file was overwritten: %q", b)
	}
	// The API answer carries the files as {name, type, data}.
	fake.Push(toolUseReply("toolu_file3", "write_reply_file", string(fileArgs)), textReply("api"))
	r := turn(ch, "alice", "through the API")
	files, _ := r.Body["files"].([]any)
	if r.Status != http.StatusOK || len(files) != 1 {
		t.Fatalf("API turn: %s", r)
	}
	f, _ := files[0].(map[string]any)
	if f["name"] != "answer.txt" || f["type"] != "text/plain" || f["data"] != base64.StdEncoding.EncodeToString([]byte(replyBody)) {
		t.Errorf("API file = %v", f)
	}
}
