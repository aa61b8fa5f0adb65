package broker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

const capableReady = `{"capabilities":{"privateTo":true,"readerRecords":true},"privateHistory":false}`

// startPrivateTurn announces the worker with ready, binds a turn for
// principal p-1 and takes it from the long poll; the web tool answers web.
func startPrivateTurn(t *testing.T, ready, web string) (*harness, <-chan controlAnswer, richproto.Turn) {
	t.Helper()
	h := newRichHarness(t, os.Getuid())
	h.web.set(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, web)
	})
	if code, body, _ := h.do(richproto.RouteReady, ready); code != http.StatusOK {
		t.Fatalf("ready: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	got := h.control(ctx, h.bind("low"))
	code, body, _ := h.do(richproto.RouteNext, "")
	if code != http.StatusOK {
		t.Fatalf("poll: %d %s", code, body)
	}
	var turn richproto.Turn
	if err := json.Unmarshal([]byte(body), &turn); err != nil {
		t.Fatal(err)
	}
	return h, got, turn
}

// A capable worker gets the private result with privateTo preserved, and
// the turn's reader from the bound identity.
func TestRichPrivateResultPreserved(t *testing.T) {
	h, got, turn := startPrivateTurn(t, capableReady, `{"privateTo":"p-1","result":{"secret":"s3"}}`)
	if turn.Reader != "p-1" {
		t.Errorf("turn reader %q, want the bound principal p-1", turn.Reader)
	}
	code, body, _ := h.do("/tools/web", `{}`)
	if code != http.StatusOK {
		t.Fatalf("tool: %d %s", code, body)
	}
	var answer struct {
		Result    json.RawMessage `json:"result"`
		PrivateTo string          `json:"privateTo"`
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil || answer.PrivateTo != "p-1" || string(answer.Result) != `{"secret":"s3"}` {
		t.Fatalf("answer %s (%v), want the result with privateTo p-1", body, err)
	}
	// A public answer carries no privateTo.
	h.web.set(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"weather":"sunny"}`) })
	if code, body, _ := h.do("/tools/web", `{}`); code != http.StatusOK || strings.Contains(body, "privateTo") {
		t.Errorf("public answer %d %s", code, body)
	}
	if code, body, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "ok")); code != http.StatusOK {
		t.Fatalf("result %d %s", code, body)
	}
	if a := <-got; a.code != http.StatusOK {
		t.Fatalf("control %d %s", a.code, a.body)
	}
}

// An incompatible worker (each ready short of both capabilities) meeting a
// private result: the payload is not sent, the host's control call fails
// with the incompatible-worker status, and no further call of the turn or
// reply packet is admitted.
func TestRichPrivateIncompatibleWorker(t *testing.T) {
	for _, ready := range []string{
		"",
		`{}`,
		`{"capabilities":{"privateTo":true},"privateHistory":false}`,
		`{"capabilities":{"readerRecords":true},"privateHistory":false}`,
	} {
		t.Run(ready, func(t *testing.T) {
			h, got, _ := startPrivateTurn(t, ready, `{"privateTo":"p-1","result":"the secret s3"}`)
			code, body, _ := h.do("/tools/web", `{}`)
			if code != http.StatusConflict || strings.Contains(body, "s3") {
				t.Fatalf("tool: %d %s, want 409 without the payload", code, body)
			}
			a := <-got
			if a.code != http.StatusConflict || strings.Contains(a.body, "s3") {
				t.Fatalf("control %d %s, want 409", a.code, a.body)
			}
			if code, _, _ := h.do("/tools/clock", `{}`); code == http.StatusOK {
				t.Errorf("a later tool call was admitted")
			}
			if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "s")); code == http.StatusOK {
				t.Errorf("a reply packet of the failed turn was admitted")
			}
			if strings.Contains(h.logs.String(), "s3") {
				t.Errorf("the private payload reached the log")
			}
		})
	}
}

// Hostile privateTo values fail the tool call; nothing of the output
// reaches the worker.
func TestRichPrivateHostileValues(t *testing.T) {
	for _, out := range []string{
		`{"privateTo":"p-2","result":"s3"}`,
		`{"privateTo":"","result":"s3"}`,
		`{"privateTo":null,"result":"s3"}`,
		`{"privateTo":1,"result":"s3"}`,
		`{"privateTo":"p-1","result":"s3","extra":1}`,
		`{"privateTo":"p-1"}`,
		`{"privateTo":"p-2","privateTo":"p-1","result":"s3"}`,
		`{"privateTo":"p-1 ","result":"s3"}`,
		`{"privateTo":"p-1\u0000","result":"s3"}`,
		`{"privateTo":"` + strings.Repeat("p", 257) + `","result":"s3"}`,
	} {
		t.Run(out, func(t *testing.T) {
			h, got, _ := startPrivateTurn(t, capableReady, out)
			code, body, _ := h.do("/tools/web", `{}`)
			if code != http.StatusBadGateway || strings.Contains(body, "s3") {
				t.Fatalf("tool: %d %s, want 502 without the output", code, body)
			}
			h.do(richproto.RouteResult, resultJSON(richTurnID, "ok"))
			<-got
		})
	}
}

// A private envelope in a turn bound without a principal is refused.
func TestRichPrivateWithoutPrincipal(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	h.web.set(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"privateTo":"p-1","result":"s3"}`) })
	h.do(richproto.RouteReady, capableReady)
	b := h.bind("low")
	b.Identity.PrincipalID = ""
	got := h.control(context.Background(), b)
	if code, body, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK || strings.Contains(body, `"reader"`) {
		t.Fatalf("poll %d %s", code, body)
	}
	if code, body, _ := h.do("/tools/web", `{}`); code != http.StatusBadGateway || strings.Contains(body, "s3") {
		t.Fatalf("tool: %d %s, want 502", code, body)
	}
	h.do(richproto.RouteResult, resultJSON(richTurnID, "ok"))
	<-got
}

