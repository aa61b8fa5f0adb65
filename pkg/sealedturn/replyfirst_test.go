package sealedturn_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// The reply leaves before the cleanup (docs/sealed-turns.md): a sealed
// turn answers at the worker's final frame, before its exit is awaited,
// its container removed and its units stopped; the cleanup still ends
// before RunChannelTurn returns (the host's queue slot, and so the
// channel's next turn, waits for that: pkg/host's
// TestReplyBeforeCleanupKeepsTheSlot).

// atAnswer is what the fakes held when the kind answered.
type atAnswer struct {
	answered  bool
	exited    bool // the worker's exit had been awaited
	live      bool // the turn's container
	units     int  // active broker units
	stopped   int  // unit stops
	container string
}

// answerTurn runs one admitted turn of channel "c" as the host does and
// records what the fakes held at its answer.
func answerTurn(t *testing.T, r *rig) (kind.Outcome, *atAnswer) {
	t.Helper()
	done, err := r.kit.Host.Admit(func() error { return nil })
	must(t, err)
	defer done()
	at := &atAnswer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out kind.Outcome
	in := &kind.Turn{
		ID: ids.NewTurnID(), Channel: "c", Speaker: protocol.Speaker{ID: "s1", Name: "Ann"}, Principal: "p1", Text: "hi",
		Deadline: time.Now().Add(time.Minute), Rebind: func(string) {},
		Answer: func(_ *protocol.Reply, id string) {
			at.answered = true
			r.docker.Mu.Lock()
			for _, c := range r.docker.Created {
				if c.Name == containerOf(id) {
					at.container = "id-" + c.Name
				}
			}
			r.docker.Mu.Unlock()
			at.exited = r.docker.HasExited(at.container)
			at.live = r.docker.IsLive(at.container)
			at.units = r.units.ActiveCount()
			at.stopped = stops(r)
		},
	}
	out = r.k.RunChannelTurn(ctx, in)
	return out, at
}

func containerOf(id string) string { n, _ := ids.ContainerName("c", id); return n }

// TestReplyAtTheFinalFrame: on the cold path and on a standby, the answer
// comes at the worker's final frame: its exit not yet awaited, its
// container live, its units up; cleanup follows, and the turn leaves
// nothing. Fails on a kind that answers only once Run returned after the
// exit.
func TestReplyAtTheFinalFrame(t *testing.T) {
	for _, warm := range []bool{false, true} {
		name := map[bool]string{false: "cold", true: "standby"}[warm]
		t.Run(name, func(t *testing.T) {
			var r *rig
			if warm {
				r, _ = newWarmRig(t, "")
				_, _, err := r.run(context.Background(), turnInput("c")) // a cold turn asks for the standby
				must(t, err)
				readyStandby(t, r, "c")
			} else {
				r = newColdRig(t, "", sandboxtest.KitOptions{})
			}
			stopsBefore := stops(r)
			out, at := answerTurn(t, r)
			if out.RunErr != nil || out.CleanupErr != nil || !out.Answered || out.Reply == nil || out.Reply.Text != "hello" {
				t.Fatalf("outcome run %v cleanup %v answered %v reply %+v", out.RunErr, out.CleanupErr, out.Answered, out.Reply)
			}
			if out.Done[1] != warm {
				t.Fatalf("outcome standby = %v, want %v", out.Done[1], warm)
			}
			if at.container == "" || at.exited {
				t.Errorf("at the answer: container %q, exit awaited %v; want the answer before the worker's exit", at.container, at.exited)
			}
			if !at.live {
				t.Errorf("container %s gone at the answer; want it removed after", at.container)
			}
			if at.stopped != stopsBefore || at.units == 0 {
				t.Errorf("at the answer: %d unit stops (before: %d), %d units up; want the units still up", at.stopped, stopsBefore, at.units)
			}
			if r.docker.IsLive(at.container) {
				t.Errorf("container %s still live once the turn returned", at.container)
			}
			if !contains(r.docker.Kills, at.container) {
				t.Errorf("kills %v; want the framed turn's container killed by its cleanup", r.docker.Kills)
			}
			r.shutdown()
			r.assertClean(t)
		})
	}
}

