package coderun_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// warmRunDocker is runDocker that can also start a toolbox container apart
// from streaming its job (a run standby), as container.Driver does.
type warmRunDocker struct {
	*runDocker
	wmu      sync.Mutex
	started  map[string]bool // container id -> started ahead of its job
	dead     map[string]bool
	streamed []string // container ids whose job went to a started standby
}

func (w *warmRunDocker) Start(ctx context.Context, id string) (sandbox.StartedContainer, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.started[id] = true
	return &fakeRunStarted{w: w, id: id}, nil
}

func (w *warmRunDocker) Running(ctx context.Context, id string) (bool, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.started[id] && !w.dead[id] && w.IsLive(id), nil
}

type fakeRunStarted struct {
	w  *warmRunDocker
	id string
}

func (s *fakeRunStarted) Finish(context.Context, []byte, int64, io.Writer) (sandbox.RunResult, error) {
	return sandbox.RunResult{ExitCode: -1}, errors.New("fake: a run standby is streamed, never finished")
}
func (s *fakeRunStarted) Close() {}

// Stream gives the job to the started supervisor (runDocker's streamFn).
func (s *fakeRunStarted) Stream(ctx context.Context, stdin []byte, stdout, stderr io.Writer) (int64, error) {
	s.w.wmu.Lock()
	s.w.streamed = append(s.w.streamed, s.id)
	s.w.wmu.Unlock()
	return s.w.runDocker.Stream(ctx, s.id, stdin, stdout, stderr)
}

const runStandbyExtra = `
runs:
  projects:
    - name: demo
      path: /srv/demo
  standby:
    shapes:
      - project: demo
      - setup: true
`

var (
	shapeDemo  = config.RunShape{Project: "demo"}.Name()
	shapeSetup = config.RunShape{Setup: true}.Name()
)

func newRunStandbyRig(t *testing.T, extra string, fn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)) (*rig, *warmRunDocker) {
	t.Helper()
	var w *warmRunDocker
	r, _ := newRunRigWith(t, extra, fn, func(o *sandboxtest.KitOptions) {
		wrap := o.Containers
		o.Containers = func(d *sandboxtest.Docker) sandbox.Containers {
			w = &warmRunDocker{runDocker: wrap(d).(*runDocker), started: map[string]bool{}, dead: map[string]bool{}}
			return w
		}
	})
	return r, w
}

// readyRunStandby waits for shape's ready run standby; its id.
func readyRunStandby(t *testing.T, r *rig, shape string) string {
	t.Helper()
	var id string
	sandboxtest.WaitFor(t, "a ready run standby of "+shape, func() bool {
		st := r.k.StandbyPool().State(shape)
		id = st.TurnID
		return st.State == standby.StateReady
	})
	return id
}

func specOf(r *rig, turn string) (sandbox.ContainerSpec, bool) {
	r.docker.Mu.Lock()
	defer r.docker.Mu.Unlock()
	for _, s := range r.docker.Created {
		if s.Labels[layout.LabelTurn] == turn {
			return s, true
		}
	}
	return sandbox.ContainerSpec{}, false
}

func postRun(t *testing.T, r *rig, p runs.Params) runs.Status {
	t.Helper()
	code, body := apiAs(t, r, clientUID, "POST", "/v1/runs", p)
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/runs: %d %s", code, body)
	}
	var st runs.Status
	must(t, json.Unmarshal(body, &st))
	return st
}

