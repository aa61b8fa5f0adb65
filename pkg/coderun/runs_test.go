package coderun_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

const runsExtra = `
egress:
  allow: ["127.0.0.1:8080"]
runs:
  projects:
    - name: demo
      path: /srv/demo
`

func TestRunShellAndArtifacts(t *testing.T) {
	r, rd := newRunRig(t, runsExtra, supervise(0))
	code, body := apiAs(t, r, clientUID, "POST", "/v1/runs", runs.Params{Command: "echo hello", Project: "demo", Artifacts: []string{"out/report.txt"}})
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/runs: %d %s", code, body)
	}
	var st runs.Status
	must(t, json.Unmarshal(body, &st))
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultOK || got.ExitCode == nil || *got.ExitCode != 0 || got.Stdout != "hello\n" || got.Stderr != "warn\n" {
		t.Fatalf("run: %+v", got)
	}
	if len(got.Artifacts) != 1 || string(got.Artifacts[0].Data) != "data:out/report.txt" {
		t.Errorf("artifacts %+v", got.Artifacts)
	}
	spec := r.docker.Created[0]
	if spec.Run == nil || spec.Run.Setup || spec.Run.GateDir != "" || spec.WorkspaceDir != "/srv/demo" || spec.TurnDir != "" || spec.Image != layout.DefaultToolboxImage {
		t.Errorf("container spec %+v run %+v", spec, spec.Run)
	}
	if spec.Labels[layout.LabelTurn] != st.ID || spec.Labels[layout.LabelChannel] != "run-"+st.ID || spec.LogTag != "sandbox/run-"+st.ID {
		t.Errorf("labels %v log tag %s", spec.Labels, spec.LogTag)
	}
	job := rd.Jobs[0]
	if job.Command != "echo hello" || job.UID != spec.UID || job.UID < r.cfg.Guests.UIDBase || job.Proxy {
		t.Errorf("job %+v (uid of the spec %d)", job, spec.UID)
	}
	if lines := r.journal.Lines("sandbox/run-" + st.ID); !slices.Contains(lines, "hello") || !slices.Contains(lines, "warn") {
		t.Errorf("journal sandbox/run-%s: %q", st.ID, lines)
	}
	if n := len(r.units.Started); n != 0 {
		t.Errorf("a run without network started %d broker units", n)
	}
	r.assertClean(t)
	// Another client does not see the run; its owner does.
	if code, _ := apiAs(t, r, otherUID, "GET", "/v1/runs/"+st.ID, nil); code != http.StatusNotFound {
		t.Errorf("another client's GET: %d, want 404", code)
	}
	if code, _ := apiAs(t, r, clientUID, "GET", "/v1/runs/"+st.ID, nil); code != http.StatusOK {
		t.Errorf("owner's GET: %d", code)
	}
	code, body = apiAs(t, r, otherUID, "GET", "/v1/runs", nil)
	var list coderun.RunList
	json.Unmarshal(body, &list)
	if code != 200 || len(list.Runs) != 0 {
		t.Errorf("another client's list: %d %s", code, body)
	}
}

// Another client's run answers exactly as a run that does not exist: a
// client must not learn which ids are live (issue 24 follow-up).
func TestAnotherClientsRunAnswersAsNoSuchRun(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	st, err := r.k.Start(runs.Params{Command: "true"}, clientUID)
	must(t, err)
	waitRun(t, r, st.ID)
	const missing = "0123456789abcdef0123456789abcdef" // well-formed, never created
	for _, rt := range []struct{ method, path string }{
		{"GET", "/v1/runs/%s"},
		{"GET", "/v1/runs/%s/events"},
		{"POST", "/v1/runs/%s/cancel"},
	} {
		theirs, theirBody := apiAs(t, r, otherUID, rt.method, fmt.Sprintf(rt.path, st.ID), nil)
		none, noneBody := apiAs(t, r, otherUID, rt.method, fmt.Sprintf(rt.path, missing), nil)
		if theirs != http.StatusNotFound || theirs != none || !bytes.Equal(theirBody, noneBody) {
			t.Errorf("%s %s: another client's run answers %d %q, a missing run %d %q: want the same 404 byte for byte",
				rt.method, rt.path, theirs, theirBody, none, noneBody)
		}
	}
}

