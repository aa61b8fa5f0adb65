package reaper

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

type fakeHost struct {
	up  bool
	err error
}

func (f fakeHost) HostActive(context.Context) (bool, error) { return f.up, f.err }

// serve answers GET /v1/turns on a Unix socket and counts connections.
func serve(t *testing.T, status int, body string) (string, *atomic.Int32) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "host.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != "/v1/turns" {
				http.Error(w, "wrong request", http.StatusTeapot)
				return
			}
			w.WriteHeader(status)
			w.Write([]byte(body))
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path, &conns
}

const (
	turnA = "0123456789abcdef0123456789abcdef"
	turnB = "fedcba9876543210fedcba9876543210"
)

func TestHostTurns(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		want      []string
		wantKnown bool
	}{
		{"two turns", 200, `{"turns":[{"id":"` + turnA + `","channel":"x"},{"id":"` + turnB + `"}]}`, []string{turnA, turnB}, true},
		{"no turns", 200, `{"turns":[]}`, nil, true},
		{"server error", 500, `{"error":"x"}`, nil, false},
		{"not json", 200, `<html>`, nil, false},
		{"no list", 200, `{}`, nil, false},
		{"invalid id", 200, `{"turns":[{"id":"../x"}]}`, nil, false},
		{"over size", 200, `{"turns":[],"pad":"` + strings.Repeat("a", maxHostTurnsBytes) + `"}`, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, _ := serve(t, tt.status, tt.body)
			got, known, err := HostTurns(fakeHost{up: true}, path)(context.Background())
			if known != tt.wantKnown || (err == nil) != tt.wantKnown {
				t.Fatalf("known=%v err=%v, want known=%v", known, err, tt.wantKnown)
			}
			if len(got) != len(tt.want) {
				t.Errorf("turns = %v, want %v", got, tt.want)
			}
			for _, id := range tt.want {
				if !got[id] {
					t.Errorf("turn %s missing from %v", id, got)
				}
			}
		})
	}
}

// An inactive host is never dialled (that would socket-activate it): known, empty.
func TestHostTurnsInactiveHostNotDialled(t *testing.T) {
	path, conns := serve(t, 200, `{"turns":[{"id":"`+turnA+`"}]}`)
	got, known, err := HostTurns(fakeHost{up: false}, path)(context.Background())
	if err != nil || !known || len(got) != 0 {
		t.Errorf("inactive host: %v, %v, %v; want empty, known", got, known, err)
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("socket dialled %d times while the host was inactive", n)
	}
	boom := errors.New("bus down")
	if _, known, err := HostTurns(fakeHost{err: boom}, path)(context.Background()); known || !errors.Is(err, boom) {
		t.Errorf("unit state unknown: known=%v err=%v; want unknown", known, err)
	}
	if _, known, err := HostTurns(fakeHost{up: true}, filepath.Join(t.TempDir(), "absent.sock"))(context.Background()); known || err == nil {
		t.Errorf("unreachable host: known=%v err=%v; want unknown", known, err)
	}
}
