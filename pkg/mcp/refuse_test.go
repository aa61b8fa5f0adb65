package mcp

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// endless writes chunk to an event stream until the client goes away.
func endless(chunk string, every time.Duration) func(http.ResponseWriter, *http.Request, json.RawMessage) {
	return func(w http.ResponseWriter, r *http.Request, _ json.RawMessage) {
		fl := sseStart(w)
		for {
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
			fl.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(every):
			}
		}
	}
}

func TestRefusals(t *testing.T) {
	// Compressed once: 4 MiB through gzip under the race detector on a busy
	// machine took seconds per request, which the refusal bound below
	// counted as the client's time.
	bomb := gzipped(strings.Repeat("z", 4<<20))
	big := strings.Repeat("A", 100<<10) + bodyMarker
	progress := `data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1,"message":"` + bodyMarker + strings.Repeat("p", 2000) + `"}}` + "\n\n"
	cases := []struct {
		name string
		call func(http.ResponseWriter, *http.Request, json.RawMessage)
		opts func(*Options)
		want error
	}{
		{"oversized JSON answer", jsonAnswer(okResult(big)), nil, ErrTooLarge},
		{"oversized SSE stream", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
			sseStart(w)
			for range 40 { // 40 x 2 KiB events: over 64 KiB in total, each event small
				fmt.Fprint(w, progress)
			}
			fmt.Fprintf(w, "data: "+okResult("late")+"\n\n", id)
		}, func(o *Options) { o.MaxEvents = 1000 }, ErrTooLarge},
		{"too many events", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
			sseStart(w)
			for range 40 {
				fmt.Fprint(w, `data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}`+"\n\n")
			}
			fmt.Fprintf(w, "data: "+okResult("late")+"\n\n", id)
		}, nil, ErrTooManyEvents},
		{"endless keep-alive comments", endless(": ping "+bodyMarker+"\n\n", time.Millisecond), nil, ErrTooManyEvents},
		{"endless line without events", endless(strings.Repeat(":", 1024), time.Millisecond), nil, ErrTooLarge},
		{"endless slow stream", endless(": ping\n\n", 20*time.Millisecond), func(o *Options) {
			o.MaxEvents = 1 << 20
			o.Timeout = 300 * time.Millisecond
		}, ErrTimeout},
		{"JSON-RPC error answer", jsonAnswer(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"` + bodyMarker + `"}}`), nil, ErrRPC},
		{"non-JSON answer", jsonAnswer(`<html>` + bodyMarker + `%s</html>`), nil, ErrProtocol},
		{"unexpected content type", func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, bodyMarker)
		}, nil, ErrProtocol},
		{"result not an object", jsonAnswer(`{"jsonrpc":"2.0","id":%s,"result":"` + bodyMarker + `"}`), nil, ErrProtocol},
		{"wrong response id", func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":999,"result":{"content":[]}}`)
			// The SDK keeps waiting for its own id until the deadline; the
			// stateless path refuses at once.
		}, func(o *Options) { o.Timeout = time.Second }, ErrProtocol},
		{"unknown content item type", jsonAnswer(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"` + bodyMarker + `"}]}}`), nil, ErrProtocol},
		{"HTTP error status", func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) {
			http.Error(w, bodyMarker, http.StatusBadGateway)
		}, nil, ErrUnavailable},
		{"gzip bomb", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			// Three gzip members (a reader decodes their concatenation):
			// the head with this request's id, the bomb, the tail.
			head, tail, _ := strings.Cut(okResult("\x00"), "\x00")
			w.Write(gzipped(fmt.Sprintf(head, id)))
			w.Write(bomb)
			w.Write(gzipped(tail))
		}, nil, ErrTooLarge},
	}
	// On the session path the SDK keeps waiting for its own id until the
	// deadline; the stateless path refuses a foreign id at once.
	wantAuto := map[string]error{"wrong response id": ErrTimeout}
	for _, mode := range []string{policy.SessionAuto, policy.SessionStateless} {
		for _, tc := range cases {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				ts, rec := newFake(t, &fake{call: tc.call})
				opts := testOptions()
				if tc.opts != nil {
					tc.opts(&opts)
				}
				c := NewClient(opts)
				defer closeClient(t, c)
				start := time.Now()
				raw, err := c.CallTool(t.Context(), server(ts.URL, mode), testCred, "echo", json.RawMessage(`{"q":"`+bodyMarker+`"}`))
				if err == nil {
					t.Fatalf("CallTool succeeded with %s; want an error", raw)
				}
				want := tc.want
				if w, ok := wantAuto[tc.name]; ok && mode == policy.SessionAuto {
					want = w
				}
				wantErr(t, err, want)
				assertClean(t, err, ts.URL, strings.TrimPrefix(ts.URL, "http://"))
				if el := time.Since(start); el > 3*time.Second {
					t.Errorf("refusal took %v", el)
				}
				if mode == policy.SessionAuto && rec.count("initialize") != 1 {
					t.Errorf("auto mode: initialize sent %d times, want 1", rec.count("initialize"))
				}
			})
		}
	}
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}

func TestRedirectRefused(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mode        string
		redirectAll bool // also redirect initialize
	}{
		{"stateless", policy.SessionStateless, true},
		{"auto, at initialize", policy.SessionAuto, true},
		{"auto, at tools/call", policy.SessionAuto, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := &recorder{}
			tts := newServer(t, target.wrap(&fake{call: jsonAnswer(okResult("target"))}))
			f := &fake{call: func(w http.ResponseWriter, r *http.Request, _ json.RawMessage) {
				http.Redirect(w, r, tts.URL+"/"+bodyMarker, http.StatusTemporaryRedirect)
			}}
			h := http.Handler(f)
			if tc.redirectAll {
				h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, tts.URL+"/"+bodyMarker, http.StatusPermanentRedirect)
				})
			}
			rec := &recorder{}
			ts := newServer(t, rec.wrap(h))
			c := NewClient(testOptions())
			_, err := c.CallTool(t.Context(), server(ts.URL, tc.mode), testCred, "echo", json.RawMessage(`{}`))
			wantErr(t, err, ErrRedirect)
			assertClean(t, err, ts.URL, tts.URL)
			closeClient(t, c)
			if n := target.requests(); n != 0 {
				t.Errorf("redirect target saw %d requests, want 0", n)
			}
			if tc.redirectAll && rec.count("tools/call") != 0 && tc.mode == policy.SessionAuto {
				t.Errorf("auto mode fell back to a stateless call after a redirect")
			}
		})
	}
}

func TestHTTPURLWithoutAllowHTTP(t *testing.T) {
	ts, rec := newFake(t, &fake{call: jsonAnswer(okResult("x"))})
	for _, mode := range []string{policy.SessionAuto, policy.SessionStateless} {
		s := server(ts.URL, mode)
		s.AllowHTTP = false
		c := NewClient(testOptions())
		_, err := c.CallTool(t.Context(), s, testCred, "echo", json.RawMessage(`{}`))
		wantErr(t, err, ErrURL)
		assertClean(t, err, ts.URL)
		closeClient(t, c)
		_, err = ListTools(t.Context(), s, testCred, testOptions())
		wantErr(t, err, ErrURL)
	}
	if n := rec.requests(); n != 0 {
		t.Errorf("server saw %d requests, want 0", n)
	}
}

func TestUnreachableServer(t *testing.T) {
	ts := newServer(t, http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	for _, mode := range []string{policy.SessionAuto, policy.SessionStateless} {
		c := NewClient(testOptions())
		_, err := c.CallTool(t.Context(), server(url, mode), testCred, "echo", json.RawMessage(`{}`))
		wantErr(t, err, ErrUnavailable)
		assertClean(t, err, url, strings.TrimPrefix(url, "http://"))
		closeClient(t, c)
	}
}

func TestNoCookiesKept(t *testing.T) {
	f := &fake{call: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		http.SetCookie(w, &http.Cookie{Name: "track", Value: bodyMarker})
		jsonAnswer(okResult("x"))(w, nil, id)
	}}
	ts, rec := newFake(t, f)
	c := NewClient(testOptions())
	defer closeClient(t, c)
	for range 2 {
		if _, err := c.CallTool(t.Context(), server(ts.URL, policy.SessionStateless), "", "echo", json.RawMessage(`{}`)); err != nil {
			t.Fatalf("CallTool: %v", err)
		}
	}
	if rec.cookies != 0 {
		t.Errorf("client sent cookies %d times, want never", rec.cookies)
	}
}
