package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Distinctive values so a leak or a mix-up is easy to see.
const (
	rtCredential = "sk-ROUNDTRIP-real-credential-0123456789"
	rtMemoryKey  = "roundtrip"
	rtMemoryText = "stored through the real broker"
	rtFinalText  = "round trip complete"
)

// TestIntegrationTurnRoundTrip runs one turn end to end without systemd: the
// host (real pkg/container driver, real dockerd, the real worker image) starts
// the turn; the "unit starter" runs a real pkg/broker in-process on
// runRoot/<turn>/broker.sock instead of a socket unit; the broker forwards the
// worker's two model calls to a fake Chat Completions server on loopback. The
// first answer is a memory_set tool call, the second the final text.
// Enable with SANDBOX_IT_DOCKER=unix:///path/docker.sock (test/integration.sh
// loads roundtable-sandbox-worker:latest; SANDBOX_IT_IMAGE overrides it).
func TestIntegrationTurnRoundTrip(t *testing.T) {
	dockerHost := os.Getenv("SANDBOX_IT_DOCKER")
	if dockerHost == "" {
		t.Skip("integration test: set SANDBOX_IT_DOCKER=unix:///path/docker.sock to run a turn through a real dockerd, worker image and broker")
	}
	image := os.Getenv("SANDBOX_IT_IMAGE")
	if v, set := os.LookupEnv("SANDBOX_IT_WORKER_IMAGE"); image == "" && set {
		if v == "" {
			t.Skip("integration test: test/integration.sh could not load the worker image (make image-archive failed); set SANDBOX_IT_IMAGE to an image already in the daemon")
		}
		image = v
	}
	if image == "" {
		image = layout.DefaultImage
	}
	// The host refuses to give containers uid 0: as root, use a stand-in
	// service user, as TestIntegrationDockerTurns does.
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534
	}

	model := newRoundTripModel(t)

	dir, err := os.MkdirTemp("/tmp", "sbrt") // short: the socket path must stay within 100
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	y := fmt.Sprintf(`model:
  url: %s/v1/chat/completions
  name: rt-model
  allowInsecureLoopbackHTTP: true
credentials:
  default: model
installation: it-roundtrip
turnDeadlineSeconds: 60
image: %s
`, model.srv.URL, image)
	p := filepath.Join(dir, "sandbox.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RunRoot, cfg.WorkspaceRoot, cfg.PolicyDir = filepath.Join(dir, "run"), filepath.Join(dir, "ws"), filepath.Join(dir, "pol")
	cfg.StateFile = filepath.Join(dir, "state", "channels.json")
	if err := cfg.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	const channel = "it:roundtrip"
	ws, err := layout.WorkspaceDir(cfg.WorkspaceRoot, channel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, uid, gid); err != nil {
		t.Fatalf("chown workspace to %d:%d (run as root or as that uid): %v", uid, gid, err)
	}
	// The credentials directory as systemd's LoadCredential=sandbox:<dir>
	// presents it: each file carries the load-id prefix.
	creds := filepath.Join(dir, "creds")
	os.Mkdir(creds, 0o700)
	if err := os.WriteFile(filepath.Join(creds, layout.CredentialPrefix+"model"), []byte(rtCredential+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	d, err := container.New(dockerHost)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if ok, err := d.ImagePresent(context.Background(), image); err != nil || !ok {
		t.Fatalf("image %s not in the daemon at %s (test/integration.sh loads dist/worker-image.tar): present=%v err=%v", image, dockerHost, ok, err)
	}
	st, _, err := host.LoadState(cfg.StateFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	units := &inProcessBrokers{t: t, runRoot: cfg.RunRoot, policyDir: cfg.PolicyDir, credentials: creds, uid: uid, gid: gid,
		running: map[string]*runningBroker{}}
	h, err := host.New(host.Options{Config: cfg, State: st, Containers: dockerEngine{d}, Units: units,
		UID: uid, GID: gid, PeerGroups: func(int) []int { return nil }})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reply, turnID, err := h.RunTurn(ctx, host.TurnInput{Channel: channel, SpeakerID: "speaker-1", SpeakerName: "Guest", Text: "remember this"})
	if err != nil {
		t.Fatalf("RunTurn: %v (model calls: %d, broker errors: %v)", err, model.count(), units.errors())
	}
	if !reply.OK || reply.Text != rtFinalText {
		t.Errorf("reply = %+v, want ok with text %q", reply, rtFinalText)
	}

	// What reached the model: two calls, the real credential, never the dummy key.
	calls := model.snapshot()
	if len(calls) != 2 {
		t.Fatalf("model calls = %d, want 2 (memory_set tool call, then the final text)", len(calls))
	}
	for i, c := range calls {
		if got, want := c.header.Get("Authorization"), "Bearer "+rtCredential; got != want {
			t.Errorf("call %d: Authorization = %q, want the test credential", i, got)
		}
		for name, vals := range c.header {
			for _, v := range vals {
				if strings.Contains(v, protocol.DummyAPIKey) {
					t.Errorf("call %d: header %s carries the dummy key", i, name)
				}
			}
		}
		if strings.Contains(string(c.body), rtCredential) || strings.Contains(string(c.body), protocol.DummyAPIKey) {
			t.Errorf("call %d: body carries a key", i)
		}
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.Unmarshal(c.body, &req); err != nil || req.Model != "rt-model" || req.Stream {
			t.Errorf("call %d: body model=%q stream=%v err=%v, want model rt-model, no streaming", i, req.Model, req.Stream, err)
		}
	}
	if !strings.Contains(string(calls[1].body), `"tool_call_id":"call-1"`) {
		t.Errorf("second model call does not carry the memory_set tool result")
	}

	// Cleanup: container gone, broker stopped, turn directory and policy gone.
	if left, err := d.List(context.Background(), "it-roundtrip"); err != nil || len(left) != 0 {
		t.Errorf("containers left: %v, %v", left, err)
	}
	if got := units.stoppedTurns(); len(got) != 1 || got[0] != turnID {
		t.Errorf("StopBroker calls = %v, want [%s]", got, turnID)
	}
	if errs := units.errors(); len(errs) != 0 {
		t.Errorf("broker errors: %v", errs)
	}
	for _, dd := range []string{cfg.RunRoot, cfg.PolicyDir} {
		if e, _ := os.ReadDir(dd); len(e) != 0 {
			t.Errorf("%s not empty after the turn: %v", dd, e)
		}
	}

	// The worker's memory_set landed in the channel workspace.
	data, err := os.ReadFile(filepath.Join(ws, "memory.json"))
	if err != nil {
		t.Fatalf("memory.json: %v", err)
	}
	if !strings.Contains(string(data), `"`+rtMemoryKey+`"`) || !strings.Contains(string(data), rtMemoryText) {
		t.Errorf("memory.json = %s, want key %q with text %q", data, rtMemoryKey, rtMemoryText)
	}
}

// roundTripModel is a fake Chat Completions upstream that records what
// reached it: first a memory_set tool call, then the final text.
type roundTripModel struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []modelCall
}

type modelCall struct {
	header http.Header
	body   []byte
}

func newRoundTripModel(t *testing.T) *roundTripModel {
	m := &roundTripModel{}
	args, _ := json.Marshal(map[string]string{"scope": "channel", "key": rtMemoryKey, "text": rtMemoryText})
	first, _ := json.Marshal(map[string]any{
		"id": "rt-1", "object": "chat.completion", "model": "rt-model",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
			"role": "assistant", "content": nil,
			"tool_calls": []any{map[string]any{"id": "call-1", "type": "function",
				"function": map[string]any{"name": "memory_set", "arguments": string(args)}}},
		}}},
	})
	final, _ := json.Marshal(map[string]any{
		"id": "rt-2", "object": "chat.completion", "model": "rt-model",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": rtFinalText}}},
	})
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		m.mu.Lock()
		m.calls = append(m.calls, modelCall{header: r.Header.Clone(), body: body})
		n := len(m.calls)
		m.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected request", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.Write(first)
			return
		}
		w.Write(final)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *roundTripModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.calls)
}

