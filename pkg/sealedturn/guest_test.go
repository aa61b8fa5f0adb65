package sealedturn_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// Moved from pkg/host (guest_test.go): each channel's guest uid, the
// workspace handed to it, and the worker's stderr in the journal, over
// the kit as the host runs an admitted turn (rig.run).

func TestGuestsRunOnTheirOwnUIDs(t *testing.T) {
	var chowns sandboxtest.Chowns
	r := newColdRig(t, "", sandboxtest.KitOptions{Chown: chowns.Chown})
	var dirModes []fs.FileMode
	var mu sync.Mutex
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		st, err := os.Stat(spec.TurnDir)
		if err == nil {
			mu.Lock()
			dirModes = append(dirModes, st.Mode().Perm())
			mu.Unlock()
		}
		return sandboxtest.OKRun(ctx, spec, stdin)
	}
	for _, ch := range []string{"guild:1", "guild:2", "guild:1"} {
		_, _, err := r.run(context.Background(), turnIn{Channel: ch, SpeakerID: "s1", Text: "hi"})
		must(t, err)
	}
	c := r.docker.Created
	g := r.kit.Cfg.Guests
	for i, spec := range c {
		if !g.IsGuest(spec.UID) || spec.GID != spec.UID {
			t.Errorf("turn %d runs as %d:%d, want one guest id (range %d+%d) for both", i, spec.UID, spec.GID, g.UIDBase, g.UIDCount)
		}
		if spec.UID == r.kit.Deps.UID || spec.GID == r.kit.Deps.GID || spec.UID == 0 {
			t.Errorf("turn %d runs as %d:%d, the host's own ids or root", i, spec.UID, spec.GID)
		}
	}
	if c[0].UID == c[1].UID {
		t.Errorf("two channels share guest uid %d", c[0].UID)
	}
	if c[0].UID != c[2].UID {
		t.Errorf("one channel's guest uid changed between turns: %d then %d", c[0].UID, c[2].UID)
	}
	// Each new workspace is handed to its guest once; the fake chown does
	// not change the owner, so the second turn of guild:1 hands it again.
	ws1, _ := layout.WorkspaceDir(r.kit.Cfg.WorkspaceRoot, "guild:1")
	ws2, _ := layout.WorkspaceDir(r.kit.Cfg.WorkspaceRoot, "guild:2")
	got := chowns.Calls()
	want := []sandboxtest.ChownCall{{Dir: ws1, UID: c[0].UID, GID: c[0].UID}, {Dir: ws2, UID: c[1].UID, GID: c[1].UID}, {Dir: ws1, UID: c[0].UID, GID: c[0].UID}}
	if len(got) != len(want) {
		t.Fatalf("chowns = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chown %d = %v, want %v", i, got[i], want[i])
		}
	}
	for i, m := range dirModes {
		if m != sandbox.TurnDirMode {
			t.Errorf("turn %d: turn directory mode %04o, want %04o", i, m, sandbox.TurnDirMode)
		}
	}
	// Recorded in the state file: a new host gives the same uids.
	st, _, err := chanstate.LoadState(r.kit.Cfg.StateFile, nil)
	must(t, err)
	if uid, err := st.GuestUID("guild:2", g, -1); err != nil || uid != c[1].UID {
		t.Errorf("state file after reload: guild:2 = %d, %v; want %d", uid, err, c[1].UID)
	}
}

func TestWorkspaceNotHandedOverFailsTheTurn(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{
		ChownTree: func(string, int, int) error { return syscall.EPERM },
	})
	_, _, err := r.run(context.Background(), turnIn{Channel: "guild:1", SpeakerID: "s1", Text: "hi"})
	// The host answers a failed run ErrTurnFailed (its TestResultOf).
	if err == nil || errors.Is(err, sandbox.ErrCleanup) {
		t.Fatalf("run = %v, want a failed run", err)
	}
	if len(r.docker.Created) != 0 {
		t.Errorf("a container was created for a workspace its guest does not own")
	}
	r.assertClean(t)
}

func TestWorkerStderrGoesToTheJournalBounded(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	r.docker.Stderr = strings.Repeat(`{"level":"INFO","msg":"step"}`+"\n", 3000)
	_, _, err := r.run(context.Background(), turnIn{Channel: "guild:1", SpeakerID: "s1", Text: "hi"})
	must(t, err)
	got := r.kit.Journal.Lines("sandbox/guild:1")
	limit := workerlog.DefaultLimits().TurnLines
	if len(got) != limit+1 || !strings.Contains(got[len(got)-1], "2000 worker log lines over this turn's bound were dropped") {
		t.Fatalf("journal got %d lines under sandbox/guild:1 (last %q), want %d and a closing line", len(got), got[len(got)-1], limit)
	}
}

func TestWorkerStderrOverItsBoundFailsTheTurn(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	r.docker.Stderr = strings.Repeat("x", int(workerlog.DefaultLimits().HardBytes)+1)
	_, _, err := r.run(context.Background(), turnIn{Channel: "guild:1", SpeakerID: "s1", Text: "hi"})
	// The host answers a failed run ErrTurnFailed (its TestResultOf).
	if err == nil || errors.Is(err, sandbox.ErrCleanup) {
		t.Fatalf("run = %v, want a failed run", err)
	}
	r.assertClean(t)
}
