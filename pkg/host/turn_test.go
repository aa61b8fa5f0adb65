package host

// The sealed turn's own tests on its cold path are pkg/sealedturn's
// (turn_test.go there), and so are its kills, removals and cleanups
// (cleanup_test.go there: the tests of the same names assert the
// containers, units and files); what stays here is the host's: how RunTurn
// maps a turn's errors to answers and metrics, status, fresh, shutdown.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// blockRun waits for the turn's context to end, like a hung worker.
func blockRun(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
	<-ctx.Done()
	return RunResult{}, ctx.Err()
}

func TestDeadlineKillsAndCleansEvenWhenFirstRemovalFails(t *testing.T) {
	r := newRig(t, "turnDeadlineSeconds: 1\n", nil)
	r.docker.RunFn = blockRun
	r.docker.RemoveFails = 1
	_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "loop forever"})
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("err = %v, want ErrDeadline", err)
	}
	r.assertClean(t)
	if got := counterValue(r.h.metrics.turns.WithLabelValues(resultDeadline)); got != 1 {
		t.Errorf("deadline turns metric = %v", got)
	}
}

func TestCancelKillsAndCleansEvenWhenFirstRemovalFails(t *testing.T) {
	r := newRig(t, "", nil)
	started := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		close(started)
		return blockRun(ctx, spec, stdin)
	}
	r.docker.RemoveFails = 1
	done := make(chan error, 1)
	go func() {
		_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
		done <- err
	}()
	<-started
	st := r.h.status("c")
	if st.RunningTurn == "" {
		t.Fatal("status shows no running turn")
	}
	if turns := r.h.ActiveTurns(); len(turns) != 1 || turns[0].ID != st.RunningTurn || turns[0].ChannelTag != "c" {
		t.Errorf("ActiveTurns = %+v", turns)
	}
	r.h.mu.Lock()
	r.h.active["c"].cancel(errCauseCancel)
	r.h.mu.Unlock()
	if err := <-done; !errors.Is(err, ErrCancelled) {
		t.Fatalf("err = %v, want ErrCancelled", err)
	}
	r.assertClean(t)
	if len(r.h.ActiveTurns()) != 0 {
		t.Error("turn still listed as active")
	}
}

func TestCleanupFailureIsAnError(t *testing.T) {
	r := newRig(t, "", nil)
	r.docker.RemoveFails = -1
	reply, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
	if !errors.Is(err, ErrCleanup) || reply != nil {
		t.Fatalf("reply %v err = %v, want ErrCleanup", reply, err)
	}
	if status, reason := statusOf(err); status != 500 || reason != "turn failed" {
		t.Errorf("statusOf = %d %q, want 500 generic", status, reason)
	}
	if got := counterValue(r.h.metrics.cleanupFailures.WithLabelValues("sealedturn", "container")); got != 1 {
		t.Errorf("cleanup failure metric = %v", got)
	}
}

// A failed run is the generic ErrTurnFailed to the caller (every output
// the protocol refuses fails the run: pkg/sealedturn's test of this name).
func TestBadWorkerOutputIsGenericFailure(t *testing.T) {
	r := newRig(t, "", nil)
	r.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) {
		return RunResult{Stdout: []byte("not json")}, nil
	}
	_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
	if !errors.Is(err, ErrTurnFailed) {
		t.Errorf("err = %v, want ErrTurnFailed", err)
	}
	r.assertClean(t)
}

func TestFreshAppliesToNextTurnAndClearsAfterSuccess(t *testing.T) {
	r := newRig(t, "", nil)
	r.h.mu.Lock()
	r.h.freshGen++
	r.h.fresh["c"] = r.h.freshGen
	r.h.mu.Unlock()
	r.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) {
		return RunResult{Stdout: []byte(`{"ok":false,"text":"sorry"}`)}, nil
	}
	_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
	must(t, err)
	if !r.h.status("c").PendingFresh {
		t.Error("fresh cleared after an unsuccessful turn")
	}
	r.docker.RunFn = nil
	_, _, err = r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
	must(t, err)
	if r.h.status("c").PendingFresh {
		t.Error("fresh still pending after a successful turn")
	}
	var resets []bool
	for _, in := range r.docker.Stdins {
		var turn protocol.Turn
		json.Unmarshal(in, &turn)
		resets = append(resets, turn.Reset)
	}
	if len(resets) != 2 || !resets[0] || !resets[1] {
		t.Errorf("reset flags = %v, want [true true]", resets)
	}
}