func (m *roundTripModel) snapshot() []modelCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelCall(nil), m.calls...)
}

// inProcessBrokers stands in for the systemd socket units: StartBroker
// listens on runRoot/<turn>/broker.sock and serves the turn's policy with a
// real pkg/broker; StopBroker ends it, as stopping the units would.
type inProcessBrokers struct {
	t                               *testing.T
	runRoot, policyDir, credentials string
	uid, gid                        int
	mu                              sync.Mutex
	running                         map[string]*runningBroker
	stopped                         []string
	errs                            []error
}

type runningBroker struct {
	cancel context.CancelFunc
	done   chan error
}

func (u *inProcessBrokers) StartBroker(_ context.Context, turnID string) error {
	dir, err := layout.TurnDir(u.runRoot, turnID)
	if err != nil {
		return err
	}
	sock, err := layout.BrokerSocket(u.runRoot, turnID)
	if err != nil {
		return err
	}
	// In production the host runs as the containers' uid, so the turn
	// directory it made is theirs; here the host code ran as root.
	if err := os.Chown(dir, u.uid, u.gid); err != nil {
		return fmt.Errorf("chown turn directory: %w", err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	// What the socket unit's SocketUser=/SocketMode=0666 give (the guest
	// uid reaches it through its 0711 turn directory).
	if err := os.Chown(sock, u.uid, u.gid); err != nil {
		ln.Close()
		return err
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return err
	}
	// The unit outlives the start call: not the caller's context.
	ctx, cancel := context.WithCancel(context.Background())
	rb := &runningBroker{cancel: cancel, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(testWriter{u.t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() {
		rb.done <- broker.Run(ctx, broker.RunOptions{
			TurnID: turnID, PolicyDir: u.policyDir,
			CredentialsDir: u.credentials, CredentialPrefix: layout.CredentialPrefix,
			Listener: ln, Logger: log,
		})
	}()
	u.mu.Lock()
	u.running[turnID] = rb
	u.mu.Unlock()
	return nil
}

// StartBrokerService: the in-process broker already serves once StartBroker returns.
func (u *inProcessBrokers) StartBrokerService(context.Context, string) error { return nil }

func (u *inProcessBrokers) StopBroker(ctx context.Context, turnID string) error {
	u.mu.Lock()
	u.stopped = append(u.stopped, turnID)
	rb := u.running[turnID]
	delete(u.running, turnID)
	u.mu.Unlock()
	if rb == nil {
		return nil // as stopping a unit that never started
	}
	rb.cancel()
	select {
	case err := <-rb.done:
		if err != nil {
			u.mu.Lock()
			u.errs = append(u.errs, err)
			u.mu.Unlock()
		}
		return nil
	case <-ctx.Done():
		return errors.New("broker did not stop in time")
	}
}

func (u *inProcessBrokers) stoppedTurns() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.stopped...)
}

func (u *inProcessBrokers) errors() []error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]error(nil), u.errs...)
}

// testWriter sends the broker's log lines (no payloads, no credentials) to
// the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