func TestRunFailedExitAndSetup(t *testing.T) {
	r, rd := newRunRig(t, runsExtra, supervise(3))
	st, err := r.k.Start(runs.Params{Executable: "false", Setup: []string{"apt-get install -y jq"}}, clientUID)
	must(t, err)
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultFailed || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Errorf("run: %+v", got)
	}
	spec := r.docker.Created[0]
	if !spec.Run.Setup {
		t.Errorf("a run with setup must start as root with the setup capabilities: %+v", spec.Run)
	}
	// The project's gate: given to the slot's guest uid:gid (Lchown),
	// 0700, the empty mount point inside.
	gate := filepath.Join(r.cfg.WorkspaceRoot, ".run-gates", "0")
	if spec.Run.GateDir != gate {
		t.Errorf("gate dir %q, want %q", spec.Run.GateDir, gate)
	}
	if st, err := os.Lstat(gate); err != nil || st.Mode().Perm() != 0o700 || !st.IsDir() {
		t.Errorf("gate %v, %v; want a directory of mode 0700", st, err)
	}
	if st, err := os.Lstat(filepath.Join(gate, "workspace")); err != nil || !st.IsDir() {
		t.Errorf("gate mount point: %v", err)
	}
	if !slices.Contains(r.chownCalls(), chownCall{Dir: gate, UID: spec.UID, GID: spec.GID}) || spec.UID != spec.GID {
		t.Errorf("chowns %v, want %s given to the run's uid:gid %d:%d", r.chownCalls(), gate, spec.UID, spec.GID)
	}
	if j := rd.Jobs[0]; !slices.Equal(j.Argv, []string{"false"}) || len(j.Setup) != 1 {
		t.Errorf("job %+v", j)
	}
	r.assertClean(t)
}

// A gate the host did not make (a symlink planted at the slot's gate) is
// never used: the run fails before any container exists.
func TestRunGateRefusesALink(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	root := filepath.Join(r.cfg.WorkspaceRoot, ".run-gates")
	must(t, os.Mkdir(root, 0o700))
	must(t, os.Symlink(t.TempDir(), filepath.Join(root, "0")))
	st, err := r.k.Start(runs.Params{Executable: "true", Setup: []string{"true"}}, clientUID)
	must(t, err)
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultError || !strings.Contains(got.Error, "project gate") {
		t.Errorf("run: %+v, want an error naming the project gate", got)
	}
	if n := len(r.docker.Created); n != 0 {
		t.Errorf("%d containers created", n)
	}
}

func TestRunRefusals(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	for _, c := range []struct {
		name string
		p    runs.Params
	}{
		{"both modes", runs.Params{Command: "x", Executable: "y"}},
		{"neither mode", runs.Params{}},
		{"unknown project", runs.Params{Command: "x", Project: "nope"}},
		{"absolute artifact", runs.Params{Command: "x", Artifacts: []string{"/etc/passwd"}}},
		{"dotdot artifact", runs.Params{Command: "x", Artifacts: []string{"../x"}}},
		{"timeout", runs.Params{Command: "x", TimeoutSeconds: 3601}},
		{"job over its bound", runs.Params{Command: strings.Repeat("x", 60<<10), Setup: slices.Repeat([]string{strings.Repeat("y", 60<<10)}, 20)}},
	} {
		code, body := apiAs(t, r, clientUID, "POST", "/v1/runs", c.p)
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.name, code, body)
		}
		if c.name == "job over its bound" && !strings.Contains(string(body), "together are over") {
			t.Errorf("%s: %s, want the job bound named", c.name, body)
		}
	}
	if n := len(r.docker.Created); n != 0 {
		t.Errorf("%d containers created for refused runs", n)
	}
}

