package host

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
)

// queuedSignal makes q report each ticket that starts waiting, so a test
// waits on that instead of polling.
func queuedSignal(q *admission.Queue) <-chan string {
	ch := make(chan string, 64)
	q.OnQueued(func(channel string) { ch <- channel })
	return ch
}

func TestStatusOfBusy(t *testing.T) {
	if status, reason := statusOf(ErrBusy); status != http.StatusTooManyRequests || !strings.Contains(reason, "busy") {
		t.Errorf("statusOf(ErrBusy) = %d %q, want 429 saying busy", status, reason)
	}
}

func TestAPIBusy429WhenNoSlotInTime(t *testing.T) {
	var offset atomic.Int64 // the test's clock runs ahead of the real one
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	r := newRig(t, "queue:\n  globalConcurrency: 1\n  maxWaitSeconds: 1\nstandby:\n  enabled: false\n", func(o *Options) { o.Now = now })
	must(t, r.h.state.SetMode("a", ModeOn))
	must(t, r.h.state.SetMode("b", ModeOn))
	release := make(chan struct{})
	release2 := make(chan struct{})
	running := make(chan string, 4)
	var runs atomic.Int32
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		gate := release
		if runs.Add(1) > 1 {
			gate = release2
		}
		running <- spec.Name
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return okRun(ctx, spec, stdin)
	}
	hc, _ := serve(t, r)
	body := `{"speaker":{"id":"s"},"text":"x"}`
	first := make(chan int, 1)
	go func() { first <- post(hc, "/v1/channels/a/turns", body) }()
	<-running
	created := len(r.docker.Created)
	start := time.Now()
	status, resp := call(t, hc, "POST", "/v1/channels/b/turns", body)
	if reason, _ := resp["error"].(string); status != http.StatusTooManyRequests || !strings.Contains(reason, "busy") {
		t.Errorf("turn with no slot in time: %d %v, want 429 saying busy", status, resp)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal took %v, want about queue.maxWaitSeconds (1 s)", took)
	}
	if n := len(r.docker.Created); n != created {
		t.Errorf("the refused turn created %d containers", n-created)
	}
	if w, _ := r.h.queue.Totals(); w != 0 {
		t.Errorf("%d tickets waiting after the refusal", w)
	}

	// The next turn queues behind a; 100 s pass on the host's clock before
	// it runs: its deadline starts then, not when it arrived.
	queued := queuedSignal(r.h.queue)
	second := make(chan int, 1)
	go func() { second <- post(hc, "/v1/channels/b/turns", body) }()
	<-queued
	offset.Store(int64(100 * time.Second))
	admitted := now()
	close(release)
	if s := <-first; s != http.StatusOK {
		t.Errorf("the running turn: %d, want 200", s)
	}
	<-running
	var deadline int64
	for _, a := range r.h.ActiveTurns() {
		deadline = a.DeadlineUnixMs
	}
	if want := admitted.Add(r.cfg.TurnDeadline()).UnixMilli(); deadline < want {
		t.Errorf("deadline %d ms, want at least %d (turnDeadlineSeconds from when it ran)", deadline, want)
	}
	close(release2)
	if s := <-second; s != http.StatusOK {
		t.Errorf("the queued turn: %d, want 200", s)
	}
}

