package host

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// runDocker adds a hand-written RunContainers to fakeDocker: streamFn plays
// the toolbox's supervisor, writing frames to stdout.
type runDocker struct {
	*fakeDocker
	gone     atomic.Bool // Docker stopped answering
	mu       sync.Mutex
	jobs     []wire.Job
	streamFn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)
}

func (d *runDocker) Stream(ctx context.Context, id string, stdin []byte, stdout, stderr io.Writer) (int64, error) {
	job, err := wire.ReadJob(strings.NewReader(string(stdin)))
	if err != nil {
		return -1, err
	}
	d.mu.Lock()
	d.jobs = append(d.jobs, job)
	fn := d.streamFn
	d.mu.Unlock()
	io.WriteString(stderr, "supervisor: started\n")
	return fn(ctx, job, stdout)
}

// supervise is a well-behaved supervisor: "hello\n" on stdout, "warn\n" on
// stderr, the given exit code, and each requested artifact as "data:<path>".
func supervise(exit int) func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
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

// Ping fails once the test took Docker away (gone).
func (d *runDocker) Ping(ctx context.Context) error {
	if d.gone.Load() {
		return errors.New("fake: Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
	}
	return nil
}

func newRunRig(t *testing.T, extra string, fn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)) (*rig, *runDocker) {
	t.Helper()
	return newRunRigWith(t, extra, fn, nil)
}

func newRunRigWith(t *testing.T, extra string, fn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error), mutate func(*Options)) (*rig, *runDocker) {
	t.Helper()
	rd := &runDocker{streamFn: fn}
	r := newRig(t, extra, func(o *Options) {
		rd.fakeDocker = o.Containers.(*fakeDocker)
		o.Containers = rd
		o.Access = config.ResolvedAccess{ClientUIDs: []int{clientUID, otherUID}, Guests: o.Config.Guests}
		if mutate != nil {
			mutate(o)
		}
	})
	t.Cleanup(r.h.Shutdown)
	return r, rd
}

// apiAs calls the host's handler as a peer uid.
func apiAs(t *testing.T, h *Host, uid int, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req := httptest.NewRequest(method, path, rd)
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, Peer{Known: true, UID: uid, GID: uid}))
	w := httptest.NewRecorder()
	h.Handler().ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

func waitRun(t *testing.T, h *Host, id string) runs.Status {
	t.Helper()
	r, err := h.codeRuns().Registry().Get(id)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %s did not finish: %+v", id, r.Status())
	}
	return r.Status()
}

// Peers of these tests: the config's default clients are the
// sandbox-clients group, which a test peer is not in; the host's own uid
// is an admin, so admin calls use it and client calls an api.clients uid.
const (
	clientUID = 4242
	otherUID  = 4343
)

const runsExtra = `
egress:
  allow: ["127.0.0.1:8080"]
runs:
  projects:
    - name: demo
      path: /srv/demo
`

// The code-run kind's own tests are pkg/coderun's (runs_test.go there);
// what stays here is the host's: its router's role refusals.

// TestRunRoutesRefuseByRole: the host's router refuses a stranger's run
// and a client's approval (even of its own run) with 403, creating nothing.
func TestRunRoutesRefuseByRole(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	if code, _ := apiAs(t, r.h, 5555, "POST", "/v1/runs", runs.Params{Command: "x"}); code != http.StatusForbidden {
		t.Errorf("a stranger: %d, want 403", code)
	}
	st, err := r.h.codeRuns().Start(runs.Params{Command: "curl http://127.0.0.1:8080/", Network: true}, clientUID)
	must(t, err)
	// A client cannot approve, not even its own run.
	if code, _ := apiAs(t, r.h, clientUID, "POST", "/v1/runs/"+st.ID+"/approve", nil); code != http.StatusForbidden {
		t.Errorf("client approve: %d, want 403", code)
	}
	if n := len(r.docker.Created); n != 0 {
		t.Errorf("%d containers created for refused calls", n)
	}
}

// bigSupervise (pkg/coderun has its twin) is a supervisor at every bound of its job; when held is not
// nil it tells sent (artifacts handed to the host) and waits on held
// before its result.
func bigSupervise(sent chan<- struct{}, held <-chan struct{}) func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
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