func TestRunNetworkApproval(t *testing.T) {
	r, rd := newRunRig(t, runsExtra, supervise(0))
	st, err := r.k.Start(runs.Params{Command: "curl http://127.0.0.1:8080/", Network: true}, clientUID)
	must(t, err)
	if st.State != runs.StateAwaitingApproval {
		t.Fatalf("state %s, want awaiting_approval", st.State)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(r.docker.Created); n != 0 {
		t.Fatalf("a container exists before approval")
	}
	if code, body := apiAs(t, r, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/approve", nil); code != http.StatusOK {
		t.Fatalf("admin approve: %d %s", code, body)
	}
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultOK || got.ApprovedBy == nil {
		t.Fatalf("run %+v", got)
	}
	pol := r.docker.Policies[0]
	if pol == nil || !pol.EgressOnly || pol.Egress == nil || !slices.Equal(pol.EgressAllow, []string{"127.0.0.1:8080"}) || pol.Model != (policy.Model{}) {
		t.Errorf("policy at create: %+v", pol)
	}
	if spec := r.docker.Created[0]; spec.TurnDir == "" || !rd.Jobs[0].Proxy {
		t.Errorf("a network run needs its turn dir and the bridge: %+v %+v", spec, rd.Jobs[0])
	}
	if n := len(r.units.Started); n != 1 {
		t.Errorf("broker units started %d, want 1", n)
	}
	// Approving again is refused.
	if code, _ := apiAs(t, r, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/approve", nil); code != http.StatusConflict {
		t.Errorf("second approve: %d, want 409", code)
	}
	r.assertClean(t)
}

func TestRunNetworkDeniedAndCancelled(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	st, err := r.k.Start(runs.Params{Command: "x", Network: true}, clientUID)
	must(t, err)
	if code, _ := apiAs(t, r, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/deny", nil); code != http.StatusOK {
		t.Fatalf("deny: %d", code)
	}
	if got := waitRun(t, r, st.ID); got.Result != runs.ResultDenied {
		t.Errorf("denied run: %+v", got)
	}
	// Cancel while waiting.
	st, err = r.k.Start(runs.Params{Command: "x", Network: true}, clientUID)
	must(t, err)
	if code, _ := apiAs(t, r, clientUID, "POST", "/v1/runs/"+st.ID+"/cancel", nil); code != http.StatusOK {
		t.Fatalf("owner cancel: %d", code)
	}
	if got := waitRun(t, r, st.ID); got.Result != runs.ResultCancelled {
		t.Errorf("cancelled run: %+v", got)
	}
	if n := len(r.docker.Created); n != 0 {
		t.Errorf("%d containers for runs that never got network", n)
	}
	r.assertClean(t)
}

func TestRunTimeoutAndCancelRemove(t *testing.T) {
	block := func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		wire.NewEncoder(stdout).Output(wire.FrameStdout, wire.PhaseMain, []byte("started\n"))
		<-ctx.Done()
		return -1, ctx.Err()
	}
	r, _ := newRunRig(t, runsExtra, block)
	st, err := r.k.Start(runs.Params{Command: "sleep 100", TimeoutSeconds: 1}, clientUID)
	must(t, err)
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultTimeout || !strings.Contains(got.Error, "1 s timeout") || got.Stdout != "started\n" {
		t.Errorf("timed out run: %+v", got)
	}
	st, err = r.k.Start(runs.Params{Command: "sleep 100"}, clientUID)
	must(t, err)
	run, _ := r.k.Registry().Get(st.ID)
	for run.Status().State != runs.StateRunning {
		time.Sleep(5 * time.Millisecond)
	}
	// The reaper's contract: a running run is listed with the turns.
	listed := false
	for _, a := range r.k.Listed() {
		listed = listed || (a.ID == st.ID && a.Run && a.ChannelTag == "run-"+st.ID)
	}
	if !listed {
		t.Errorf("a running run is not in ActiveTurns: %+v", r.k.Listed())
	}
	if code, _ := apiAs(t, r, otherUID, "POST", "/v1/runs/"+st.ID+"/cancel", nil); code != http.StatusNotFound {
		t.Errorf("another client's cancel: %d, want 404", code)
	}
	if code, _ := apiAs(t, r, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/cancel", nil); code != http.StatusOK {
		t.Errorf("admin cancel: %d", code)
	}
	if got := waitRun(t, r, st.ID); got.Result != runs.ResultCancelled {
		t.Errorf("cancelled run: %+v", got)
	}
	if n := len(r.docker.Removes); n != 2 {
		t.Errorf("removals %d, want 2", n)
	}
	r.assertClean(t)
}

