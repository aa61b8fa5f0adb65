package sandboxtest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// WarmDocker is Docker that can also start a container apart from running
// it (sandbox.WarmContainers), as container.Driver does: a kind made over
// it prepares standbys.
type WarmDocker struct {
	*Docker
	WMu       sync.Mutex
	Started   map[string]time.Time // container id -> when started
	Dead      map[string]bool      // containers that died while waiting
	Bound     map[string]*policy.Policy
	Inodes    map[string]uint64 // policy file inode at stdin time, by container id
	StartErr  error
	Finishing []string
}

// NewWarmDocker wraps d.
func NewWarmDocker(d *Docker) *WarmDocker {
	return &WarmDocker{Docker: d, Started: map[string]time.Time{}, Dead: map[string]bool{}, Bound: map[string]*policy.Policy{}, Inodes: map[string]uint64{}}
}

func (w *WarmDocker) Start(ctx context.Context, id string) (sandbox.StartedContainer, error) {
	w.WMu.Lock()
	defer w.WMu.Unlock()
	if w.StartErr != nil {
		return nil, w.StartErr
	}
	w.Started[id] = time.Now()
	return &started{w: w, id: id}, nil
}

func (w *WarmDocker) Running(ctx context.Context, id string) (bool, error) {
	w.WMu.Lock()
	defer w.WMu.Unlock()
	_, ok := w.Started[id]
	return ok && !w.Dead[id] && w.Docker.IsLive(id), nil
}

type started struct {
	w      *WarmDocker
	id     string
	closed bool
}

// Finish records the policy file as the worker's first broker call would
// find it, then runs as Docker.Run with no gate.
func (s *started) Finish(ctx context.Context, stdin []byte, max int64, stderr io.Writer) (sandbox.RunResult, error) {
	s.bind()
	return s.w.Docker.Run(ctx, s.id, stdin, max, nil, stderr)
}

// FinishFramed is Finish as Docker.RunFramed runs.
func (s *started) FinishFramed(ctx context.Context, stdin []byte, max int64, stderr io.Writer, accept func([]byte) bool) (sandbox.RunResult, error) {
	s.bind()
	return s.w.Docker.RunFramed(ctx, s.id, stdin, max, nil, stderr, accept)
}

// bind records the policy file as the worker's first broker call would
// find it.
func (s *started) bind() {
	var turn string
	s.w.Mu.Lock()
	for _, c := range s.w.Created {
		if "id-"+c.Name == s.id {
			turn = c.Labels[layout.LabelTurn]
		}
	}
	pf := filepath.Join(s.w.Cfg.PolicyDir, turn+".json")
	s.w.Mu.Unlock()
	p, err := policy.Load(pf)
	s.w.WMu.Lock()
	if err == nil {
		s.w.Bound[s.id] = p
	}
	s.w.Inodes[s.id] = Inode(pf)
	s.w.Finishing = append(s.w.Finishing, s.id)
	s.w.WMu.Unlock()
}

func (s *started) Close() { s.closed = true }

// Inode is path's inode number (0 when it cannot be read).
func Inode(path string) uint64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

// HoldRuns makes every container run of d wait for a release of its own:
// a test holds a turn running while it looks at what the kind does beside
// it. started receives each held container's turn id.
func HoldRuns(d *Docker) (started chan string, release func()) {
	started = make(chan string, 16)
	gate := make(chan struct{})
	d.Mu.Lock()
	d.RunFn = func(ctx context.Context, spec sandbox.ContainerSpec, stdin []byte) (sandbox.RunResult, error) {
		started <- spec.Labels[layout.LabelTurn]
		select {
		case <-gate:
		case <-ctx.Done():
			return sandbox.RunResult{ExitCode: -1}, ctx.Err()
		}
		return OKRun(ctx, spec, stdin)
	}
	d.Mu.Unlock()
	var once sync.Once
	return started, func() { once.Do(func() { close(gate) }) }
}

// WaitFor waits until cond holds (failing the test after 5 s): for what a
// kind does in the background, such as preparing a standby.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Index is the position of the n-th (0-based) e in events, or -1.
func Index(events []string, e string, n int) int {
	for i, got := range events {
		if got == e {
			if n == 0 {
				return i
			}
			n--
		}
	}
	return -1
}
