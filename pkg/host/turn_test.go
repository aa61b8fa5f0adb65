package host

// The sealed turn's own tests on its cold path are pkg/sealedturn's
// (turn_test.go there); what stays here is the host's: how RunTurn maps a
// turn's errors to answers and metrics, status, fresh, shutdown.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	start := time.Now()
	_, id, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "loop forever"})
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("err = %v, want ErrDeadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("deadline turn took %v", took)
	}
	if len(r.docker.Kills) != 1 {
		t.Errorf("kills = %v, want one", r.docker.Kills)
	}
	if len(r.docker.Removes) != 2 {
		t.Errorf("removes = %v, want two (first failed)", r.docker.Removes)
	}
	if len(r.units.Stopped) != 1 || r.units.Stopped[0] != id {
		t.Errorf("units stopped = %v", r.units.Stopped)
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
	if len(r.docker.Kills) != 1 || len(r.docker.Removes) != 2 || len(r.units.Stopped) != 1 {
		t.Errorf("kills %v removes %v unit stops %v", r.docker.Kills, r.docker.Removes, r.units.Stopped)
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
	// Units and files are still cleaned although the container is stuck.
	if r.units.ActiveCount() != 0 || len(r.docker.Removes) != RemoveAttempts {
		t.Errorf("units %d removes %v", r.units.ActiveCount(), r.docker.Removes)
	}
}

func TestBadWorkerOutputIsGenericFailure(t *testing.T) {
	for _, out := range []RunResult{
		{Stdout: []byte("not json")},
		{Stdout: []byte(`{"ok":true,"text":"a"}{"ok":true,"text":"b"}`)},
		{Stdout: []byte(`{"ok":true,"text":"a","extra":1}`)},
		{Stdout: []byte(`{"ok":true,"text":"a"}`), Truncated: true},
		{Stdout: []byte(`{"ok":true,"text":"a"}`), ExitCode: 137},
	} {
		r := newRig(t, "", nil)
		r.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) { return out, nil }
		_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
		if !errors.Is(err, ErrTurnFailed) {
			t.Errorf("output %q: err = %v, want ErrTurnFailed", out.Stdout, err)
		}
		r.assertClean(t)
	}
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

// A worker that exits non-zero is logged with its status, what the status
// means and the cause its reply names; a cause outside protocol's list is
// never logged.
func TestWorkerExitIsLoggedWithItsCause(t *testing.T) {
	for _, tt := range []struct {
		name  string
		res   RunResult
		want  []string
		never string
	}{
		{"disk full", RunResult{ExitCode: 1, Stdout: []byte(`{"ok":false,"text":"The sandbox worker failed.","cause":"no space left on device"}` + "\n")},
			[]string{`worker exited with status 1 (turn failed); the worker reports: no space left on device`, `"exit_code":1`, `"worker_cause":"no space left on device"`}, ""},
		{"unknown cause", RunResult{ExitCode: 1, Stdout: []byte(`{"ok":false,"text":"x","cause":"INJECTED\nlevel=ERROR"}`)},
			[]string{`worker exited with status 1 (turn failed); the worker reported no cause`, `"worker_cause":""`}, "INJECTED"},
		{"killed", RunResult{ExitCode: 137},
			[]string{`worker exited with status 137 (killed by SIGKILL: memory limit or forced stop); the worker reported no cause`}, ""},
		{"no reply", RunResult{ExitCode: 2, Stdout: []byte("panic: GUESTTEXT")},
			[]string{`worker exited with status 2 (worker crashed)`}, "GUESTTEXT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			r := newRig(t, "", func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
			r.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) { return tt.res, nil }
			_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
			if !errors.Is(err, ErrTurnFailed) || strings.Contains(err.Error(), "exited") {
				t.Errorf("caller's error = %v, want the generic ErrTurnFailed", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("log lacks %s:\n%s", w, logs.String())
				}
			}
			if tt.never != "" && strings.Contains(logs.String(), tt.never) {
				t.Errorf("log carries worker text %q:\n%s", tt.never, logs.String())
			}
		})
	}
}

// Docker down for a moment during cleanup (removal fails N times, then
// works): the container is removed by a retry, the turn succeeds, nothing
// is counted as a cleanup failure and nothing is left for the reaper.
func TestRemovalRetriedUntilTheDaemonIsBack(t *testing.T) {
	for _, fails := range []int{1, 3, RemoveAttempts - 1} {
		t.Run(fmt.Sprint(fails), func(t *testing.T) {
			var logs bytes.Buffer
			r := newRig(t, "", func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
			r.docker.RemoveFails = fails
			reply, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
			if err != nil || !reply.OK {
				t.Fatalf("reply %v err %v, want the reply", reply, err)
			}
			if got := len(r.docker.Removes); got != fails+1 {
				t.Errorf("removals = %d, want %d", got, fails+1)
			}
			if got := counterValue(r.h.metrics.cleanupFailures.WithLabelValues("sealedturn", "container")); got != 0 {
				t.Errorf("cleanup failure metric = %v, want 0", got)
			}
			for _, want := range []string{`"msg":"container removed after retries"`, fmt.Sprintf(`"attempts":%d,`, fails+1)} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log lacks %s:\n%s", want, logs.String())
				}
			}
			r.assertClean(t)
		})
	}
}

// Docker down for good: removal is retried RemoveAttempts times at most,
// within RemoveRetryTotal, then counted as a cleanup failure and left to the
// reaper, while units and files are still cleaned.
func TestRemovalAlwaysFailingIsBounded(t *testing.T) {
	for _, tt := range []struct {
		name         string
		delay, total time.Duration
		attempts     int
	}{
		{"attempts bound", time.Millisecond, time.Minute, RemoveAttempts},
		// 1st at 0; pause 100 ms -> 2nd at 100 ms; pause 200 ms -> 3rd at
		// 300 ms; a pause of 400 ms would end at 700 ms or later (pauses
		// never end early) -> stop, however slow the machine. The 3rd
		// attempt needs the 2nd before 500 ms: 400 ms of slack for a busy
		// machine (a 500 ms bound left 200).
		{"time bound", 100 * time.Millisecond, 700 * time.Millisecond, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			r := newRig(t, "", func(o *Options) {
				o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				o.RemoveRetryDelay, o.RemoveRetryTotal = tt.delay, tt.total
			})
			r.docker.RemoveFails = -1
			start := time.Now()
			_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "c", SpeakerID: "s", Text: "x"})
			took := time.Since(start)
			if !errors.Is(err, ErrCleanup) {
				t.Fatalf("err = %v, want ErrCleanup", err)
			}
			if got := len(r.docker.Removes); got != tt.attempts {
				t.Errorf("removals = %d, want %d", got, tt.attempts)
			}
			if took > tt.total+2*time.Second {
				t.Errorf("turn took %v, over the %v retry bound", took, tt.total)
			}
			if got := counterValue(r.h.metrics.cleanupFailures.WithLabelValues("sealedturn", "container")); got != 1 {
				t.Errorf("cleanup failure metric = %v, want 1", got)
			}
			if !strings.Contains(logs.String(), `"msg":"container removal failed; left to sandbox-reaper"`) {
				t.Errorf("log lacks the final removal failure:\n%s", logs.String())
			}
			if r.units.ActiveCount() != 0 {
				t.Errorf("%d broker units left", r.units.ActiveCount())
			}
		})
	}
}

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