// TestRunHostileSupervisor: a container that breaks the frame protocol
// (garbage, lies about artifacts) gets an error result, and its container
// is removed all the same.
func TestRunHostileSupervisor(t *testing.T) {
	for name, fn := range map[string]func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error){
		"garbage": func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
			_, err := stdout.Write([]byte("this is not a frame stream at all, just text\n"))
			return 0, err
		},
		"no result": func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
			wire.NewEncoder(stdout).Output(wire.FrameStdout, wire.PhaseMain, []byte("x"))
			return 0, nil
		},
		"artifact not requested": func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
			enc := wire.NewEncoder(stdout)
			enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain})
			if err := enc.Artifact(wire.ArtifactHeader{Path: "other.txt", Size: 1}, []byte("x")); err != nil {
				return 0, err
			}
			return 0, enc.Result(wire.Result{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, _ := newRunRig(t, runsExtra, fn)
			st, err := r.k.Start(runs.Params{Command: "x", Artifacts: []string{"a.txt"}}, clientUID)
			must(t, err)
			got := waitRun(t, r, st.ID)
			if got.Result != runs.ResultError || got.Error == "" {
				t.Errorf("%+v", got)
			}
			r.assertClean(t)
		})
	}
}

// TestRunEventsStream: GET /v1/runs/{id}/events replays and ends with the
// result event.
func TestRunEventsStream(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	st, err := r.k.Start(runs.Params{Command: "x"}, clientUID)
	must(t, err)
	waitRun(t, r, st.ID)
	code, body := apiAs(t, r, clientUID, "GET", "/v1/runs/"+st.ID+"/events", nil)
	if code != 200 {
		t.Fatalf("events: %d", code)
	}
	var types []string
	var out string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		var ev runs.Event
		must(t, json.Unmarshal(sc.Bytes(), &ev))
		types = append(types, ev.Type)
		if ev.Type == runs.EventOutput && ev.Stream == runs.StreamStdout {
			out += string(ev.Data)
		}
	}
	if len(types) == 0 || types[len(types)-1] != runs.EventResult || out != "hello\n" {
		t.Errorf("events %v, stdout %q", types, out)
	}
}

// TestRunShutdownCancelsWaiting: a stopping host finishes runs that wait
// for approval as cancelled, creating nothing.
func TestRunShutdownCancelsWaiting(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	st, err := r.k.Start(runs.Params{Command: "x", Network: true}, clientUID)
	must(t, err)
	r.shutdown()
	got := waitRun(t, r, st.ID)
	if got.Result != runs.ResultCancelled || got.Error != "the host stopped" {
		t.Errorf("%+v", got)
	}
	if _, err := r.k.Start(runs.Params{Command: "x"}, clientUID); !errors.Is(err, sandbox.ErrShuttingDown) {
		t.Errorf("a run after shutdown: %v", err)
	}
	if len(r.docker.Created) != 0 {
		t.Errorf("containers created")
	}
	_ = filepath.Join
}