// A worker whose broker was never started (systemd timed the
// socket-activated service out) fails with "broker call failed"; the
// answer and the log line say which unit and which limit instead of a
// generic turn failure, and systemd is asked before the cleanup stops the
// units.
func TestTurnFailedByItsUnitSaysWhichAndWhy(t *testing.T) {
	tests := []struct {
		name       string
		why        *unitctl.UnitError
		wantStatus int
		wantReason string
	}{
		{"the broker's start timed out", &unitctl.UnitError{Op: "start", Unit: "sandbox-broker@x.service", Failed: "sandbox-broker@x.service",
			Result: "timeout", Limit: "TimeoutStartSec=10s"},
			http.StatusServiceUnavailable, "turn failed: broker unit failed to start (timeout, TimeoutStartSec=10s)"},
		{"the credential copy exited non-zero", &unitctl.UnitError{Op: "start", Unit: "sandbox-credset@x.service", Failed: "sandbox-credset@x.service",
			Result: "exit-code", Limit: "its process exit code"},
			http.StatusInternalServerError, "turn failed: credential unit failed to start (exit-code, its process exit code)"},
		{"systemd knows of no failure", nil, http.StatusInternalServerError, "turn failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs lockedBuffer
			r := newRig(t, "standby:\n  enabled: false\n", func(o *Options) {
				o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			must(t, r.h.state.SetMode("c", ModeOn))
			r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
				return RunResult{ExitCode: 1, Stdout: []byte(`{"ok":false,"text":"","cause":"broker call failed"}`)}, nil
			}
			if tt.why != nil {
				r.units.Explain = func(string) error { return tt.why }
			}
			hc, _ := serve(t, r)
			status, resp := call(t, hc, "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"x"}`)
			if reason, _ := resp["error"].(string); status != tt.wantStatus || reason != tt.wantReason {
				t.Errorf("answer %d %q, want %d %q", status, reason, tt.wantStatus, tt.wantReason)
			}
			r.units.Mu.Lock()
			explained := slices.Clone(r.units.Explained)
			r.units.Mu.Unlock()
			if len(explained) != 1 || !explained[0] {
				t.Errorf("ExplainBroker calls (units still active?) = %v, want one, before the units were stopped", explained)
			}
			if tt.why != nil {
				line := logs.String()
				for _, w := range []string{"failed_unit=" + tt.why.Failed, "unit_result=" + tt.why.Result, "worker_cause=\"broker call failed\""} {
					if !strings.Contains(line, w) {
						t.Errorf("log lacks %s:\n%s", w, line)
					}
				}
			}
			r.assertClean(t)
		})
	}
}

// GET /v1/channels/{channel} shows the admission in force; the list does
// not repeat it per channel.
func TestChannelStatusShowsAdmission(t *testing.T) {
	r := newRig(t, "queue:\n  maxWaitSeconds: 42\n", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	hc, _ := serve(t, r)
	status, body := call(t, hc, "GET", "/v1/channels/c", "")
	adm, _ := body["admission"].(map[string]any)
	if status != http.StatusOK || adm == nil {
		t.Fatalf("GET channel: %d %v, want 200 with admission", status, body)
	}
	want := map[string]any{"globalConcurrency": float64(512), "derived": true, "maxWaitSeconds": float64(42), "running": float64(0), "waiting": float64(0)}
	for k, v := range want {
		if adm[k] != v {
			t.Errorf("admission.%s = %v, want %v", k, adm[k], v)
		}
	}
	if why, _ := adm["why"].(string); !strings.Contains(why, "per CPU") {
		t.Errorf("admission.why = %q, want how it was derived", why)
	}
	_, list := call(t, hc, "GET", "/v1/channels", "")
	for _, c := range list["channels"].([]any) {
		if _, ok := c.(map[string]any)["admission"]; ok {
			t.Errorf("the channel list repeats admission per channel")
		}
	}
}

// A turn that ends while another waits for a slot has no standby made: the
// slot goes to the waiting turn, not to a preparation competing with it.
func TestNoStandbyPreparedWhileATurnWaits(t *testing.T) {
	r, _ := newWarmRig(t, "queue:\n  globalConcurrency: 1\n")
	must(t, r.h.state.SetMode("b", ModeOn))
	relC, relB := make(chan struct{}), make(chan struct{})
	running := make(chan string, 2)
	standbyOfC := make(chan string, 1)
	var runs atomic.Int32
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		gate := relC
		if runs.Add(1) == 2 {
			gate = relB
			standbyOfC <- r.h.status("c").Standby // c's cleanup and refill are over
		}
		running <- spec.Name
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return okRun(ctx, spec, stdin)
	}
	hc, _ := serve(t, r)
	body := `{"speaker":{"id":"s"},"text":"x"}`
	results := make(chan int, 2)
	go func() { results <- post(hc, "/v1/channels/c/turns", body) }()
	<-running
	queued := queuedSignal(r.h.queue)
	go func() { results <- post(hc, "/v1/channels/b/turns", body) }()
	// Wait for b's ticket itself: c's standby preparation may queue for a
	// spare slot just before or after the hook is set, and taking its signal
	// for b's let c finish before b waited (the spare then got the slot).
	for ch := range queued {
		if ch == "b" {
			break
		}
	}
	close(relC)
	<-running
	// c's standby was asked for while c ran (prepared as a turn runs), but
	// its preparation waits for a spare slot: b got the only one.
	if got := <-standbyOfC; got == "ready" {
		t.Errorf("c's standby while b waited for the only slot: %q, want none or preparing (no slot)", got)
	}
	close(relB)
	for i := 0; i < 2; i++ {
		if s := <-results; s != http.StatusOK {
			t.Errorf("turn: %d, want 200", s)
		}
	}
}

// Of the turns the global cap admits, only queue.startConcurrency start at
// once: b runs (it holds a global slot) but its broker units and container
// wait until a's start is over.
func TestColdStartsWaitForAStartSlot(t *testing.T) {
	r := newRig(t, "queue:\n  globalConcurrency: 4\n  startConcurrency: 1\nstandby:\n  enabled: false\n", nil)
	must(t, r.h.state.SetMode("a", ModeOn))
	must(t, r.h.state.SetMode("b", ModeOn))
	hold := make(chan struct{})
	starting := make(chan string, 4)
	var starts atomic.Int32
	r.units.StartHook = func(ctx context.Context, turn string) error {
		starting <- turn
		if starts.Add(1) == 1 {
			select { // a's start: held until the test has seen b wait
			case <-hold:
			case <-ctx.Done():
			}
		}
		return nil
	}
	queued := make(chan string, 4)
	r.h.starts.OnQueued(func(kind string) { queued <- kind })
	hc, _ := serve(t, r)
	body := `{"speaker":{"id":"s"},"text":"x"}`
	results := make(chan int, 2)
	go func() { results <- post(hc, "/v1/channels/a/turns", body) }()
	<-starting
	go func() { results <- post(hc, "/v1/channels/b/turns", body) }()
	select { // one of them happens: b's start waits, or it begins beside a's
	case kind := <-queued:
		if kind != admission.StartQueued {
			t.Fatalf("queued %q, want a turn's start", kind)
		}
	case <-starting:
		t.Fatal("b's broker units started while a's start held the only start slot")
	}
	if _, running := r.h.queue.Totals(); running != 2 {
		t.Errorf("%d turns running, want 2: the global cap admits b, only its start waits", running)
	}
	if w, s := r.h.starts.Totals(); w != 1 || s != 1 {
		t.Errorf("starts: %d waiting, %d starting; want 1, 1", w, s)
	}
	_, st := call(t, hc, "GET", "/v1/channels/b", "")
	adm, _ := st["admission"].(map[string]any)
	for k, v := range map[string]any{"startConcurrency": float64(1), "startDerived": false, "starting": float64(1), "startWaiting": float64(1)} {
		if adm[k] != v {
			t.Errorf("admission.%s = %v, want %v", k, adm[k], v)
		}
	}
	close(hold)
	for range 2 {
		if s := <-results; s != http.StatusOK {
			t.Errorf("turn: %d, want 200", s)
		}
	}
	if w, s := r.h.starts.Totals(); w != 0 || s != 0 {
		t.Errorf("starts at the end: %d waiting, %d starting; want 0, 0", w, s)
	}
}
