package broker

import (
	"context"
	"encoding/base64"
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
	if raceEnabled {
		// About 20 s of make unit under -race, most of it encoding and
		// decoding packets; the rich tests with small packets run the same
		// route under -race.
		t.Skip("moves packets of up to 70 MB: runs without -race in make unit's second pass")
	}
	h := newRichHarness(t, os.Getuid())
	h.announce(t)
	big := make([]byte, richproto.MaxReplyFileBytes)
	// The packets are encoded by hand, the 10 MiB file's base64 once:
	// json.Marshal of the 50 MiB packet alone took 8 s under -race.
	bigData := base64.StdEncoding.EncodeToString(big)
	packet := func(files []richproto.File) string {
		var b strings.Builder
		b.WriteString(`{"turnId":"` + richTurnID + `","ok":true,"text":"files","files":[`)
		for i, f := range files {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(f.Name)
			data := bigData
			if len(f.Data) != len(big) || &f.Data[0] != &big[0] {
				data = base64.StdEncoding.EncodeToString(f.Data)
			}
			b.WriteString(`{"name":` + string(name))
			if f.Type != "" {
				b.WriteString(`,"type":"` + f.Type + `"`)
			}
			b.WriteString(`,"data":"` + data + `"}`)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	if want, _ := json.Marshal(richproto.Result{TurnID: richTurnID, OK: true, Text: "files", Files: []richproto.File{{Name: "a", Type: "text/plain", Data: []byte("x")}, {Name: "b", Data: []byte{1}}}}); packet([]richproto.File{{Name: "a", Type: "text/plain", Data: []byte("x")}, {Name: "b", Data: []byte{1}}}) != string(want) {
		t.Fatalf("hand-encoded packet differs from json.Marshal's %s", want)
	}
	turn := func(files []richproto.File) (int, controlAnswer) {
		t.Helper()
		b := h.bind("low")
		// A packet of up to 70 MB of JSON is read and decoded within the
		// turn: under -race on a busy machine that took over the bind's
		// usual 10 s.
		b.Turn.DeadlineUnixMs = time.Now().Add(2 * time.Minute).UnixMilli()
		got := h.control(context.Background(), b)
		if code, _, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
			t.Fatalf("poll: %d", code)
		}
		code, _, _ := h.do(richproto.RouteResult, packet(files))
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