// TestFailedFrameWaitsForTheExit: a worker's frame that is not a whole
// reply it exits 0 with (a failure cause, more bytes after the line) is
// not taken early: the run reads to the end and awaits the exit, and the
// turn is judged as before (a failure after its cleanup; stdout that
// DecodeReply takes from a worker that exited 0, answered after the exit).
func TestFailedFrameWaitsForTheExit(t *testing.T) {
	tests := []struct {
		name   string
		stdout string
		exit   int64
	}{
		{"failure cause", `{"ok":false,"text":"x","cause":"broker call failed"}` + "\n", 1},
		{"bytes after the frame", `{"ok":true,"text":"hello"}` + "\n" + `{"ok":true,"text":"again"}` + "\n", 0},
		{"no newline", `{"ok":true,"text":"hello"}`, 1},
		{"two lines, exit 0", "\n" + `{"ok":true,"text":"hello"}` + "\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newColdRig(t, "", sandboxtest.KitOptions{})
			r.docker.RunFn = func(context.Context, sandbox.ContainerSpec, []byte) (sandbox.RunResult, error) {
				return sandbox.RunResult{Stdout: []byte(tt.stdout), ExitCode: tt.exit}, nil
			}
			out, at := answerTurn(t, r)
			if at.answered && !at.exited {
				t.Fatalf("answered %+v before the exit; want no early answer", at)
			}
			if out.RunErr == nil && !(tt.exit == 0 && out.Reply != nil) {
				t.Fatalf("run err nil, reply %+v", out.Reply)
			}
			if tt.name == "bytes after the frame" && out.RunErr == nil {
				t.Errorf("two reply objects accepted: %+v", out.Reply)
			}
			var exit *sealedturn.ExitError
			if tt.exit != 0 && !errors.As(out.RunErr, &exit) {
				t.Errorf("run err = %v, want the worker's exit status", out.RunErr)
			}
			for _, e := range r.docker.EventList() {
				if e == "framed" {
					t.Errorf("events %v: a frame was taken", r.docker.EventList())
				}
			}
			r.assertClean(t)
		})
	}
}

