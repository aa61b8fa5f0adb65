package broker

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// logRecords parses the broker's JSON log lines.
func (h *harness) logRecords() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(h.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// waitCallLog waits for the log line of the one call and returns it.
func (h *harness) waitCallLog(t *testing.T) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range h.logRecords() {
			if _, ok := m["route"]; ok {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no call log line; logs:\n%s", h.logs.String())
	return nil
}

// waitUntil polls cond for up to 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientGoneIsNotBlamedOnUpstream: when the worker closes its connection
// while the upstream is still working (its container killed, the host
// stopped), the broker cancels the upstream call and logs the call as
// abandoned by the client with status 499, not as an upstream timeout.
func TestClientGoneIsNotBlamedOnUpstream(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"x"}}}`
	tests := []struct {
		name, path, body string
		slow             func(h *harness) (started func() bool, cancelled func() bool)
	}{
		{"model", "/model", goodModel, func(h *harness) (func() bool, func() bool) {
			gone := make(chan struct{})
			h.model.set(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
					close(gone)
				case <-time.After(10 * time.Second):
				}
			})
			return func() bool { return h.model.hits.Load() == 1 }, closed(gone)
		}},
		{"http tool", "/tools/web", `{"q":"x"}`, func(h *harness) (func() bool, func() bool) {
			gone := make(chan struct{})
			h.web.set(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
					close(gone)
				case <-time.After(10 * time.Second):
				}
			})
			return func() bool { return h.web.hits.Load() == 1 }, closed(gone)
		}},
		{"mcp", "/mcp/docs", call, func(h *harness) (func() bool, func() bool) {
			h.mcp.mu.Lock()
			h.mcp.release = make(chan struct{}) // never released: only ctx ends it
			h.mcp.mu.Unlock()
			return func() bool { return h.mcp.calls.Load() == 1 }, func() bool { return true }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(p *policy.Policy) { p.Limits.UpstreamTimeoutMs = 10_000 })
			started, cancelled := tt.slow(h)
			c, err := net.Dial("unix", h.sock)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, rawPost(tt.path, tt.body, nil))
			waitUntil(t, "the upstream call", started)
			start := time.Now()
			c.Close() // the worker goes away mid-call
			m := h.waitCallLog(t)
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the broker noticed after %v", d)
			}
			reason, _ := m["reason"].(string)
			if m["msg"] != "call abandoned by the client" || m["status"] != float64(envelope.StatusClientClosed) ||
				!strings.Contains(reason, "client went away mid-call") || strings.Contains(reason, "upstream") {
				t.Errorf("log line %v, want the call abandoned by the client with status 499", m)
			}
			waitUntil(t, "the upstream call to be cancelled", cancelled)
		})
	}
}

// TestInterruptionsNamed: a stop of the broker mid-call and an upstream that
// is too slow are logged as what they are.
func TestInterruptionsNamed(t *testing.T) {
	t.Run("broker stopping", func(t *testing.T) {
		h := newHarness(t, nil)
		h.model.set(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		})
		c, err := net.Dial("unix", h.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, rawPost("/model", goodModel, nil))
		waitUntil(t, "the upstream call", func() bool { return h.model.hits.Load() == 1 })
		h.cancel() // what SIGTERM does
		m := h.waitCallLog(t)
		if reason, _ := m["reason"].(string); m["status"] != float64(503) || !strings.Contains(reason, "broker stopping mid-call") {
			t.Errorf("log line %v, want the broker stopping with 503", m)
		}
	})
	t.Run("upstream timeout", func(t *testing.T) {
		h := newHarness(t, func(p *policy.Policy) { p.Limits.UpstreamTimeoutMs = 200 })
		h.model.set(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		})
		if code, _, _ := h.do("/model", goodModel); code != 504 {
			t.Errorf("status %d, want 504", code)
		}
		m := h.waitCallLog(t)
		if reason, _ := m["reason"].(string); m["status"] != float64(504) || !strings.Contains(reason, "upstream deadline") {
			t.Errorf("log line %v, want the upstream deadline with 504", m)
		}
	})
}

func closed(ch chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// TestNoHandlerAfterStop: a request that reaches the handler once Serve is
// stopping (a connection had read it just before the close) runs nothing:
// 503, the exec tool never starts. Before, it ran unawaited after Serve
// returned and its start raced Serve's wait for the handlers.
func TestNoHandlerAfterStop(t *testing.T) {
	h := newHarness(t, nil)
	h.cancel()
	if err := <-h.done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	h.done <- nil // for the cleanup
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/tools/echo", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
	req.Header.Set("Content-Type", "application/json")
	h.broker.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Connection") != "close" {
		t.Errorf("call after stop: %d %q, want 503 with Connection close", rec.Code, rec.Header().Get("Connection"))
	}
	if n := h.upstreamSeen(); n != 0 {
		t.Errorf("the tool ran %d times after the broker stopped", n)
	}
}
