package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// TestRichReplyFilesOnTheWire: a packet's files within the bounds reach the
// host as sent (base64 in JSON); a packet over any file bound (count, one
// file's size, the total, a path name) fails the turn and nothing of it
// reaches the host.
func TestRichReplyFilesOnTheWire(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	big := make([]byte, richproto.MaxReplyFileBytes)
	packet := func(files []richproto.File) string {
		b, _ := json.Marshal(richproto.Result{TurnID: richTurnID, OK: true, Text: "files", Files: files})
		return string(b)
	}
	turn := func(files []richproto.File) (int, controlAnswer) {
		t.Helper()
		// The packet is encoded before the bind, and the turn has the
		// time 60 MiB of JSON takes under the race detector on a busy
		// machine (10 s did not always do).
		body := packet(files)
		b := h.bind("low")
		b.Turn.DeadlineUnixMs = time.Now().Add(2 * time.Minute).UnixMilli()
		got := h.control(context.Background(), b)
		if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
			t.Fatalf("poll: %d", code)
		}
		code, _, _ := h.do(richproto.RouteResult, body)
		a := <-got
		h.waitUnbound(t)
		return code, a
	}
	eleven := make([]richproto.File, richproto.MaxReplyFiles+1)
	for i := range eleven {
		eleven[i] = richproto.File{Name: fmt.Sprintf("f%d", i), Data: []byte{1}}
	}
	for name, files := range map[string][]richproto.File{
		"eleven files": eleven,
		"over 10 MiB":  {{Name: "big", Data: append(big[:len(big):len(big)], 0)}},
		"over 50 MiB":  {{Name: "a", Data: big}, {Name: "b", Data: big}, {Name: "c", Data: big}, {Name: "d", Data: big}, {Name: "e", Data: big}, {Name: "f", Data: []byte{1}}},
		"path name":    {{Name: "../host", Data: []byte("x")}},
	} {
		code, a := turn(files)
		if code != http.StatusBadRequest || a.code != http.StatusServiceUnavailable || strings.Contains(a.body, `"files"`) {
			t.Errorf("%s: worker %d, host %d %.80s; want 400 and a failed turn", name, code, a.code, a.body)
		}
	}
	files := []richproto.File{{Name: "a.txt", Type: "text/plain", Data: []byte("alpha")}, {Name: "b.bin", Data: big}}
	code, a := turn(files)
	var res richproto.Result
	if code != http.StatusOK || a.code != http.StatusOK || json.Unmarshal([]byte(a.body), &res) != nil || len(res.Files) != 2 ||
		string(res.Files[0].Data) != "alpha" || len(res.Files[1].Data) != richproto.MaxReplyFileBytes {
		t.Errorf("files within the bounds: worker %d, host %d, %d files", code, a.code, len(res.Files))
	}
}
