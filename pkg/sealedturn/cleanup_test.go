package sealedturn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
)

// Moved from pkg/host (turn_test.go): the sealed turn's kill, removal and
// cleanup over the lifecycle, run as the host runs an admitted turn
// (rig.run). How the host maps these turns' errors to its answers and
// metrics stays in pkg/host's turn_test.go.

type (
	ContainerSpec = sandbox.ContainerSpec
	RunResult     = sandbox.RunResult
)

// blockRun waits for the turn's context to end, like a hung worker.
func blockRun(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
	<-ctx.Done()
	return RunResult{}, ctx.Err()
}

// jsonLog is a kit option logging JSON to logs.
func jsonLog(logs *bytes.Buffer) sandboxtest.KitOptions {
	return sandboxtest.KitOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil))}
}

func TestDeadlineKillsAndCleansEvenWhenFirstRemovalFails(t *testing.T) {
	r := newColdRig(t, "turnDeadlineSeconds: 1\n", sandboxtest.KitOptions{})
	r.docker.RunFn = blockRun
	r.docker.RemoveFails = 1
	start := time.Now()
	_, id, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "loop forever"})
	if err == nil {
		t.Fatal("a turn past its deadline succeeded")
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
}

func TestCancelKillsAndCleansEvenWhenFirstRemovalFails(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	started := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		close(started)
		return blockRun(ctx, spec, stdin)
	}
	r.docker.RemoveFails = 1
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := r.run(ctx, turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
		done <- err
	}()
	<-started
	cancel() // as the host's cancel route ends the turn's context
	if err := <-done; err == nil {
		t.Fatal("a cancelled turn succeeded")
	}
	if len(r.docker.Kills) != 1 || len(r.docker.Removes) != 2 || len(r.units.Stopped) != 1 {
		t.Errorf("kills %v removes %v unit stops %v", r.docker.Kills, r.docker.Removes, r.units.Stopped)
	}
	r.assertClean(t)
}

func TestCleanupFailureIsAnError(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	r.docker.RemoveFails = -1
	reply, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
	if !errors.Is(err, sandbox.ErrCleanup) || reply != nil {
		t.Fatalf("reply %v err = %v, want ErrCleanup", reply, err)
	}
	if got := r.kit.CleanupFailures("container"); got != 1 {
		t.Errorf("container cleanup failures = %v", got)
	}
	// Units and files are still cleaned although the container is stuck.
	if r.units.ActiveCount() != 0 || len(r.docker.Removes) != sandbox.RemoveAttempts {
		t.Errorf("units %d removes %v", r.units.ActiveCount(), r.docker.Removes)
	}
}

// Worker output the protocol refuses fails the run (no unit to blame, the
// host answers it with its generic failure) and leaves nothing behind.
func TestBadWorkerOutputIsGenericFailure(t *testing.T) {
	for _, out := range []RunResult{
		{Stdout: []byte("not json")},
		{Stdout: []byte(`{"ok":true,"text":"a"}{"ok":true,"text":"b"}`)},
		{Stdout: []byte(`{"ok":true,"text":"a","extra":1}`)},
		{Stdout: []byte(`{"ok":true,"text":"a"}`), Truncated: true},
		{Stdout: []byte(`{"ok":true,"text":"a"}`), ExitCode: 137},
	} {
		r := newColdRig(t, "", sandboxtest.KitOptions{})
		r.docker.RunFn = func(context.Context, ContainerSpec, []byte) (RunResult, error) { return out, nil }
		_, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
		if _, unit := unitctl.AsUnitError(err); err == nil || unit || errors.Is(err, sandbox.ErrCleanup) {
			t.Errorf("output %q: err = %v, want a failed run", out.Stdout, err)
		}
		r.assertClean(t)
	}
}

func TestPolicyFileModeAndGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("changing a file's group to an arbitrary gid needs root; run as root to include this test")
	}
	r := newColdRig(t, "", sandboxtest.KitOptions{BrokerGID: 4343})
	_, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
	must(t, err)
	st := r.docker.PolicyInfo[0]
	if st == nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("policy file at create time: %v", st)
	}
	if gid, _ := sandbox.FileGroup(st); gid != 4343 {
		t.Errorf("policy group = %d, want 4343", gid)
	}
}

// Docker down for a moment during cleanup (removal fails N times, then
// works): the container is removed by a retry, the turn succeeds, nothing
// is counted as a cleanup failure and nothing is left for the reaper.
func TestRemovalRetriedUntilTheDaemonIsBack(t *testing.T) {
	for _, fails := range []int{1, 3, sandbox.RemoveAttempts - 1} {
		t.Run(fmt.Sprint(fails), func(t *testing.T) {
			var logs bytes.Buffer
			r := newColdRig(t, "", jsonLog(&logs))
			r.docker.RemoveFails = fails
			reply, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
			if err != nil || !reply.OK {
				t.Fatalf("reply %v err %v, want the reply", reply, err)
			}
			if got := len(r.docker.Removes); got != fails+1 {
				t.Errorf("removals = %d, want %d", got, fails+1)
			}
			if got := r.kit.CleanupFailures("container"); got != 0 {
				t.Errorf("container cleanup failures = %v, want 0", got)
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
		{"attempts bound", time.Millisecond, time.Minute, sandbox.RemoveAttempts},
		// 1st at 0; pause 100 ms -> 2nd at 100 ms; pause 200 ms -> 3rd at
		// 300 ms; a pause of 400 ms would end at 700 ms or later (pauses
		// never end early) -> stop, however slow the machine. The 3rd
		// attempt needs the 2nd before 500 ms: 400 ms of slack for a busy
		// machine (a 500 ms bound left 200).
		{"time bound", 100 * time.Millisecond, 700 * time.Millisecond, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			o := jsonLog(&logs)
			o.RemoveRetryDelay, o.RemoveRetryTotal = tt.delay, tt.total
			r := newColdRig(t, "", o)
			r.docker.RemoveFails = -1
			start := time.Now()
			_, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"})
			took := time.Since(start)
			if !errors.Is(err, sandbox.ErrCleanup) {
				t.Fatalf("err = %v, want ErrCleanup", err)
			}
			if got := len(r.docker.Removes); got != tt.attempts {
				t.Errorf("removals = %d, want %d", got, tt.attempts)
			}
			if took > tt.total+2*time.Second {
				t.Errorf("turn took %v, over the %v retry bound", took, tt.total)
			}
			if got := r.kit.CleanupFailures("container"); got != 1 {
				t.Errorf("container cleanup failures = %v, want 1", got)
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