// TestRunEmptyWorkspaceEnterable: the empty /workspace of a run without a
// project is 0555 whatever the umask (the unit's is 0077) and whatever an
// older host left, so the run's uid can enter it.
func TestRunEmptyWorkspaceEnterable(t *testing.T) {
	r, _ := newRunRig(t, "", supervise(0))
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, tc := range []struct {
		name string
		pre  func(dir string)
	}{
		{"made under umask 0077", func(string) {}},
		{"left 0500 by an older host", func(dir string) { must(t, os.Chmod(dir, 0o500)) }},
	} {
		dir := filepath.Join(r.cfg.WorkspaceRoot, ".run-empty")
		tc.pre(dir)
		got, err := r.k.Workspace("")
		if err != nil || got != dir {
			t.Fatalf("%s: runWorkspace = %q, %v; want %q", tc.name, got, err, dir)
		}
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm() != 0o555 {
			t.Errorf("%s: mode %v (%v), want 0555", tc.name, st.Mode().Perm(), err)
		}
	}
}

// TestRunBodyBound: a POST /v1/runs body over coderun.MaxRunBodyBytes is refused
// with 413 and creates nothing.
func TestRunBodyBound(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	code, body := apiAs(t, r, clientUID, "POST", "/v1/runs", runs.Params{Command: strings.Repeat("x", coderun.MaxRunBodyBytes)})
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("%d %s, want 413", code, body)
	}
	if len(r.k.Registry().List()) != 0 || len(r.docker.Created) != 0 {
		t.Errorf("a refused body created a run")
	}
}

// TestRunOutputCutIsReported: a run whose output passed runs.maxOutputBytes
// says so in its document (which streams, bytes dropped), whatever its
// result, as the supervisor's result said.
func TestRunOutputCutIsReported(t *testing.T) {
	for _, tc := range []struct {
		name       string
		res        wire.Result
		wantResult string
	}{
		{"ok", wire.Result{StdoutTruncated: true, StdoutDropped: 314572800}, runs.ResultOK},
		{"supervisor error", wire.Result{ExitCode: -1, Error: "stopped by a signal", StdoutTruncated: true, StdoutDropped: 9}, runs.ResultError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRunRig(t, runsExtra, func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
				enc := wire.NewEncoder(stdout)
				must(t, enc.Output(wire.FrameStdout, wire.PhaseMain, make([]byte, job.MaxOutputBytes)))
				if tc.res.Error == "" {
					must(t, enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain}))
				}
				must(t, enc.Result(tc.res))
				return 0, nil
			})
			st, err := r.k.Start(runs.Params{Command: "yes"}, clientUID)
			must(t, err)
			waitRun(t, r, st.ID)
			code, body := apiAs(t, r, clientUID, "GET", "/v1/runs/"+st.ID, nil)
			var got map[string]any
			must(t, json.Unmarshal(body, &got))
			if code != 200 || got["result"] != tc.wantResult || got["stdoutTruncated"] != true ||
				got["stdoutDroppedBytes"] != float64(tc.res.StdoutDropped) || got["stderrTruncated"] != nil {
				t.Errorf("GET: %d result %v stdoutTruncated %v stdoutDroppedBytes %v stderrTruncated %v", code,
					got["result"], got["stdoutTruncated"], got["stdoutDroppedBytes"], got["stderrTruncated"])
			}
		})
	}
}

