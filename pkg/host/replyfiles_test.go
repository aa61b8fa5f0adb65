package host

import (
	"context"
	"encoding/json"
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
