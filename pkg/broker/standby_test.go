package broker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// standbyRun starts Run for a standby turn whose policy file is a
// placeholder expiring after expiry.
type standbyRun struct {
	dir, sock, policyPath string
	pol                   *policy.Policy
	up                    *fakeUpstream
	done                  chan error
	mu                    sync.Mutex
	states                []string
	started               time.Time
	logs                  *syncBuffer
}

func startStandby(t *testing.T, expiry time.Duration, mutate func(*policy.Pending)) *standbyRun {
	t.Helper()
	s := &standbyRun{dir: t.TempDir(), done: make(chan error, 1), logs: &syncBuffer{}}
	s.up = newFakeUpstream(t, okAnswer)
	if err := os.WriteFile(filepath.Join(s.dir, "model-key"), []byte(realModelKey), 0o600); err != nil {
		t.Fatal(err)
	}
	s.pol = basePolicy(s.up.srv.URL, s.up.srv.URL, "/bin/true")
	s.pol.DeadlineUnixMs = time.Now().Add(time.Minute).UnixMilli()
	s.policyPath = filepath.Join(s.dir, s.pol.TurnID+".json")
	p := &policy.Pending{Version: policy.Version, TurnID: s.pol.TurnID, Pending: true, DeadlineUnixMs: time.Now().Add(expiry).UnixMilli()}
	if mutate != nil {
		mutate(p)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.policyPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s.sock = filepath.Join(s.dir, "b.sock")
	s.started = time.Now()
	go func() {
		s.done <- Run(context.Background(), RunOptions{
			TurnID: s.pol.TurnID, PolicyDir: s.dir, CredentialsDir: s.dir, ListenPath: s.sock,
			Logger: slog.New(slog.NewJSONHandler(s.logs, nil)),
			Notify: func(st string) { s.mu.Lock(); s.states = append(s.states, st); s.mu.Unlock() },
		})
	}()
	return s
}

func (s *standbyRun) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.states) > 0 && s.states[0] == "READY=1"
}

func (s *standbyRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

func (s *standbyRun) bind(t *testing.T) {
	t.Helper()
	data, err := s.pol.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	tmp := s.policyPath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.policyPath); err != nil { // as the host: atomically
		t.Fatal(err)
	}
}

func (s *standbyRun) post(path, body string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.sock)
		},
	}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "http://broker"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), nil
}

// TestStandbyServesOnceBound: a standby broker reports ready before its
// policy exists, and its first request, after the host wrote the policy, is
// served as any turn's (same routes, same refusals).
func TestStandbyServesOnceBound(t *testing.T) {
	s := startStandby(t, time.Minute, nil)
	waitUntil(t, "standby ready", s.ready)
	if s.up.hits.Load() != 0 {
		t.Fatal("upstream called before any request")
	}
	s.bind(t)
	code, body, err := s.post("/model", goodModel)
	if err != nil || code != 200 {
		t.Fatalf("first call after binding: %d %s %v", code, body, err)
	}
	// Refusals are the ordinary ones.
	if code, _, err := s.post("/tools/nope", `{}`); err != nil || code != 404 {
		t.Errorf("unknown tool: %d %v, want 404", code, err)
	}
	if s.up.hits.Load() != 1 {
		t.Errorf("upstream hits %d, want 1", s.up.hits.Load())
	}
}

// TestStandbyExpires: no turn within the expiry: Run returns nil on its
// own, having served nothing, and the socket no longer accepts.
func TestStandbyExpires(t *testing.T) {
	s := startStandby(t, 400*time.Millisecond, nil)
	if err := s.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(s.started); d < 300*time.Millisecond || d > 4*time.Second {
		t.Errorf("Run lasted %v, want about the 400 ms expiry", d)
	}
	s.mu.Lock()
	states := strings.Join(s.states, ",")
	s.mu.Unlock()
	if states != "READY=1,STOPPING=1" {
		t.Errorf("notifications %q", states)
	}
	if _, err := net.Dial("unix", s.sock); err == nil {
		t.Error("socket still accepts after the expiry")
	}
}

// TestStandbyRefusesUnboundConnection: a connection while the placeholder
// is still there gets nothing; Run fails closed, saying the standby is not
// bound yet (not a decode error of the placeholder), and calls no upstream.
func TestStandbyRefusesUnboundConnection(t *testing.T) {
	s := startStandby(t, time.Minute, nil)
	waitUntil(t, "standby ready", s.ready)
	code, _, err := s.post("/model", goodModel)
	if err == nil {
		t.Errorf("request before binding answered %d", code)
	}
	err = s.wait(t)
	if err == nil || !errors.Is(err, policy.ErrNotBound) || !strings.Contains(err.Error(), "not bound yet") {
		t.Errorf("Run: %v, want the not-bound-yet refusal (policy.ErrNotBound)", err)
	}
	if err != nil && (errors.Is(err, policy.ErrInvalid) || strings.Contains(err.Error(), "json") || strings.Contains(err.Error(), "pending")) {
		t.Errorf("Run: %v: the placeholder was decoded as a policy", err)
	}
	if logs := s.logs.String(); !strings.Contains(logs, "not bound yet") || !strings.Contains(logs, `"turn":"`+s.pol.TurnID+`"`) {
		t.Errorf("no log line says the standby is not bound yet:\n%s", logs)
	}
	if s.up.hits.Load() != 0 {
		t.Error("upstream called for an unbound standby")
	}
}

// TestStandbyPlaceholderRefused: a placeholder of another turn, one already
// expired, or one carrying anything more never starts a broker.
func TestStandbyPlaceholderRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*policy.Pending)
	}{
		{"another turn", func(p *policy.Pending) { p.TurnID = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee" }},
		{"expired", func(p *policy.Pending) { p.DeadlineUnixMs = time.Now().Add(-time.Second).UnixMilli() }},
		{"bad version", func(p *policy.Pending) { p.Version = 99 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := startStandby(t, time.Minute, c.mutate)
			if err := s.wait(t); err == nil {
				t.Error("Run accepted the placeholder")
			}
			if s.ready() {
				t.Error("READY sent for a refused placeholder")
			}
		})
	}
}