// TestRunStandbyServesRun: a declared shape gets a run standby once the
// host serves: a toolbox container created and started (labelled as a
// standby with its expiry, a deadline record, a run uid slot, listed for
// the reaper). A run of that shape binds it: its job goes to the started
// supervisor, no container is created for it, its output reaches its own
// journal identifier, its status says standby; the shape's next standby
// (another id) is prepared at once; host stop discards it.
func TestRunStandbyServesRun(t *testing.T) {
	r, w := newRunStandbyRig(t, runStandbyExtra, supervise(0))
	if r.k.StandbyPool() == nil {
		t.Fatal("no run standby pool although runs.standby.shapes is set")
	}
	r.k.WarmUp()
	sb := readyRunStandby(t, r, shapeDemo)
	readyRunStandby(t, r, shapeSetup)
	spec, ok := specOf(r, sb)
	if !ok {
		t.Fatalf("no container for run standby %s", sb)
	}
	if spec.Labels[layout.LabelStandby] == "" || spec.Labels[layout.LabelDeadline] != spec.Labels[layout.LabelStandby] ||
		spec.Labels[layout.LabelChannel] != "run-"+sb || spec.Run == nil || spec.Run.Setup || spec.WorkspaceDir != "/srv/demo" || spec.TurnDir != "" {
		t.Errorf("run standby spec %+v run %+v", spec, spec.Run)
	}
	if !w.started["id-"+spec.Name] {
		t.Error("run standby container not started ahead of its run")
	}
	_, pend, err := policy.Read(filepath.Join(r.cfg.PolicyDir, sb+".json"))
	expiry, _ := strconv.ParseInt(spec.Labels[layout.LabelStandby], 10, 64)
	if err != nil || pend == nil || len(pend.Credentials) != 0 || pend.Expiry().Unix() != expiry {
		t.Errorf("deadline record %+v, %v: want a placeholder without credentials expiring at %d", pend, err, expiry)
	}
	listed := map[string]string{}
	for _, a := range r.k.Listed() {
		listed[a.ID] = a.Standby
	}
	if listed[sb] != standby.StateReady {
		t.Errorf("ActiveTurns %v: the ready run standby %s is not listed", listed, sb)
	}

	st := postRun(t, r, runs.Params{Command: "echo hello", Project: "demo"})
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultOK || got.Stdout != "hello\n" || !got.Standby {
		t.Fatalf("run on a standby: %+v", got)
	}
	if _, made := specOf(r, st.ID); made {
		t.Error("a container was created for the run although its standby served it")
	}
	w.wmu.Lock()
	streamed := append([]string(nil), w.streamed...)
	w.wmu.Unlock()
	if len(streamed) != 1 || streamed[0] != "id-"+spec.Name {
		t.Errorf("jobs given to started standbys: %v, want the standby's container", streamed)
	}
	w.runDocker.StreamMu.Lock()
	job := w.runDocker.Jobs[0]
	w.runDocker.StreamMu.Unlock()
	if job.UID != spec.UID || job.Command != "echo hello" {
		t.Errorf("job %+v, want the standby's uid %d", job, spec.UID)
	}
	if lines := r.journal.Lines("sandbox/run-" + st.ID); len(lines) == 0 {
		t.Error("the run's output did not reach its own journal identifier")
	}
	next := readyRunStandby(t, r, shapeDemo)
	if next == sb {
		t.Error("the bound run standby is offered again")
	}
	if _, err := os.Stat(filepath.Join(r.cfg.PolicyDir, sb+".json")); !os.IsNotExist(err) {
		t.Error("the bound standby's deadline record outlived its run")
	}
	r.shutdown()
	r.assertClean(t)
}

