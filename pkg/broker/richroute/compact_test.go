package richroute

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

const (
	compactSecretText = "PAYLOAD-never-logged-7f3a" // in every request message and summary
	compactorKey      = "compactor-REAL-bearer-9q8w7e6r5t4y"
	compactTurnID     = "0123456789abcdef0123456789abcdef"
)

// compactBody is a valid request whose messages carry compactSecretText.
func compactBody(t *testing.T) []byte {
	t.Helper()
	prev := "previous " + compactSecretText
	b, err := json.Marshal(sessions.CompactRequest{
		Reason: sessions.ReasonThreshold, TokensBefore: 310_000, FirstKeptEntryID: "k1",
		MessagesToSummarize: []json.RawMessage{json.RawMessage(`{"role":"user","content":"` + compactSecretText + `"}`)},
		TurnPrefixMessages:  []json.RawMessage{}, KeptMessages: []json.RawMessage{},
		PreviousSummary: &prev, ReadFiles: []string{"/workspace/" + compactSecretText}, ModifiedFiles: []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const goodCompaction = `{"summary":"summary of ` + compactSecretText + `","firstKeptEntryId":"k1","tokensBefore":310000,"estimatedTokensAfter":9000,"details":{"engine":"spoofed","kept":2}}`

type oneCred map[string]string

func (c oneCred) Load(name string) (credential.Secret, error) {
	if v, ok := c[name]; ok {
		return credential.NewSecret(v), nil
	}
	return credential.Secret{}, credential.ErrMissing
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type compactHarness struct {
	c    *compactorRoutes
	logs *syncBuffer
	turn CompactTurn
}

func newCompactHarness(t *testing.T, cfg *policy.Compactor) *compactHarness {
	t.Helper()
	if cfg != nil {
		if cfg.Engine == "" {
			cfg.Engine = "test_engine"
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	creds := oneCred{"compactor": compactorKey}
	secrets := func() []credential.Secret { return []credential.Secret{credential.NewSecret(compactorKey)} }
	return &compactHarness{
		c:    newCompactor(cfg, creds, secrets, log, time.Now),
		logs: logs,
		turn: CompactTurn{ID: compactTurnID, Identity: policy.Identity{Channel: "room"}, Deadline: time.Now().Add(10 * time.Minute), Length: 10 * time.Minute},
	}
}

func compactRequest(route string, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, route, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+protocol.DummyAPIKey)
	r.Header.Set("Content-Type", "application/json")
	return r
}

// compact posts body and returns the status, the answer and the error.
func (h *compactHarness) compact(t *testing.T, body []byte) (int, sessions.CompactAnswer, error) {
	t.Helper()
	code, out, err := h.c.compact(context.Background(), compactRequest(RouteCompact, body), h.turn)
	var a sessions.CompactAnswer
	if err == nil {
		if jerr := json.Unmarshal(out, &a); jerr != nil {
			t.Fatalf("answer %q: %v", out, jerr)
		}
	}
	return code, a, err
}

func script(t *testing.T, body string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "compactor")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{p}
}

func execCompactor(t *testing.T, body string) *policy.Compactor {
	return &policy.Compactor{Kind: policy.CompactorExec, Argv: script(t, body)}
}

// checkLogs: the lines name the outcome, never a payload or credential.
func (h *compactHarness) checkLogs(t *testing.T, want ...string) {
	t.Helper()
	logs := h.logs.String()
	for _, w := range want {
		if !strings.Contains(logs, w) {
			t.Errorf("log lacks %q:\n%s", w, logs)
		}
	}
	for _, never := range []string{compactSecretText, compactorKey} {
		if strings.Contains(logs, never) {
			t.Errorf("log carries a payload or credential (%q):\n%s", never, logs)
		}
	}
}

func TestCompactExecOutcomes(t *testing.T) {
	cases := []struct {
		name     string
		script   string
		fallback string
	}{
		{"result", "cat >/dev/null; printf '%s' '" + goodCompaction + "'", ""},
		{"undefined: empty", "cat >/dev/null", sessions.FallbackUndefined},
		{"undefined: null", "cat >/dev/null; echo null", sessions.FallbackUndefined},
		{"error: exit 1", "cat >/dev/null; echo '" + goodCompaction + "'; exit 1", sessions.FallbackError},
		{"out of shape: other firstKeptEntryId", `cat >/dev/null; echo '{"summary":"s","firstKeptEntryId":"k0","tokensBefore":310000}'`, sessions.FallbackShape},
		{"out of shape: text", "cat >/dev/null; echo here is your summary", sessions.FallbackShape},
		{"out of shape: answer over its bound", "head -c 3000000 /dev/zero", sessions.FallbackShape},
		{"reflects a credential", `cat >/dev/null; echo '{"summary":"` + compactorKey + `","firstKeptEntryId":"k1","tokensBefore":310000}'`, FallbackReflected},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newCompactHarness(t, execCompactor(t, c.script))
			code, a, err := h.compact(t, compactBody(t))
			if err != nil || code != http.StatusOK {
				t.Fatalf("compact = %d, %v", code, err)
			}
			if a.Fallback != c.fallback {
				t.Fatalf("fallback = %q, want %q (answer %+v)", a.Fallback, c.fallback, a)
			}
			if c.fallback == "" {
				if a.Compaction == nil || a.Compaction.Engine() != "test_engine" || !strings.Contains(a.Compaction.Summary, "summary of") {
					t.Fatalf("compaction = %+v, want the result with details.engine test_engine", a.Compaction)
				}
				if string(a.Compaction.Details["kept"]) != "2" {
					t.Errorf("details lost the compactor's own fields: %s", a.Compaction.Details)
				}
				h.checkLogs(t, `"msg":"compaction by the host compactor"`, `"trigger":"threshold"`, `"engine":"test_engine"`, `"tokens_before":310000`, `"tokens_after_estimate":9000`)
				return
			}
			if a.Compaction != nil {
				t.Fatal("a fallback carries a compaction")
			}
			h.checkLogs(t, `"msg":"compaction falls back to the worker's summary"`, `"reason":"`+c.fallback+`"`, `"trigger":"threshold"`, `"engine":"test_engine"`)
		})
	}
}

func TestCompactExecGetsRequestOnStdin(t *testing.T) {
	out := filepath.Join(t.TempDir(), "stdin")
	h := newCompactHarness(t, execCompactor(t, "cat >"+out+"; env >"+out+".env; echo null"))
	if _, a, err := h.compact(t, compactBody(t)); err != nil || a.Fallback != sessions.FallbackUndefined {
		t.Fatalf("compact = %+v, %v", a, err)
	}
	got, _ := os.ReadFile(out)
	req, err := sessions.ParseCompactRequest(got)
	if err != nil || req.TokensBefore != 310_000 || req.FirstKeptEntryID != "k1" {
		t.Fatalf("stdin %q is not the request: %v", got, err)
	}
	env, _ := os.ReadFile(out + ".env")
	for _, w := range []string{"SANDBOX_CHANNEL=room", "SANDBOX_TURN_ID=" + compactTurnID} {
		if !strings.Contains(string(env), w) {
			t.Errorf("environment lacks %s", w)
		}
	}
	if strings.Contains(string(env), "HOME=") {
		t.Error("environment is not minimal")
	}
}

func TestCompactTimeout(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "alive")
	// The compactor and a child in its process group outlive the deadline
	// unless killed.
	cfg := execCompactor(t, "cat >/dev/null; (sleep 2; touch "+marker+") & sleep 30")
	cfg.TimeoutSeconds = 1
	h := newCompactHarness(t, cfg)
	start := time.Now()
	_, a, err := h.compact(t, compactBody(t))
	if err != nil || a.Fallback != sessions.FallbackTimeout {
		t.Fatalf("compact = %+v, %v; want fallback timeout", a, err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("timeout answered after %v", d)
	}
	h.checkLogs(t, `"reason":"timeout"`)
	time.Sleep(100 * time.Millisecond)
	if h.c.core.Busy() {
		t.Fatal("the compactor's slot is still taken after its group was killed")
	}
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a process of the compactor's group survived its deadline")
	}
}

func TestCompactTimeoutIsHalfTheTurnLeft(t *testing.T) {
	cfg := execCompactor(t, "cat >/dev/null; sleep 30")
	h := newCompactHarness(t, cfg) // default: min(120 s, 10 min / 3)
	h.turn.Deadline = time.Now().Add(3 * time.Second)
	start := time.Now()
	_, a, err := h.compact(t, compactBody(t))
	if err != nil || a.Fallback != sessions.FallbackTimeout {
		t.Fatalf("compact = %+v, %v", a, err)
	}
	if d := time.Since(start); d < time.Second || d > 4*time.Second {
		t.Fatalf("compactor ran %v, want about half of the 3 s left", d)
	}
	// With under 2 s left there is no time to give it.
	h.turn.Deadline = time.Now().Add(1500 * time.Millisecond)
	if _, a, err := h.compact(t, compactBody(t)); err != nil || a.Fallback != sessions.FallbackNoTime {
		t.Fatalf("compact = %+v, %v; want no-time", a, err)
	}
}

func TestCompactTimeoutRule(t *testing.T) {
	cases := []struct {
		seconds int
		turn    time.Duration
		want    time.Duration
	}{
		{0, 600 * time.Second, 120 * time.Second},
		{0, 300 * time.Second, 100 * time.Second},
		{0, 60 * time.Second, 20 * time.Second},
		{45, 600 * time.Second, 45 * time.Second},
	}
	for _, c := range cases {
		cfg := policy.Compactor{TimeoutSeconds: c.seconds}
		if got := cfg.Timeout(c.turn); got != c.want {
			t.Errorf("Timeout(%ds, turn %v) = %v, want %v", c.seconds, c.turn, got, c.want)
		}
	}
}

func TestCompactOversizedRequest(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	cfg := execCompactor(t, "touch "+marker+"; echo null")
	cfg.MaxRequestBytes = 1024
	h := newCompactHarness(t, cfg)
	body := compactBody(t)
	body = append(body[:len(body)-1], []byte(`,"customInstructions":"`+strings.Repeat("x", 2000)+`"}`)...)
	_, a, err := h.compact(t, body)
	if err != nil || a.Fallback != sessions.FallbackTooLarge {
		t.Fatalf("compact = %+v, %v; want too-large", a, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the compactor ran for a request over its bound")
	}
	h.checkLogs(t, `"reason":"too-large"`)
	// The budget is untouched: three more requests reach the compactor.
	for i := 0; i < sessions.MaxHostCompactions; i++ {
		if _, a, _ := h.compact(t, compactBody(t)); a.Fallback != sessions.FallbackUndefined {
			t.Fatalf("request %d: %+v", i+1, a)
		}
	}
}

func TestCompactBudget(t *testing.T) {
	h := newCompactHarness(t, execCompactor(t, "cat >/dev/null; printf '%s' '"+goodCompaction+"'"))
	for i := 0; i < sessions.MaxHostCompactions; i++ {
		if _, a, err := h.compact(t, compactBody(t)); err != nil || a.Compaction == nil {
			t.Fatalf("request %d = %+v, %v", i+1, a, err)
		}
	}
	if _, a, err := h.compact(t, compactBody(t)); err != nil || a.Fallback != sessions.FallbackBudget {
		t.Fatalf("request %d = %+v, %v; want budget", sessions.MaxHostCompactions+1, a, err)
	}
	h.checkLogs(t, `"reason":"budget"`)
	h.turn.ID = "fedcba9876543210fedcba9876543210" // the next turn has its own budget
	if _, a, err := h.compact(t, compactBody(t)); err != nil || a.Compaction == nil {
		t.Fatalf("next turn = %+v, %v", a, err)
	}
}

func TestCompactBusy(t *testing.T) {
	cfg := execCompactor(t, "cat >/dev/null; sleep 2; echo null")
	h := newCompactHarness(t, cfg)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.compact(t, compactBody(t))
	}()
	deadline := time.Now().Add(time.Second)
	for !h.c.core.Busy() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if _, a, err := h.compact(t, compactBody(t)); err != nil || a.Fallback != sessions.FallbackBusy {
		t.Fatalf("concurrent request = %+v, %v; want busy", a, err)
	}
	wg.Wait()
	h.checkLogs(t, `"reason":"busy"`)
}

func TestCompactRefusals(t *testing.T) {
	h := newCompactHarness(t, execCompactor(t, "echo null"))
	for name, body := range map[string]string{
		"not json":        "{",
		"unknown reason":  `{"reason":"whim","tokensBefore":1,"firstKeptEntryId":"k"}`,
		"unknown field":   `{"reason":"threshold","tokensBefore":1,"firstKeptEntryId":"k","x":1}`,
		"message string":  `{"reason":"threshold","tokensBefore":1,"firstKeptEntryId":"k","keptMessages":["x"]}`,
		"negative tokens": `{"reason":"threshold","tokensBefore":-5,"firstKeptEntryId":"k"}`,
	} {
		if _, _, err := h.compact(t, []byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !errors.Is(err, envelope.ErrRefused) {
			t.Errorf("%s: %v, want an envelope.ErrRefused (400)", name, err)
		}
	}
	r := compactRequest(RouteCompact, compactBody(t))
	r.Header.Set("Authorization", "Bearer real-looking")
	if _, _, err := h.c.compact(context.Background(), r, h.turn); err == nil {
		t.Error("a request without the dummy key was accepted")
	}
	none := newCompactHarness(t, nil)
	if _, _, err := none.compact(t, compactBody(t)); err == nil {
		t.Error("POST /compact without a compactor configured was accepted")
	} else if !errors.Is(err, envelope.ErrNotFound) {
		t.Errorf("without a compactor: %v, want an envelope.ErrNotFound (404)", err)
	}
}

func TestCompactHTTPOutcomes(t *testing.T) {
	var mu sync.Mutex
	var seen http.Header
	var seenBody []byte
	handler := func(f func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			seen, seenBody = r.Header.Clone(), b
			mu.Unlock()
			f(w, r)
		}
	}
	cases := []struct {
		name     string
		h        func(w http.ResponseWriter, r *http.Request)
		fallback string
	}{
		{"result", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, goodCompaction) }, ""},
		{"undefined: empty body", func(w http.ResponseWriter, r *http.Request) {}, sessions.FallbackUndefined},
		{"undefined: null", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "null") }, sessions.FallbackUndefined},
		{"error: 500", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
			io.WriteString(w, goodCompaction)
		}, sessions.FallbackError},
		{"error: redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		}, sessions.FallbackError},
		{"out of shape", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"summary":42}`) }, sessions.FallbackShape},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}, sessions.FallbackTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(handler(c.h))
			defer srv.Close()
			h := newCompactHarness(t, &policy.Compactor{Kind: policy.CompactorHTTP, URL: srv.URL, AllowHTTP: true, Credential: "compactor", TimeoutSeconds: 1})
			_, a, err := h.compact(t, compactBody(t))
			if err != nil || a.Fallback != c.fallback {
				t.Fatalf("compact = %+v, %v; want fallback %q", a, err, c.fallback)
			}
			if c.fallback == "" {
				if a.Compaction.Engine() != "test_engine" {
					t.Fatalf("engine = %q", a.Compaction.Engine())
				}
				mu.Lock()
				defer mu.Unlock()
				if got := seen.Get("Authorization"); got != "Bearer "+compactorKey {
					t.Errorf("Authorization = %q, want the compactor's bearer", got)
				}
				if got := seen.Get("X-Sandbox-Channel"); got != "room" {
					t.Errorf("X-Sandbox-Channel = %q", got)
				}
				if _, err := sessions.ParseCompactRequest(seenBody); err != nil {
					t.Errorf("the compactor got %q: %v", seenBody, err)
				}
				return
			}
			h.checkLogs(t, `"reason":"`+c.fallback+`"`)
		})
	}
}

func TestCompactReport(t *testing.T) {
	h := newCompactHarness(t, nil) // reports need no compactor
	rep := `{"event":"compacted","trigger":"ceiling","engine":"worker","tokensBefore":510000,"tokensAfter":21000,"contextAfter":33000,"nextCompactionAt":300000,"fallback":"timeout"}`
	for i := 0; i < sessions.MaxReports; i++ {
		code, _, err := h.c.report(compactRequest(RouteCompactReport, []byte(rep)), h.turn)
		if err != nil || code != http.StatusOK {
			t.Fatalf("report %d = %d, %v", i+1, code, err)
		}
	}
	_, _, err := h.c.report(compactRequest(RouteCompactReport, []byte(rep)), h.turn)
	if !errors.Is(err, envelope.ErrCallLimit) {
		t.Fatalf("report %d: %v, want an envelope.ErrCallLimit (429)", sessions.MaxReports+1, err)
	}
	h.checkLogs(t, `"msg":"conversation compacted (worker report)"`, `"trigger":"ceiling"`, `"engine":"worker"`,
		`"tokens_before":510000`, `"tokens_after":21000`, `"context_after":33000`, `"next_compaction_at":300000`, `"fallback":"timeout"`)
	if n := strings.Count(h.logs.String(), "conversation compacted"); n != sessions.MaxReports {
		t.Fatalf("%d report lines, want %d", n, sessions.MaxReports)
	}
	failed := strings.Replace(rep, `"compacted"`, `"failed"`, 1)
	h.turn.ID = "fedcba9876543210fedcba9876543210"
	if _, _, err := h.c.report(compactRequest(RouteCompactReport, []byte(failed)), h.turn); err != nil {
		t.Fatal(err)
	}
	h.checkLogs(t, `"msg":"compaction failed (worker report)"`)
	for name, body := range map[string]string{
		"summary smuggled": strings.Replace(rep, `}`, `,"summary":"`+compactSecretText+`"}`, 1),
		"engine text":      strings.Replace(rep, `"worker"`, `"`+compactSecretText+` x"`, 1),
		"too large":        `{"event":"compacted","pad":"` + strings.Repeat("x", MaxReportBytes) + `"}`,
	} {
		if _, _, err := h.c.report(compactRequest(RouteCompactReport, []byte(body)), h.turn); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	h.checkLogs(t)
}