func stops(r *rig) int {
	r.units.Mu.Lock()
	defer r.units.Mu.Unlock()
	return len(r.units.Stopped)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestFailedCleanupHoldsTheChannel: a cleanup that fails after the reply
// left (the container's removal, the units' stop) holds the channel: its
// next turn retries that cleanup first and, while it fails, is refused
// with a HeldError naming the channel and the held turn, running nothing;
// once the retry succeeds (the reaper or an operator removed what was
// left) the channel runs again and nothing is left.
func TestFailedCleanupHoldsTheChannel(t *testing.T) {
	tests := []struct {
		name        string
		fail, clear func(r *rig)
	}{
		{"container removal", func(r *rig) { r.docker.Mu.Lock(); r.docker.RemoveFails = -1; r.docker.Mu.Unlock() },
			func(r *rig) { r.docker.Mu.Lock(); r.docker.RemoveFails = 0; r.docker.Mu.Unlock() }},
		{"unit stop", func(r *rig) { r.units.Mu.Lock(); r.units.StopErr = errors.New("dbus gone"); r.units.Mu.Unlock() },
			func(r *rig) { r.units.Mu.Lock(); r.units.StopErr = nil; r.units.Mu.Unlock() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newColdRig(t, "", sandboxtest.KitOptions{RemoveRetryTotal: 10 * time.Millisecond})
			tt.fail(r)
			first, at := answerTurn(t, r)
			if !first.Answered || !at.answered || first.RunErr != nil || !errors.Is(first.CleanupErr, sandbox.ErrCleanup) {
				t.Fatalf("first turn: answered %v, run %v, cleanup %v; want answered and ErrCleanup", first.Answered, first.RunErr, first.CleanupErr)
			}
			if !r.k.Held("c") || r.k.Held("guild:1") {
				t.Fatalf("held c %v, guild:1 %v; want only c held", r.k.Held("c"), r.k.Held("guild:1"))
			}
			second, at2 := answerTurn(t, r)
			var held *sandbox.HeldError
			if !errors.As(second.RunErr, &held) || held.Channel != "c" || held.TurnID != first.ID || at2.answered {
				t.Fatalf("second turn: %v, answered %v; want a HeldError naming c and %s", second.RunErr, at2.answered, first.ID)
			}
			if !strings.Contains(held.Error(), `"c"`) || !strings.Contains(held.Error(), "sandbox-reaper") || strings.Contains(held.Error(), "dbus") {
				t.Errorf("refusal %q: want the channel and what clears it, not the cleanup's error", held.Error())
			}
			if len(r.docker.Created) != 1 {
				t.Errorf("%d containers created; want none for the refused turn", len(r.docker.Created))
			}
			tt.clear(r)
			third, at3 := answerTurn(t, r)
			if third.RunErr != nil || third.CleanupErr != nil || !at3.answered || r.k.Held("c") {
				t.Fatalf("third turn: run %v, cleanup %v, answered %v, held %v; want it run once the retry succeeded", third.RunErr, third.CleanupErr, at3.answered, r.k.Held("c"))
			}
			r.shutdown()
			r.assertClean(t)
		})
	}
}

// TestNextStandbyPreparedAfterAFastAnswer: a turn that answers before
// PrepareAfter (here an hour) has asked for no preparation of its
// channel's next standby when it answers, on the cold path and on a
// standby, so that work (systemd, Docker) never shares the CPUs with its
// reply; the preparation starts right after the answer and the next turn
// binds it. Fails on a kind that prepares at the worker's stdin. (A turn
// still running at PrepareAfter prepares while it runs:
// TestStandbyPreparedWhenBound, TestStandbyPreparedWhileColdTurnRuns.)
func TestNextStandbyPreparedAfterAFastAnswer(t *testing.T) {
	defer func(d time.Duration) { sealedturn.PrepareAfter = d }(sealedturn.PrepareAfter)
	sealedturn.PrepareAfter = time.Hour
	r, _ := newWarmRig(t, "")
	for i, want := range []bool{false, true, true} {
		done, err := r.kit.Host.Admit(func() error { return nil })
		must(t, err)
		var atAnswer kind.Report
		in := &kind.Turn{
			ID: ids.NewTurnID(), Channel: "c", Speaker: protocol.Speaker{ID: "s1", Name: "Ann"}, Principal: "p1", Text: "hi",
			Deadline: time.Now().Add(time.Minute), Rebind: func(string) {},
			Answer: func(*protocol.Reply, string) { atAnswer = r.status("c") },
		}
		out := r.k.RunChannelTurn(context.Background(), in)
		done()
		if out.RunErr != nil || !out.Answered || out.Done[1] != want {
			t.Fatalf("turn %d: run %v answered %v standby %v; want a standby %v", i, out.RunErr, out.Answered, out.Done[1], want)
		}
		if atAnswer.Standby != standby.StateNone {
			t.Errorf("turn %d: the next standby %q at the answer; want none asked for before it", i, atAnswer.Standby)
		}
		readyStandby(t, r, "c")
	}
	r.shutdown()
	r.assertClean(t)
}

// TestReplyDoesNotWaitForTheTail: after the final frame the worker's
// streams are still read (their last log lines); the answer does not wait
// for that tail, and the cleanup does, before the container's kill and
// removal, so the line that arrives in it reaches the channel's journal.
// Fails on a kind that closes the worker's log sink when the run returns
// (the late line is lost) or waits for the tail before answering.
func TestReplyDoesNotWaitForTheTail(t *testing.T) {
	for _, warm := range []bool{false, true} {
		name := map[bool]string{false: "cold", true: "standby"}[warm]
		t.Run(name, func(t *testing.T) {
			var r *rig
			if warm {
				r, _ = newWarmRig(t, "")
				_, _, err := r.run(context.Background(), turnInput("c"))
				must(t, err)
				readyStandby(t, r, "c")
			} else {
				r = newColdRig(t, "", sandboxtest.KitOptions{})
			}
			r.docker.Mu.Lock()
			r.docker.TailStderr = `{"level":"INFO","msg":"late line"}` + "\n"
			r.docker.Mu.Unlock()
			before := len(r.docker.EventList())
			var tailAtAnswer bool
			done, err := r.kit.Host.Admit(func() error { return nil })
			must(t, err)
			in := &kind.Turn{
				ID: ids.NewTurnID(), Channel: "c", Speaker: protocol.Speaker{ID: "s1", Name: "Ann"}, Principal: "p1", Text: "hi",
				Deadline: time.Now().Add(time.Minute), Rebind: func(string) {},
				Answer: func(*protocol.Reply, string) {
					tailAtAnswer = contains(r.docker.EventList()[before:], "tail waited")
				},
			}
			out := r.k.RunChannelTurn(context.Background(), in)
			done()
			if out.RunErr != nil || !out.Answered {
				t.Fatalf("run %v answered %v", out.RunErr, out.Answered)
			}
			if tailAtAnswer {
				t.Errorf("the tail was waited for before the answer")
			}
			events := r.docker.EventList()[before:]
			tail, removed := -1, -1
			for i, e := range events {
				if e == "tail" && tail < 0 {
					tail = i
				}
				if e == "removed" && removed < 0 {
					removed = i
				}
			}
			if tail < 0 || removed < 0 || tail > removed {
				t.Errorf("events %v: want the tail read before the container's removal", events)
			}
			if got := r.kit.Journal.Lines("sandbox/c"); !strings.Contains(strings.Join(got, "\n"), "late line") {
				t.Errorf("journal %q: want the worker's line that arrived after its frame", got)
			}
			r.shutdown()
			r.assertClean(t)
		})
	}
}
