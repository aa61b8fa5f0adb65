package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// unixServer runs an httptest server on a Unix socket and returns its path.
func unixServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return path
}

func TestUnixBrokerRequest(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	var body []byte
	path := unixServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Clone(context.Background())
		body, _ = io.ReadAll(r.Body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"result": "<ok>"}`)
	})
	b := NewUnixBroker(path, time.Second)
	raw, err := b.Call(context.Background(), "/tools/clock", json.RawMessage(`{"a": "<&>"}`))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if string(raw) != `{"result": "<ok>"}` {
		t.Errorf("answer = %s", raw)
	}
	mu.Lock()
	defer mu.Unlock()
	checks := []struct{ name, got, want string }{
		{"method", got.Method, "POST"},
		{"path", got.URL.Path, "/tools/clock"},
		{"query", got.URL.RawQuery, ""},
		{"host", got.Host, "broker"},
		{"authorization", got.Header.Get("Authorization"), "Bearer sandbox-dummy-key"},
		{"content-type", got.Header.Get("Content-Type"), "application/json"},
		{"accept-encoding", got.Header.Get("Accept-Encoding"), ""},
		{"proto", got.Proto, "HTTP/1.1"},
		{"body", string(body), `{"a":"<&>"}`},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if got.ContentLength != int64(len(body)) {
		t.Errorf("Content-Length = %d, want %d", got.ContentLength, len(body))
	}
	allowed := map[string]bool{"Authorization": true, "Content-Type": true, "Content-Length": true, "Accept": true, "User-Agent": true}
	for k := range got.Header {
		if !allowed[k] {
			t.Errorf("unexpected header %s", k)
		}
	}
}

func TestUnixBrokerFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    error
		status  int
	}{
		{"refused 403", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(403)
			io.WriteString(w, `{"error":"request refused"}`)
		}, ErrRefused, 403},
		{"limit 429", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) }, ErrRefused, 429},
		{"redirect not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://example.com/", http.StatusFound)
		}, ErrRefused, 302},
		{"not json", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }, ErrBroker, 0},
		{"oversized", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `"`+strings.Repeat("a", MaxResponseBytes)+`"`)
		}, ErrBroker, 0},
		{"slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		}, ErrBroker, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewUnixBroker(unixServer(t, tt.handler), 300*time.Millisecond)
			_, err := b.Call(context.Background(), "/model", map[string]any{"model": "m"})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var refused *RefusedError
			if tt.status != 0 && (!errors.As(err, &refused) || refused.Status != tt.status) {
				t.Errorf("err = %v, want status %d", err, tt.status)
			}
		})
	}
}

func TestUnixBrokerRefusesBadRoutesLocally(t *testing.T) {
	hits := 0
	path := unixServer(t, func(w http.ResponseWriter, r *http.Request) { hits++; io.WriteString(w, "{}") })
	b := NewUnixBroker(path, time.Second)
	for _, route := range []string{"/models", "/tools/", "/tools/a/b", "/mcp/x?y=1", "model", "/tools/Bad", "/tools/../model", "http://evil/model"} {
		if _, err := b.Call(context.Background(), route, map[string]any{}); !errors.Is(err, ErrBroker) {
			t.Errorf("route %q: err %v, want ErrBroker", route, err)
		}
	}
	if hits != 0 {
		t.Errorf("server saw %d requests for invalid routes", hits)
	}
	if _, err := NewUnixBroker(filepath.Join(t.TempDir(), "missing.sock"), time.Second).Call(context.Background(), "/model", map[string]any{}); !errors.Is(err, ErrBroker) {
		t.Errorf("missing socket: err %v, want ErrBroker", err)
	}
}