// TestRunStandbyOnlyItsShape: a run of an undeclared shape, and a network
// run, take the cold path and leave the standby alone; a cold run beside a
// standby gets another run uid (the standby holds its slot).
func TestRunStandbyOnlyItsShape(t *testing.T) {
	r, w := newRunStandbyRig(t, runStandbyExtra+`egress:
  allow: ["127.0.0.1:8080"]
`, supervise(0))
	r.k.WarmUp()
	sb := readyRunStandby(t, r, shapeDemo)
	readyRunStandby(t, r, shapeSetup)
	sbSpec, _ := specOf(r, sb)
	setupSpec, _ := specOf(r, r.k.StandbyPool().State(shapeSetup).TurnID)

	cold := waitRun(t, r, postRun(t, r, runs.Params{Command: "true"}).ID) // no project, no setup
	if cold.Result != runs.ResultOK || cold.Standby {
		t.Fatalf("run of an undeclared shape: %+v", cold)
	}
	coldSpec, ok := specOf(r, cold.ID)
	if !ok {
		t.Fatal("the cold run made no container")
	}
	if coldSpec.UID == sbSpec.UID || coldSpec.UID == setupSpec.UID {
		t.Errorf("cold run uid %d shares a standby's slot (uids %d, %d)", coldSpec.UID, sbSpec.UID, setupSpec.UID)
	}

	net := postRun(t, r, runs.Params{Command: "true", Project: "demo", Network: true})
	if code, body := apiAs(t, r, os.Getuid(), "POST", "/v1/runs/"+net.ID+"/approve", nil); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	if got := waitRun(t, r, net.ID); got.Result != runs.ResultOK || got.Standby {
		t.Fatalf("network run: %+v", got)
	}
	if st := r.k.StandbyPool().State(shapeDemo); st.State != standby.StateReady || st.TurnID != sb {
		t.Errorf("the demo standby %s was touched: %+v", sb, st)
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if len(w.streamed) != 0 {
		t.Errorf("jobs given to standbys: %v, want none", w.streamed)
	}
}

// TestRunStandbyBoundDeadline: while a bound run runs, its deadline record
// holds the run's deadline, not the standby's expiry (the reaper reads it,
// and it outranks the expiry label).
func TestRunStandbyBoundDeadline(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	r, _ := newRunStandbyRig(t, runStandbyExtra, func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		close(entered)
		<-release
		return supervise(0)(ctx, job, stdout)
	})
	r.k.WarmUp()
	sb := readyRunStandby(t, r, shapeDemo)
	before := time.Now()
	st := postRun(t, r, runs.Params{Command: "true", Project: "demo", TimeoutSeconds: 900})
	<-entered
	_, pend, err := policy.Read(filepath.Join(r.cfg.PolicyDir, sb+".json"))
	if err != nil || pend == nil {
		t.Fatalf("deadline record during the run: %v", err)
	}
	if d := pend.Expiry().Sub(before); d < 899*time.Second || d > 901*time.Second+time.Minute {
		t.Errorf("deadline record %v after the run began, want its 900 s timeout", d)
	}
	listed := false
	for _, a := range r.k.Listed() {
		if a.ID == sb && a.Standby == "" {
			listed = true
		}
	}
	if !listed {
		t.Error("the bound standby's id is not listed (as a run) while its run runs")
	}
	close(release)
	if got := waitRun(t, r, st.ID); got.Result != runs.ResultOK || !got.Standby {
		t.Fatalf("run: %+v", got)
	}
}

// TestRunStandbyDeadTakesColdPath: a run standby whose container died is
// found at bind time; the run succeeds on the cold path, the dead one is
// removed and the shape gets a new one.
func TestRunStandbyDeadTakesColdPath(t *testing.T) {
	r, w := newRunStandbyRig(t, runStandbyExtra, supervise(0))
	r.k.WarmUp()
	sb := readyRunStandby(t, r, shapeDemo)
	w.wmu.Lock()
	for id := range w.started {
		w.dead[id] = true
	}
	w.wmu.Unlock()
	got := waitRun(t, r, postRun(t, r, runs.Params{Command: "true", Project: "demo"}).ID)
	if got.Result != runs.ResultOK || got.Standby {
		t.Fatalf("run after a dead standby: %+v", got)
	}
	if next := readyRunStandby(t, r, shapeDemo); next == sb {
		t.Error("the dead standby is still offered")
	}
	sandboxtest.WaitFor(t, "the dead standby removed", func() bool {
		_, err := os.Stat(filepath.Join(r.cfg.PolicyDir, sb+".json"))
		return os.IsNotExist(err)
	})
	r.shutdown()
	r.assertClean(t)
}

