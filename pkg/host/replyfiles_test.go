package host

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/turnanswer"
)

// TestRichReplyFilesReachTheAPI: the worker's reply files are in the turn's
// API answer as {name, type, data (base64)} (a failed reply has none:
// pkg/richsession's TestRichFailedReplyDropsItsFiles); the reply budget
// they held is given back once the answer is written.
func TestRichReplyFilesReachTheAPI(t *testing.T) {
	r, ctl := richRig(t, "")
	ctl.Reserve = 60
	ctl.TurnFn = func(_ context.Context, b policy.Bind) (*richproto.Result, error) {
		return &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: "drawn",
			Files: []richproto.File{{Name: "a.png", Type: "image/png", Data: []byte{0x89, 'P', 'N', 'G', 0}}, {Name: "b.txt", Data: []byte("hi")}}}, nil
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
	if used := r.h.richSessions().ReplyBytesHeld(); used != 0 {
		t.Errorf("%d bytes of the reply budget still held after the answer", used)
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
