package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// TestRichReplyFilesReachTheAPI: the worker's reply files are in the turn's
// API answer as {name, type, data (base64)}; a failed turn's are dropped.
func TestRichReplyFilesReachTheAPI(t *testing.T) {
	r, ctl := richRig(t, time.Hour)
	ok := true
	ctl.TurnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
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
	var resp apiwire.Reply
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
// answer carrying megabytes of files loses it at the write deadline, and
// the log blames it; the turn ends and the channel takes its next turn.
func TestStalledClientDoesNotHoldTheTurn(t *testing.T) {
	old := api.WriteTimeout
	api.WriteTimeout = 300 * time.Millisecond
	t.Cleanup(func() { api.WriteTimeout = old })
	const cutMsg = "turn answer cut: the client stopped reading"
	logs := &lockedBuffer{}
	cut := make(chan struct{}, 1)
	r, ctl := richRigWith(t, time.Hour, func(o *Options) {
		o.Logger = slog.New(&signalHandler{Handler: slog.NewJSONHandler(logs, nil), msg: cutMsg, c: cut})
	})
	big := make([]byte, richproto.MaxReplyFileBytes)
	ctl.TurnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		res := &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: "answer to " + b.Turn.Text}
		if b.Turn.Text == "draw" {
			res.Files = []richproto.File{{Name: "a", Data: big}}
		}
		return res, nil
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
	// Never read: the answer (14 MiB) cannot fit the socket's buffers. The
	// bounds below only end a failing test; a passing one waits on the
	// log record and on the next turn's answer.
	select {
	case <-cut:
	case <-time.After(60 * time.Second):
		t.Fatalf("no %q after 60 s: the turn is still held by a client that stopped reading\n%s", cutMsg, logs.String())
	}
	// The channel is free: the next turn runs (it may queue for a moment
	// behind the cut turn's end).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if code, out := r.apiCtx(t, ctx, "POST", "/v1/channels/room/turns", `{"speaker":{"id":"u"},"text":"next"}`); code != 200 || !strings.Contains(out, "answer to next") {
		t.Errorf("next turn: %d %s", code, out)
	}
	var rec struct {
		Turn    string  `json:"turn"`
		PeerUID int     `json:"peer_uid"`
		Timeout float64 `json:"write_timeout_s"`
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"`+cutMsg+`"`) {
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rec.Turn == "" || rec.PeerUID != r.h.opts.UID || rec.Timeout != 0.3 {
		t.Errorf("cut record %+v, want the turn, uid %d and 0.3 s", rec, r.h.opts.UID)
	}
}

// TestReplyBudgetWaits: a packet that does not fit the host's reply budget
// waits for the packets holding it (here: until the first turn's answer is
// written), then goes on; the budget is whole again after both.
func TestReplyBudgetWaits(t *testing.T) {
	waited := make(chan int64, 1)
	r, ctl := richRigWith(t, time.Hour, func(o *Options) {
		richTuning(o).ReplyBudget = 100
		richTuning(o).BudgetWait = func(n int64) { waited <- n }
	})
	ctl.Reserve = 60
	entered, hold := make(chan string, 2), make(chan struct{})
	ctl.TurnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		entered <- b.Identity.Channel
		if b.Identity.Channel == "a" {
			<-hold
		}
		return &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: "x", Files: []richproto.File{{Name: "f.txt", Data: []byte("0123456789")}}}, nil
	}
	for _, ch := range []string{"a", "b"} {
		if code, _ := r.api(t, "PUT", "/v1/channels/"+ch+"/mode", `{"mode":"rich","profile":"helper"}`); code != 200 {
			t.Fatal(code)
		}
	}
	type answer struct {
		code int
		body string
	}
	turn := func(ch string, out chan<- answer) {
		code, body := r.api(t, "POST", "/v1/channels/"+ch+"/turns", `{"speaker":{"id":"u"},"text":"x"}`)
		out <- answer{code, body}
	}
	aDone, bDone := make(chan answer, 1), make(chan answer, 1)
	go turn("a", aDone)
	if ch := <-entered; ch != "a" {
		t.Fatalf("turn of %s entered first", ch)
	}
	go turn("b", bDone)
	if n := <-waited; n != 60 {
		t.Fatalf("a packet of %d bytes waited, want 60", n)
	}
	select {
	case a := <-bDone:
		t.Fatalf("b answered while a held the budget: %+v", a)
	default:
	}
	close(hold)
	for _, done := range []chan answer{aDone, bDone} {
		if a := <-done; a.code != 200 || !strings.Contains(a.body, `"name":"f.txt"`) {
			t.Errorf("answer %d %s", a.code, a.body)
		}
	}
	if used := r.h.richSessions().ReplyBytesHeld(); used != 0 {
		t.Errorf("%d bytes of the reply budget still held after both turns", used)
	}
}

// TestTurnAnswerIsJSONMarshal: the streamed answer is byte for byte what
// json.Marshal writes, with a newline, and its length.
func TestTurnAnswerIsJSONMarshal(t *testing.T) {
	for _, r := range []apiwire.Reply{
		{OK: true, Text: "hi", TurnID: "t"},
		{OK: false, Text: "", TurnID: "t"},
		{OK: true, Text: "<b>&é\u2028🐈\"\\", TurnID: "t", Files: []richproto.File{
			{Name: "a<&>.png", Type: "image/png", Data: []byte{0x89, 'P', 'N', 'G', 0, 1}},
			{Name: "empty", Data: []byte{}},
			{Name: "nil"},
			{Name: "b", Type: "text/plain", Data: []byte("xy")},
		}},
	} {
		want, _ := json.Marshal(r)
		want = append(want, '\n')
		a, err := newTurnAnswer(r)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		n, err := a.WriteTo(&got)
		if err != nil || got.String() != string(want) || n != int64(len(want)) || a.Len() != int64(len(want)) {
			t.Errorf("answer %q (%d, Len %d, %v), want %q (%d)", got.String(), n, a.Len(), err, want, len(want))
		}
	}
}

// signalHandler passes records on and tells c (once, without blocking) when
// one with message msg arrived: a test waits on a log record instead of
// polling for its effect.
type signalHandler struct {
	slog.Handler
	msg string
	c   chan struct{}
}

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message == h.msg {
		select {
		case h.c <- struct{}{}:
		default:
		}
	}
	return err
}

func (h *signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithAttrs(as), msg: h.msg, c: h.c}
}

func (h *signalHandler) WithGroup(name string) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithGroup(name), msg: h.msg, c: h.c}
}
