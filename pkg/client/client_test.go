package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// server answers every request with handler on a Unix socket.
func server(t *testing.T, handler http.HandlerFunc) *Client {
	t.Helper()
	return serverWith(t, Options{}, handler)
}

func serverWith(t *testing.T, o Options, handler http.HandlerFunc) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return NewWithOptions(sock, o)
}

func TestChannelIsOneEscapedSegment(t *testing.T) {
	var got string
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.RequestURI
		w.Write([]byte(`{"ok":true,"text":"t","turnId":"x"}`))
	})
	if _, err := c.RunTurn(context.Background(), "a/../b c?#%", apiwire.Speaker{ID: "s"}, "hi"); err != nil {
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
	_, err := c.RunTurn(context.Background(), "c", apiwire.Speaker{ID: "s"}, "hi")
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

// TestSilentSocketTimesOut: a socket that accepts connections but never
// answers (systemd holding it while the host fails to start) cuts a status
// call at Timeout with ErrTimeout, naming the call and where to look.
func TestSilentSocketTimesOut(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock) // listening, never accepting: the kernel queues the connection
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := NewWithOptions(sock, Options{Timeout: 200 * time.Millisecond, TurnTimeout: 400 * time.Millisecond})
	tests := []struct {
		name string
		call func() error
		want time.Duration
	}{
		{"health", func() error { _, err := c.Health(context.Background()); return err }, 200 * time.Millisecond},
		{"channel", func() error { _, err := c.Channel(context.Background(), "c"); return err }, 200 * time.Millisecond},
		{"turn", func() error {
			_, err := c.RunTurn(context.Background(), "c", apiwire.Speaker{ID: "s"}, "hi")
			return err
		}, 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := tt.call()
			took := time.Since(start)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("err = %v, want ErrTimeout", err)
			}
			if took < tt.want || took > tt.want+2*time.Second {
				t.Errorf("took %v, want about %v", took, tt.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, "no answer within "+tt.want.String()) || !strings.Contains(msg, "systemctl status sandbox-host") {
				t.Errorf("message %q does not name the bound and the remedy", msg)
			}
			if strings.Count(msg, "sandbox-host:") != 1 {
				t.Errorf("message %q repeats its prefix", msg)
			}
		})
	}
}

// TestTurnsGetTheLongerBound: a slow turn within TurnTimeout succeeds while a
// status call as slow is cut at Timeout.
func TestTurnsGetTheLongerBound(t *testing.T) {
	c := serverWith(t, Options{Timeout: 100 * time.Millisecond, TurnTimeout: 5 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.Write([]byte(`{"ok":true,"text":"t","turnId":"x","status":"ok"}`))
	})
	if _, err := c.RunTurn(context.Background(), "c", apiwire.Speaker{ID: "s"}, "hi"); err != nil {
		t.Errorf("slow turn within TurnTimeout: %v", err)
	}
	if _, err := c.Health(context.Background()); !errors.Is(err, ErrTimeout) {
		t.Errorf("slow health: err = %v, want ErrTimeout", err)
	}
	// A caller's earlier deadline wins and is not reported as the client's own.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.RunTurn(ctx, "c", apiwire.Speaker{ID: "s"}, "hi"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Errorf("caller deadline: err = %v", err)
	}
}

func TestNoSocketFailsAtOnce(t *testing.T) {
	c := New(filepath.Join(t.TempDir(), "absent.sock"))
	start := time.Now()
	_, err := c.Health(context.Background())
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "sandbox-host: GET /v1/health: ") || strings.Count(msg, "sandbox-host:") != 1 ||
		strings.Contains(msg, "http://") || !strings.Contains(msg, "systemctl status sandbox-host") {
		t.Errorf("message %q", msg)
	}
}

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.TurnTimeout <= 600*time.Second {
		t.Errorf("turn timeout %v is not longer than the longest turn (600 s)", o.TurnTimeout)
	}
	if o.Timeout <= 0 || o.Timeout > time.Minute || o.ConnectTimeout <= 0 {
		t.Errorf("defaults %+v", o)
	}
}

// TestClosedWithoutAnswer: a socket that accepts and closes (systemd closing
// the socket of a host that failed too often) fails the call at once, with
// where to look.
func TestClosedWithoutAnswer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = New(sock).RunTurn(context.Background(), "c", apiwire.Speaker{ID: "s"}, "hi")
	if err == nil || !strings.Contains(err.Error(), "systemctl status sandbox-host") || errors.Is(err, ErrTimeout) {
		t.Errorf("err = %v", err)
	}
}

// TestCredentialsQuery: the project travels as an escaped query, never as
// part of the path; without one there is no query.
func TestCredentialsQuery(t *testing.T) {
	for _, tc := range []struct{ project, want string }{
		{"", "/v1/credentials"},
		{"demo", "/v1/credentials?project=demo"},
		{"a/b?c&d=e", "/v1/credentials?project=a%2Fb%3Fc%26d%3De"},
	} {
		var got string
		c := server(t, func(w http.ResponseWriter, r *http.Request) {
			got = r.RequestURI
			w.Write([]byte(`{"credentials":[{"name":"git","variable":"GIT_TOKEN","host":"h","port":443}]}`))
		})
		creds, err := c.Credentials(context.Background(), tc.project)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("project %q: request URI = %q, want %q", tc.project, got, tc.want)
		}
		if len(creds) != 1 || creds[0].Variable != "GIT_TOKEN" {
			t.Errorf("credentials %+v", creds)
		}
	}
}