// TestRunStandbySetupShapeAndCap: a setup shape's standby starts as root
// with its slot's gate; runs.standby.max caps standbys across shapes.
func TestRunStandbySetupShapeAndCap(t *testing.T) {
	r, _ := newRunStandbyRig(t, runStandbyExtra+"    max: 1\n", supervise(0))
	r.k.WarmUp()
	sb := readyRunStandby(t, r, shapeDemo)
	if st := r.k.StandbyPool().State(shapeSetup); st.State != standby.StateNone {
		t.Errorf("setup shape has a standby (%s) beyond runs.standby.max 1", st.State)
	}
	got := waitRun(t, r, postRun(t, r, runs.Params{Command: "true", Setup: []string{"true"}}).ID)
	if got.Standby {
		t.Error("a setup run used a standby although none was made for its shape")
	}
	r.shutdown()
	r.assertClean(t)

	r2, _ := newRunStandbyRig(t, runStandbyExtra, supervise(0))
	r2.k.WarmUp()
	setup := readyRunStandby(t, r2, shapeSetup)
	spec, _ := specOf(r2, setup)
	if spec.Run == nil || !spec.Run.Setup || spec.Run.GateDir == "" {
		t.Fatalf("setup standby spec %+v run %+v: want setup with a gate", spec, spec.Run)
	}
	got = waitRun(t, r2, postRun(t, r2, runs.Params{Command: "true", Setup: []string{"true"}}).ID)
	if got.Result != runs.ResultOK || !got.Standby {
		t.Fatalf("setup run: %+v", got)
	}
	_ = sb
}

// TestRunStandbyNoProjectIsNotProjectNone: "none" is a valid project name,
// and a shape without a project once shared its pool entry with a shape of
// project "none" (both named project=none): with {project: none} declared
// first, a run that asked for no project bound that project's standby and
// got the project at /workspace. Each run must bind its own shape's standby.
func TestRunStandbyNoProjectIsNotProjectNone(t *testing.T) {
	r, w := newRunStandbyRig(t, `
runs:
  projects:
    - name: none
      path: /srv/none
  standby:
    shapes:
      - project: none
      - {}
`, supervise(0))
	noProject := config.RunShape{}.Name()
	projectNone := config.RunShape{Project: "none"}.Name()
	r.k.WarmUp()
	readyRunStandby(t, r, projectNone)
	readyRunStandby(t, r, noProject)
	for _, tc := range []struct {
		project       string
		wantWorkspace func(string) bool
	}{
		{"", func(dir string) bool { return dir != "/srv/none" }},
		{"none", func(dir string) bool { return dir == "/srv/none" }},
	} {
		w.wmu.Lock()
		before := len(w.streamed)
		w.wmu.Unlock()
		got := waitRun(t, r, postRun(t, r, runs.Params{Command: "true", Project: tc.project}).ID)
		if got.Result != runs.ResultOK || !got.Standby {
			t.Fatalf("run with project %q: %+v, want ok on a standby", tc.project, got)
		}
		w.wmu.Lock()
		streamed := append([]string(nil), w.streamed[before:]...)
		w.wmu.Unlock()
		if len(streamed) != 1 {
			t.Fatalf("run with project %q: jobs given to standbys %v, want one", tc.project, streamed)
		}
		var spec sandbox.ContainerSpec
		r.docker.Mu.Lock()
		for _, s := range r.docker.Created {
			if "id-"+s.Name == streamed[0] {
				spec = s
			}
		}
		r.docker.Mu.Unlock()
		if !tc.wantWorkspace(spec.WorkspaceDir) {
			t.Errorf("run with project %q bound standby %s with %s at /workspace", tc.project, spec.Name, spec.WorkspaceDir)
		}
	}
	r.shutdown()
	r.assertClean(t)
}