// A worker reporting retained private history without both capabilities
// gets no turn: the bind is refused as incompatible.
func TestRichPrivateHistoryNeedsCapabilities(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	h.do(richproto.RouteReady, `{"capabilities":{"privateTo":false,"readerRecords":false},"privateHistory":true}`)
	a := <-h.control(context.Background(), h.bind("low"))
	if a.code != http.StatusConflict {
		t.Fatalf("bind %d %s, want 409", a.code, a.body)
	}
}

// Malformed ready bodies are refused and change nothing.
func TestRichReadyMalformed(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	for _, body := range []string{
		`{"capabilities":{"privateTo":"yes"}}`,
		`{"capabilities":{"privateTo":true,"readerRecords":true,"more":true}}`,
		`{"capabilities":[true]}`,
		`{"privateHistory":1}`,
		`{"capabilities":null}`,
		`{"capabilities":{"privateTo":null}}`,
		`{"capabilities":{"privateTo":true,"privateTo":false}}`,
		`null`,
		`{} {}`,
		`[]`,
	} {
		if code, _, _ := h.do(richproto.RouteReady, body); code != http.StatusBadRequest {
			t.Errorf("ready %s: %d, want 400", body, code)
		}
	}
}

// TestRichPollNeedsAnnounce drives the order of a broker restart between
// the worker's ready and its poll: the turn is bound, the worker polls this
// broker without having announced itself to it. The poll is refused and
// the turn stays unhanded (it is not run as if the worker had no
// capabilities); after the worker announces again it gets the turn and its
// private result.
func TestRichPollNeedsAnnounce(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	h.web.set(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"privateTo":"p-1","result":"s3"}`) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := h.control(ctx, h.bind("low"))
	h.waitBound(t)
	if code, body, _ := h.do(richproto.RouteNext, ""); code != http.StatusBadRequest || strings.Contains(body, richTurnID) {
		t.Fatalf("poll before ready: %d %s, want 400 without the turn", code, body)
	}
	if code, _, _ := h.do(richproto.RouteReady, capableReady); code != http.StatusOK {
		t.Fatalf("ready: %d", code)
	}
	if code, body, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK || !strings.Contains(body, richTurnID) {
		t.Fatalf("poll after ready: %d %s, want the turn", code, body)
	}
	if code, body, _ := h.do("/tools/web", `{}`); code != http.StatusOK || !strings.Contains(body, `"privateTo":"p-1"`) {
		t.Fatalf("private tool: %d %s, want the result for p-1", code, body)
	}
	if code, body, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "ok")); code != http.StatusOK {
		t.Fatalf("result: %d %s", code, body)
	}
	if a := <-got; a.code != http.StatusOK {
		t.Fatalf("control %d %s, want 200", a.code, a.body)
	}
}

// TestRichPrivateHistoryAnnouncedAfterBind: the bind's check passes (no
// announcement yet, or one without private history), then the worker
// announces private history without the capabilities before it polls: the
// turn is not handed, and the host's call fails as incompatible.
func TestRichPrivateHistoryAnnouncedAfterBind(t *testing.T) {
	for _, first := range []string{"none", `{}`} {
		t.Run(first, func(t *testing.T) {
			h := newRichHarness(t, os.Getuid())
			if first != "none" {
				if code, _, _ := h.do(richproto.RouteReady, first); code != http.StatusOK {
					t.Fatalf("ready: %d", code)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got := h.control(ctx, h.bind("low"))
			h.waitBound(t)
			if code, _, _ := h.do(richproto.RouteReady, `{"capabilities":{"privateTo":false,"readerRecords":false},"privateHistory":true}`); code != http.StatusOK {
				t.Fatalf("ready: %d", code)
			}
			if code, body, _ := h.do(richproto.RouteNext, ""); code != http.StatusConflict || strings.Contains(body, richTurnID) {
				t.Fatalf("poll: %d %s, want 409 without the turn", code, body)
			}
			if a := <-got; a.code != http.StatusConflict {
				t.Fatalf("control %d %s, want 409", a.code, a.body)
			}
			if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "s")); code == http.StatusOK {
				t.Errorf("a reply packet of the failed turn was admitted")
			}
		})
	}
}
