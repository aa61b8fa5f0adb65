package host

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

func TestGuestsRunOnTheirOwnUIDs(t *testing.T) {
	r := newRig(t, "", nil)
	var dirModes []fs.FileMode
	var mu sync.Mutex
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		st, err := os.Stat(spec.TurnDir)
		if err == nil {
			mu.Lock()
			dirModes = append(dirModes, st.Mode().Perm())
			mu.Unlock()
		}
		return okRun(ctx, spec, stdin)
	}
	for _, ch := range []string{"guild:1", "guild:2", "guild:1"} {
		_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: ch, SpeakerID: "s1", Text: "hi"})
		must(t, err)
	}
	c := r.docker.Created
	g := r.cfg.Guests
	for i, spec := range c {
		if !g.IsGuest(spec.UID) || spec.GID != spec.UID {
			t.Errorf("turn %d runs as %d:%d, want one guest id (range %d+%d) for both", i, spec.UID, spec.GID, g.UIDBase, g.UIDCount)
		}
		if spec.UID == r.h.opts.UID || spec.GID == r.h.opts.GID || spec.UID == 0 {
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
	ws1, _ := layout.WorkspaceDir(r.cfg.WorkspaceRoot, "guild:1")
	ws2, _ := layout.WorkspaceDir(r.cfg.WorkspaceRoot, "guild:2")
	got := r.chowns.Calls()
	want := []chownCall{{Dir: ws1, UID: c[0].UID, GID: c[0].UID}, {Dir: ws2, UID: c[1].UID, GID: c[1].UID}, {Dir: ws1, UID: c[0].UID, GID: c[0].UID}}
	if len(got) != len(want) {
		t.Fatalf("chowns = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("chown %d = %v, want %v", i, got[i], want[i])
		}
	}
	for i, m := range dirModes {
		if m != TurnDirMode {
			t.Errorf("turn %d: turn directory mode %04o, want %04o", i, m, TurnDirMode)
		}
	}
	// Recorded in the state file: a new host gives the same uids.
	st, _, err := LoadState(r.cfg.StateFile, nil)
	must(t, err)
	if uid, err := st.GuestUID("guild:2", g, -1); err != nil || uid != c[1].UID {
		t.Errorf("state file after reload: guild:2 = %d, %v; want %d", uid, err, c[1].UID)
	}
}

func TestWorkspaceNotHandedOverFailsTheTurn(t *testing.T) {
	r := newRig(t, "", func(o *Options) {
		o.ChownTree = func(string, int, int) error { return syscall.EPERM }
	})
	_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "guild:1", SpeakerID: "s1", Text: "hi"})
	if !errors.Is(err, ErrTurnFailed) {
		t.Fatalf("RunTurn = %v, want ErrTurnFailed", err)
	}
	if len(r.docker.Created) != 0 {
		t.Errorf("a container was created for a workspace its guest does not own")
	}
	r.assertClean(t)
}

// flakyListener fails its first accepts the way a uid out of epoll watches
// does, then hands out real connections.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails []error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.fails) > 0 {
		err := l.fails[0]
		l.fails = l.fails[1:]
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", err)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func TestAcceptErrorsNeverStopTheHost(t *testing.T) {
	r := newRig(t, "", nil)
	sock := filepath.Join(r.cfg.RunRoot+"-api", "host.sock")
	must(t, os.MkdirAll(filepath.Dir(sock), 0o700))
	inner, err := net.Listen("unix", sock)
	must(t, err)
	// ENOSPC and ENOBUFS are not "temporary" to net/http: without the
	// steady listener the first one ends Serve, and Run shuts the host down.
	ln := &flakyListener{Listener: inner, fails: []error{syscall.ENOSPC, syscall.ENOBUFS, syscall.ENOSPC, syscall.EMFILE}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.h.Run(ctx, ln) }()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://host/v1/health")
	if err != nil {
		t.Fatalf("health after accept errors: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health after accept errors = %d, want 200", resp.StatusCode)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned after accept errors: %v", err)
	default:
	}
	if !r.h.accepting() {
		t.Errorf("the host stopped admitting turns after accept errors")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestWorkerStderrGoesToTheJournalBounded(t *testing.T) {
	r := newRig(t, "", nil)
	r.docker.Stderr = strings.Repeat(`{"level":"INFO","msg":"step"}`+"\n", 3000)
	_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "guild:1", SpeakerID: "s1", Text: "hi"})
	must(t, err)
	got := r.journal.Lines("sandbox/guild:1")
	limit := workerlog.DefaultLimits().TurnLines
	if len(got) != limit+1 || !strings.Contains(got[len(got)-1], "2000 worker log lines over this turn's bound were dropped") {
		t.Fatalf("journal got %d lines under sandbox/guild:1 (last %q), want %d and a closing line", len(got), got[len(got)-1], limit)
	}
}

func TestWorkerStderrOverItsBoundFailsTheTurn(t *testing.T) {
	r := newRig(t, "", nil)
	r.docker.Stderr = strings.Repeat("x", int(workerlog.DefaultLimits().HardBytes)+1)
	_, _, err := r.h.RunTurn(context.Background(), TurnInput{Channel: "guild:1", SpeakerID: "s1", Text: "hi"})
	if !errors.Is(err, ErrTurnFailed) {
		t.Fatalf("RunTurn = %v, want ErrTurnFailed", err)
	}
	r.assertClean(t)
}
