package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// TestRichReplyFilesReachTheAPI: the worker's reply files are in the turn's
// API answer as {name, type, data (base64)}; a failed turn's are dropped.
func TestRichReplyFilesReachTheAPI(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	ok := true
	ctl.turnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		res := &richproto.Result{TurnID: b.Turn.ID, OK: ok, Text: "drawn",
			Files: []richproto.File{{Name: "a.png", Type: "image/png", Data: []byte{0x89, 'P', 'N', 'G', 0}}, {Name: "b.txt", Data: []byte("hi")}}}
		if !ok {
			res.Text, res.Cause = "", richproto.CauseModel
		}
		return res, nil
	}
	if code, _ := r.api(t, "PUT", "/v1/channels/room/mode", `{"mode":"rich","profile":"helper"}`); code != 200 {
		t.Fatal(code)
	}
	code, body := r.api(t, "POST", "/v1/channels/room/turns", `{"speaker":{"id":"u"},"text":"draw"}`)
	if code != 200 || !strings.Contains(body, `"files":[{"name":"a.png","type":"image/png","data":"iVBORwA="},{"name":"b.txt","data":"aGk="}]`) {
		t.Fatalf("turn answer: %d %s", code, body)
	}
	var resp TurnResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil || len(resp.Files) != 2 || string(resp.Files[1].Data) != "hi" {
		t.Fatalf("decoded %+v, %v", resp, err)
	}
	ok = false
	code, body = r.api(t, "POST", "/v1/channels/room/turns", `{"speaker":{"id":"u"},"text":"draw"}`)
	if code != 200 || strings.Contains(body, `"files"`) {
		t.Errorf("failed turn's answer: %d %s", code, body)
	}
	// A sealed-mode answer never carries the field.
	if code, _ := r.api(t, "PUT", "/v1/channels/plain/mode", `{"mode":"on"}`); code != 200 {
		t.Fatal(code)
	}
	if code, body := r.api(t, "POST", "/v1/channels/plain/turns", `{"speaker":{"id":"u"},"text":"x"}`); code != 200 || strings.Contains(body, `"files"`) {
		t.Errorf("sealed answer: %d %s", code, body)
	}
}

// TestStalledClientDoesNotHoldTheTurn: a client that stops reading a turn
// answer carrying megabytes of files loses it at the write deadline; the
// turn ends and the channel takes its next turn.
func TestStalledClientDoesNotHoldTheTurn(t *testing.T) {
	old := replyWriteTimeout
	replyWriteTimeout = 300 * time.Millisecond
	t.Cleanup(func() { replyWriteTimeout = old })
	r, ctl := richRig(t, time.Hour)
	big := make([]byte, richproto.MaxReplyFileBytes)
	answered := make(chan struct{})
	ctl.turnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		close(answered)
		return &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: "x", Files: []richproto.File{{Name: "a", Data: big}}}, nil
	}
	if code, _ := r.api(t, "PUT", "/v1/channels/room/mode", `{"mode":"rich","profile":"helper"}`); code != 200 {
		t.Fatal(code)
	}
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r.h.Handler(), ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, peerKey{}, Peer{Known: true, UID: r.h.opts.UID, GID: r.h.opts.GID})
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"speaker":{"id":"u"},"text":"draw"}`
	fmt.Fprintf(conn, "POST /v1/channels/room/turns HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Never read: the answer (14 MiB) cannot fit the socket's buffers.
	// Polled only once the turn has its answer: before it starts, the
	// channel looks free too.
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the turn never ran")
	}
	waitUntil := time.Now().Add(5 * time.Second)
	for r.h.status("room").RunningTurn != "" || r.h.queue.waitingFor("room") != 0 {
		if time.Now().After(waitUntil) {
			t.Fatal("the turn is still held by a client that stopped reading")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The channel is free: the next turn runs.
	ctl.turnFn = nil
	if code, _ := r.api(t, "POST", "/v1/channels/room/turns", `{"speaker":{"id":"u"},"text":"next"}`); code != 200 {
		t.Errorf("next turn: %d", code)
	}
}
