package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// server answers every request with handler on a Unix socket.
func server(t *testing.T, handler http.HandlerFunc) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return New(sock)
}

func TestChannelIsOneEscapedSegment(t *testing.T) {
	var got string
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.RequestURI
		w.Write([]byte(`{"ok":true,"text":"t","turnId":"x"}`))
	})
	if _, err := c.RunTurn(context.Background(), "a/../b c?#%", Speaker{ID: "s"}, "hi"); err != nil {
		t.Fatal(err)
	}
	if want := "/v1/channels/a%2F%2E%2E%2Fb%20c%3F%23%25/turns"; got != want {
		t.Errorf("request URI = %q, want %q", got, want)
	}
}

func TestErrorsCarryStatusAndReason(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write([]byte(`{"error":"queue full"}`))
	})
	_, err := c.RunTurn(context.Background(), "c", Speaker{ID: "s"}, "hi")
	var e *Error
	if !errors.As(err, &e) || e.Status != 429 || e.Reason != "queue full" {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(err, ErrQueueFull) || errors.Is(err, ErrForbidden) {
		t.Errorf("errors.Is: queue full %v, forbidden %v", errors.Is(err, ErrQueueFull), errors.Is(err, ErrForbidden))
	}
}

func TestNonJSONErrorGetsStatusText(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>", http.StatusBadGateway)
	})
	_, err := c.Health(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Status != 502 || e.Reason != "Bad Gateway" {
		t.Errorf("err = %v", err)
	}
}
