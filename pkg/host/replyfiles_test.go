package host

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/turnanswer"
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

// TestTurnAnswerCutNamesThePeer: the host writes a turn's answer through
// pkg/turnanswer (whose TestStalledClientDoesNotHoldTheTurn cuts a client
// that stops reading) within api.WriteTimeout, and a cut answer's log
// record names the turn and the caller's uid.
func TestTurnAnswerCutNamesThePeer(t *testing.T) {
	logs := &lockedBuffer{}
	r := newRig(t, "", func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	req := httptest.NewRequest("POST", "/v1/channels/c/turns", nil)
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, Peer{Known: true, UID: 4242, GID: 4242}))
	r.h.writeReply(stalledWriter{httptest.NewRecorder()}, req, &protocol.Reply{OK: true, Text: "x"}, "t-1", nil)
	var rec struct {
		Turn    string  `json:"turn"`
		PeerUID int     `json:"peer_uid"`
		Timeout float64 `json:"write_timeout_s"`
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"`+turnanswer.CutMsg+`"`) {
			must(t, json.Unmarshal([]byte(l), &rec))
		}
	}
	if rec.Turn != "t-1" || rec.PeerUID != 4242 || rec.Timeout != api.WriteTimeout.Seconds() {
		t.Errorf("cut record %+v, want the turn, uid 4242 and api.WriteTimeout", rec)
	}
}

// stalledWriter is a client whose socket's write deadline passed.
type stalledWriter struct{ *httptest.ResponseRecorder }

func (stalledWriter) Write([]byte) (int, error) { return 0, os.ErrDeadlineExceeded }

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