func TestNewRefusesPolicyTheBrokerWouldRefuse(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Broker.MaxCalls = 0 // bypassing config.Validate
	st, _, _ := LoadState(cfg.StateFile, nil)
	_, err := New(Options{Config: cfg, State: st, Containers: newFakeDocker(cfg), Units: newFakeUnits()})
	if err == nil || !strings.Contains(err.Error(), "invalid broker policy") {
		t.Errorf("New = %v, want policy refusal", err)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

func TestPolicyFileModeAndGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("changing a file's group to an arbitrary gid needs root; run as root to include this test")
	}
	r := newRig(t, "", func(o *Options) { o.BrokerGID = 4343 })
	_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
	must(t, err)
	st := r.docker.PolicyInfo[0]
	if st == nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("policy file at create time: %v", st)
	}
	if gid, _ := sandbox.FileGroup(st); gid != 4343 {
		t.Errorf("policy group = %d, want 4343", gid)
	}
}

// The worker-exit log line (status, meaning, cause) is the sealed turn's:
// pkg/sealedturn's TestWorkerExitIsLoggedWithItsCause; the caller's error
// stays generic (TestResultOf).

// A shutdown whose context ends stops the removal retries at once: the
// host does not wait out a long backoff, the container is counted and left
// to the reaper, and Shutdown still returns only after the cleanup ended.
func TestShutdownContextStopsRemovalRetries(t *testing.T) {
	var logs bytes.Buffer
	r := newRig(t, "", func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		o.RemoveRetryDelay, o.RemoveRetryTotal = 10*time.Second, time.Minute
	})
	r.docker.RemoveFails = -1
	started := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		close(started)
		return blockRun(ctx, spec, stdin)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
		done <- err
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	r.h.ShutdownContext(ctx)
	took := time.Since(start)
	// The cleanup (one removal, no retry) must have ended before ShutdownContext
	// returned; RunTurn's own return to this goroutine may trail it slightly.
	r.docker.Mu.Lock()
	removedAtReturn := len(r.docker.Removes)
	r.docker.Mu.Unlock()
	if removedAtReturn != 1 {
		t.Fatalf("removals when ShutdownContext returned = %d, want 1 (cleanup ended first)", removedAtReturn)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrCleanup) {
			t.Errorf("turn err = %v, want ErrCleanup", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the turn did not return after ShutdownContext")
	}
	if took > 3*time.Second {
		t.Errorf("shutdown took %v: the 10 s backoff was waited out", took)
	}
	if got := len(r.docker.Removes); got != 1 {
		t.Errorf("removals = %d, want 1 (no retry after the shutdown ran out of time)", got)
	}
	if got := counterValue(r.h.metrics.cleanupFailures.WithLabelValues("sealedturn", "container")); got != 1 {
		t.Errorf("cleanup failure metric = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), `"stopped":"host shutdown out of time"`) {
		t.Errorf("log does not say why retries stopped:\n%s", logs.String())
	}
}

// TestResultOf: how the host names a finished turn's result and error
// from the kind's outcome and why the turn's context ended (the kinds'
// tests assert only that the run failed: a unit job that failed, a client
// that left while stdin waited, output the protocol refuses).
func TestResultOf(t *testing.T) {
	ended := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	failed := errors.New("worker exited with status 1 (turn failed)")
	for _, tt := range []struct {
		name            string
		ctx             context.Context
		reply           *protocol.Reply
		runErr, cleanup error
		result          string
		err             error
	}{
		{"ok", context.Background(), &protocol.Reply{OK: true}, nil, nil, resultOK, nil},
		{"not ok", context.Background(), &protocol.Reply{}, nil, nil, resultNotOK, nil},
		{"cleanup outranks", ended(errCauseDeadline), nil, failed, ErrCleanup, resultCleanup, ErrCleanup},
		{"deadline", ended(errCauseDeadline), nil, failed, nil, resultDeadline, ErrDeadline},
		{"cancelled", ended(errCauseCancel), nil, failed, nil, resultCancelled, ErrCancelled},
		{"shutdown", ended(ErrShuttingDown), nil, failed, nil, resultShutdown, ErrShuttingDown},
		{"client gone", ended(context.Canceled), nil, failed, nil, resultGone, ErrClientGone},
		{"run failed", context.Background(), nil, failed, nil, resultFailed, ErrTurnFailed},
	} {
		result, err := resultOf(tt.ctx, tt.reply, tt.runErr, tt.cleanup)
		if result != tt.result || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) || (err != nil && strings.Contains(err.Error(), "exited")) {
			t.Errorf("%s: resultOf = %q, %v; want %q, %v", tt.name, result, err, tt.result, tt.err)
		}
	}
}
