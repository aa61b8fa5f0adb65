package turnanswer_test

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

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/turnanswer"
)

// TestTurnAnswerIsJSONMarshal (moved from pkg/host): the streamed answer
// is byte for byte what json.Marshal writes, with a newline, and its
// length.
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
		a, err := turnanswer.New(r)
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

// TestStalledClientDoesNotHoldTheTurn (moved from pkg/host, where it went
// through the turn route): a client that stops reading a turn answer
// carrying megabytes of files loses it at the write deadline, and the log
// blames it (the turn, the peer's uid, the deadline); Write returns, so
// the turn ends and its channel takes its next turn (the host's handler
// returns once Write did: pkg/host's TestTurnAnswerCutNamesThePeer checks
// what the host hands Write).
func TestStalledClientDoesNotHoldTheTurn(t *testing.T) {
	logs := &sandboxtest.LockedBuffer{}
	cut := make(chan struct{}, 1)
	log := slog.New(&signalHandler{Handler: slog.NewJSONHandler(logs, nil), msg: turnanswer.CutMsg, c: cut})
	big := make([]byte, richproto.MaxReplyFileBytes)
	returned := make(chan error, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reply := apiwire.Reply{OK: true, Text: "drawn", TurnID: "t-1", Files: []richproto.File{{Name: "a", Data: big}}}
		returned <- turnanswer.Write(w, reply, 300*time.Millisecond, log, 4242)
	})}
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
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
	// log record and on Write's return.
	select {
	case <-cut:
	case <-time.After(60 * time.Second):
		t.Fatalf("no %q after 60 s: the turn is still held by a client that stopped reading\n%s", turnanswer.CutMsg, logs.String())
	}
	select {
	case err := <-returned:
		if err != nil {
			t.Errorf("Write: %v, want nil (the answer was started)", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Write did not return after the cut: the turn and its channel are held")
	}
	var rec struct {
		Turn    string  `json:"turn"`
		PeerUID int     `json:"peer_uid"`
		Timeout float64 `json:"write_timeout_s"`
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"`+turnanswer.CutMsg+`"`) {
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rec.Turn != "t-1" || rec.PeerUID != 4242 || rec.Timeout != 0.3 {
		t.Errorf("cut record %+v, want the turn, uid 4242 and 0.3 s", rec)
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
