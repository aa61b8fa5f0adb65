package richsession

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// controlAnswering is a broker control socket whose turn route runs h.
func controlAnswering(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "broker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestRichControlTurnReadsThePacketAsAStream: the control client reserves
// the packet's length before reading it (the bound when it sends none),
// refuses a length over the bound unread, and names a malformed or cut
// packet by category.
func TestRichControlTurnReadsThePacketAsAStream(t *testing.T) {
	turnID := strings.Repeat("a", 32)
	good := `{"turnId":"` + turnID + `","ok":true,"text":"t","files":[{"name":"a.txt","data":"aGk="}]}`
	for _, tt := range []struct {
		name       string
		answer     http.HandlerFunc
		reserveErr error
		reserved   int64 // -1: reserve never called
		want       string
		wantIs     error
	}{
		{"a packet", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, good) }, nil, int64(len(good)), "", nil},
		{"no length", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, good[:10])
			w.(http.Flusher).Flush() // chunked
			fmt.Fprint(w, good[10:])
		}, nil, richproto.MaxPacketBytes, "", nil},
		{"over the bound", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(richproto.MaxPacketBytes+1))
		}, nil, -1, "reply packet of 75497473 bytes, over 75497472", nil},
		{"malformed", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"INJECTED":1}`) }, nil, 14, "reply packet refused", richproto.ErrInvalid},
		{"hostile name", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, strings.Replace(good, "a.txt", `invoice\u202efdp.exe`, 1))
		}, nil, int64(len(good)) + 15, "reply packet refused", richproto.ErrInvalid},
		{"cut", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			fmt.Fprint(w, good[:20])
		}, nil, 1000, "answer cut", ErrBroker},
		{"budget refused", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, good) }, errors.New("no budget"), int64(len(good)), "no budget", nil},
		{"refused", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, `{"error":"model call failed"}`)
		}, nil, -1, `rich broker refused or failed the turn: 502 "model call failed"`, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := controlAnswering(t, tt.answer)
			reserved := int64(-1)
			res, err := HTTPControl{}.Turn(context.Background(), sock, policy.Bind{}, func(_ context.Context, n int64) error {
				reserved = n
				return tt.reserveErr
			})
			if reserved != tt.reserved {
				t.Errorf("reserved %d, want %d", reserved, tt.reserved)
			}
			if tt.want == "" {
				if err != nil || len(res.Files) != 1 || string(res.Files[0].Data) != "hi" {
					t.Fatalf("Turn = %+v, %v", res, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || (tt.wantIs != nil && !errors.Is(err, tt.wantIs)) {
				t.Fatalf("err = %v, want %q (%v)", err, tt.want, tt.wantIs)
			}
			if strings.Contains(err.Error(), "INJECTED") || strings.Contains(err.Error(), "\u202e") {
				t.Errorf("the error quotes the packet: %v", err)
			}
		})
	}
}

// TestRichControlIncompatibleStatus (moved from pkg/host): the control
// client maps the broker's 409 (a private result withheld
// from an incompatible worker) to ErrWorkerIncompatible, and only 409.
func TestRichControlIncompatibleStatus(t *testing.T) {
	for _, c := range []struct {
		code int
		want bool
	}{{http.StatusConflict, true}, {http.StatusServiceUnavailable, false}, {http.StatusBadGateway, false}} {
		sock := filepath.Join(t.TempDir(), "b.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.code)
			io.WriteString(w, `{"error":"worker incompatible"}`)
		})}
		go srv.Serve(ln)
		_, err = HTTPControl{}.Turn(context.Background(), sock, policy.Bind{}, nil)
		srv.Close()
		if got := errors.Is(err, ErrWorkerIncompatible); got != c.want || err == nil {
			t.Errorf("status %d: err %v, want incompatible %v", c.code, err, c.want)
		}
	}
}
