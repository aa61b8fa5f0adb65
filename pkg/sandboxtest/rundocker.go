package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// StreamFunc plays the toolbox's supervisor for one code run: it reads the
// job and writes the run's frames to stdout.
type StreamFunc func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)

// RunDocker adds a hand-written RunContainers to Docker: StreamFn plays
// the toolbox's supervisor, writing frames to stdout.
type RunDocker struct {
	*Docker
	Gone     atomic.Bool // Docker stopped answering
	StreamMu sync.Mutex  // guards Jobs and StreamFn
	Jobs     []wire.Job
	StreamFn StreamFunc
}

func (d *RunDocker) Stream(ctx context.Context, id string, stdin []byte, stdout, stderr io.Writer) (int64, error) {
	job, err := wire.ReadJob(strings.NewReader(string(stdin)))
	if err != nil {
		return -1, err
	}
	d.StreamMu.Lock()
	d.Jobs = append(d.Jobs, job)
	fn := d.StreamFn
	d.StreamMu.Unlock()
	io.WriteString(stderr, "supervisor: started\n")
	return fn(ctx, job, stdout)
}

// Ping fails once the test took Docker away (Gone).
func (d *RunDocker) Ping(ctx context.Context) error {
	if d.Gone.Load() {
		return errors.New("fake: Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	}
	return nil
}

// Supervise is a well-behaved supervisor: "hello\n" on stdout, "warn\n" on
// stderr, the given exit code, and each requested artifact as "data:<path>".
func Supervise(exit int) StreamFunc {
	return func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		enc := wire.NewEncoder(stdout)
		must := func(err error) {
			if err != nil {
				panic(err)
			}
		}
		for i := range job.Setup {
			must(enc.Output(wire.FrameStdout, wire.PhaseSetup, []byte("setting up\n")))
			must(enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseSetup, Index: i + 1, ExitCode: 0}))
		}
		must(enc.Output(wire.FrameStdout, wire.PhaseMain, []byte("hello\n")))
		must(enc.Output(wire.FrameStderr, wire.PhaseMain, []byte("warn\n")))
		must(enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain, ExitCode: exit}))
		for _, a := range job.Artifacts {
			data := []byte("data:" + a)
			must(enc.Artifact(wire.ArtifactHeader{Path: a, Size: int64(len(data))}, data))
		}
		must(enc.Result(wire.Result{ExitCode: exit}))
		return 0, nil
	}
}

// BigSupervise is a supervisor at every bound of its job; when held is not
// nil it tells sent (artifacts handed to the host) and waits on held
// before its result.
func BigSupervise(sent chan<- struct{}, held <-chan struct{}) StreamFunc {
	return func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		enc := wire.NewEncoder(stdout)
		chunk := make([]byte, wire.MaxChunk)
		for i := range chunk {
			chunk[i] = 'x'
		}
		for _, s := range []wire.FrameType{wire.FrameStdout, wire.FrameStderr} {
			for n := 0; n < job.MaxOutputBytes; n += len(chunk) {
				if err := enc.Output(s, wire.PhaseMain, chunk[:min(len(chunk), job.MaxOutputBytes-n)]); err != nil {
					return -1, err
				}
			}
		}
		if err := enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain}); err != nil {
			return -1, err
		}
		left := job.MaxArtifactTotalBytes
		for _, a := range job.Artifacts {
			size := min(left, job.MaxArtifactBytes)
			left -= size
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i * 7)
			}
			if err := enc.Artifact(wire.ArtifactHeader{Path: a, Size: size}, data); err != nil {
				return -1, err
			}
		}
		if sent != nil {
			sent <- struct{}{}
			select {
			case <-held:
			case <-ctx.Done():
				return -1, ctx.Err()
			}
		}
		return 0, enc.Result(wire.Result{})
	}
}

// ChownCall is one change of owner a Chowns recorded.
type ChownCall struct {
	Dir      string
	UID, GID int
}

// Chowns records changes of owner instead of making them (tests need not
// be root).
type Chowns struct {
	mu    sync.Mutex
	calls []ChownCall
}

// Chown records dir's new owner.
func (c *Chowns) Chown(dir string, uid, gid int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, ChownCall{dir, uid, gid})
	return nil
}

// Calls are the changes recorded so far.
func (c *Chowns) Calls() []ChownCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// LockedBuffer is a log written by goroutines and read by a test.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