// TestRunBlamesDockerWhenItWentAway: a run that ends because the Docker
// daemon went away (systemctl restart docker stops every container: the
// supervisor reports a signal; a crash breaks the attach and the wait) says
// "docker went away" in its document and the log, not that the sandbox or
// the run's output failed; while Docker answers, the old causes stand.
func TestRunBlamesDockerWhenItWentAway(t *testing.T) {
	stopped := func(rd **runDocker, goAway bool) func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		return func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
			enc := wire.NewEncoder(stdout)
			enc.Output(wire.FrameStdout, wire.PhaseMain, []byte("working\n"))
			(*rd).Gone.Store(goAway)
			return 2, enc.Result(wire.Result{ExitCode: -1, Error: wire.ErrorStopped})
		}
	}
	attachBroke := func(rd **runDocker, goAway bool) func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		return func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
			wire.NewEncoder(stdout).Output(wire.FrameStdout, wire.PhaseMain, []byte("working\n"))
			(*rd).Gone.Store(goAway)
			return -1, errors.New("container wait: EOF: docker daemon request failed")
		}
	}
	for _, tc := range []struct {
		name        string
		fn          func(rd **runDocker, goAway bool) func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)
		goAway      bool
		removeFails int
		want        string
	}{
		{"signal, docker gone", stopped, true, 0, coderun.ErrorDockerWentAway},
		{"attach and wait broke, docker gone", attachBroke, true, 0, coderun.ErrorDockerWentAway},
		{"docker gone, cleanup failed", stopped, true, -1, "docker went away during the run and its cleanup failed; the operator was told"},
		{"signal, docker answers", stopped, false, 0, "the sandbox could not run the command: stopped by a signal"},
		{"attach broke, docker answers", attachBroke, false, 0, "the run's output broke the protocol and was refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			var rd *runDocker
			r, got := newRunRigWith(t, runsExtra, tc.fn(&rd, tc.goAway), func(o *sandboxtest.KitOptions) {
				o.Logger = slog.New(slog.NewJSONHandler(logs, nil))
				o.RemoveRetryTotal = 20 * time.Millisecond
			})
			rd = got
			rd.StreamMu.Lock()
			rd.RemoveFails = tc.removeFails
			rd.StreamMu.Unlock()
			st, err := r.k.Start(runs.Params{Command: "sleep 600"}, clientUID)
			must(t, err)
			fin := waitRun(t, r, st.ID)
			if fin.Result != runs.ResultError || fin.Error != tc.want {
				t.Errorf("run %s: %q, want error %q", fin.Result, fin.Error, tc.want)
			}
			if gone := strings.Contains(logs.String(), `"msg":"run failed: docker went away"`); gone != tc.goAway {
				t.Errorf("log says docker went away: %v, want %v:\n%s", gone, tc.goAway, logs.String())
			}
		})
	}
}

// TestRunsInFlightBounds: past runs.maxInFlightPerClient a client's POST
// /v1/runs is refused at once with 429 naming the key, another client is
// still admitted, and past runs.maxInFlight every client is; nothing is
// created for a refused run.
func TestRunsInFlightBounds(t *testing.T) {
	release := make(chan struct{})
	r, _ := newRunRig(t, runsExtra+"  maxInFlight: 3\n  maxInFlightPerClient: 2\n", func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return -1, ctx.Err()
		}
		return supervise(0)(ctx, job, stdout)
	})
	post := func(uid int) (int, string) {
		code, body := apiAs(t, r, uid, "POST", "/v1/runs", runs.Params{Command: "sleep 1"})
		return code, string(body)
	}
	var admitted []string
	for _, step := range []struct {
		uid      int
		wantCode int
		wantBody string
	}{
		{clientUID, 202, ""},
		{clientUID, 202, ""},
		{clientUID, 429, "too many unfinished runs of yours (at most 2, runs.maxInFlightPerClient); try again when one has finished"},
		{otherUID, 202, ""},
		{otherUID, 429, "too many unfinished runs on this host (at most 3, runs.maxInFlight); try again when one has finished"},
	} {
		code, body := post(step.uid)
		if code != step.wantCode || !strings.Contains(body, step.wantBody) {
			t.Fatalf("POST as %d: %d %s, want %d %q", step.uid, code, body, step.wantCode, step.wantBody)
		}
		if code == 202 {
			var st runs.Status
			must(t, json.Unmarshal([]byte(body), &st))
			admitted = append(admitted, st.ID)
		}
	}
	if n := len(r.k.Registry().List()); n != 3 {
		t.Errorf("%d runs recorded, want the 3 admitted", n)
	}
	close(release)
	for _, id := range admitted {
		waitRun(t, r, id)
	}
	if code, body := post(clientUID); code != 202 {
		t.Errorf("POST after the runs finished: %d %s", code, body)
	}
}

// TestRunsRetainedBytesBound: finished runs hold at most
// runs.maxRetainedBytes once past runs.resultHoldSeconds; the oldest is
// forgotten first.
func TestRunsRetainedBytesBound(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	const art = 3 << 20
	// One run at its bounds: 2 KiB of output, 4 MiB of events, 3 MiB of
	// artifacts; two real ones (3 MiB and a few events each) fit, not three.
	extra := runsExtra + "  maxOutputBytes: 1024\n  maxArtifactBytes: 3145728\n  maxArtifactTotalBytes: 3145728\n  maxRetainedBytes: 7342080\n"
	r, _ := newRunRigWith(t, extra, func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		enc := wire.NewEncoder(stdout)
		must(t, enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain}))
		must(t, enc.Artifact(wire.ArtifactHeader{Path: job.Artifacts[0], Size: art}, make([]byte, art)))
		return 0, enc.Result(wire.Result{})
	}, func(o *sandboxtest.KitOptions) { o.Now = clock })
	var ids []string
	for range 3 {
		st, err := r.k.Start(runs.Params{Command: "x", Artifacts: []string{"a"}}, clientUID)
		must(t, err)
		ids = append(ids, st.ID)
		waitRun(t, r, st.ID)
		mu.Lock()
		now = now.Add(time.Second)
		mu.Unlock()
	}
	for i := range 3 { // within the hold, all three are kept
		if code, _ := apiAs(t, r, clientUID, "GET", "/v1/runs/"+ids[i], nil); code != 200 {
			t.Errorf("GET run %d of 3 within runs.resultHoldSeconds: %d, want 200", i+1, code)
		}
	}
	mu.Lock()
	now = now.Add(time.Duration(r.cfg.Runs.ResultHoldSeconds) * time.Second)
	mu.Unlock()
	for i, want := range []int{404, 200, 200} {
		if code, _ := apiAs(t, r, clientUID, "GET", "/v1/runs/"+ids[i], nil); code != want {
			t.Errorf("GET run %d of 3: %d, want %d", i+1, code, want)
		}
	}
}

// serveWatched serves the kind's routes on a unix socket as the host's
// router does for uid and tells handled each time a handler returned.
func serveWatched(t *testing.T, r *rig, uid int) (sock string, handled <-chan string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	must(t, err)
	ch := make(chan string, 64)
	h := sandboxtest.Handler(coderun.Registration, r.routes, roleOf(uid), uid)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			h.ServeHTTP(w, req)
			ch <- req.URL.Path
		}),
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock, ch
}

// TestRunAnswersHaveAWriteDeadline: a client that asks for a finished
// run's document or events, megabytes of them, and stops reading loses the
// answer at the write deadline; its handler returns and the log blames it.
func TestRunAnswersHaveAWriteDeadline(t *testing.T) {
	old := api.WriteTimeout
	api.WriteTimeout = 200 * time.Millisecond
	t.Cleanup(func() { api.WriteTimeout = old })
	logs := &lockedBuffer{}
	r, _ := newRunRigWith(t, runsExtra, bigSupervise(nil, nil), func(o *sandboxtest.KitOptions) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	st, err := r.k.Start(runs.Params{Command: "flood", Artifacts: []string{"a0", "a1", "a2", "a3"}}, clientUID)
	must(t, err)
	waitRun(t, r, st.ID)
	sock, handled := serveWatched(t, r, clientUID)
	for _, path := range []string{"/v1/runs/" + st.ID, "/v1/runs/" + st.ID + "/events"} {
		c, err := net.Dial("unix", sock)
		must(t, err)
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", path) // never read
		select {
		case got := <-handled:
			if got != path {
				t.Errorf("handler of %s returned, want %s", got, path)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("GET %s: the answer is still held by a client that stopped reading", path)
		}
	}
	if n := strings.Count(logs.String(), `"msg":"run answer cut: the client stopped reading"`); n != 2 {
		t.Errorf("%d log lines blame the client, want 2:\n%s", n, logs.String())
	}
}
