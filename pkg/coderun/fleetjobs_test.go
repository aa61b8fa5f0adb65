package coderun_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// Moved from pkg/host (fleetjobs_test.go): code runs across an in-process
// cluster, each box the code-run kind over its own kit. The precheck's and
// the delegation's fleet tests are beside their kinds (pkg/precheckrun,
// pkg/delegationrun); BenchmarkFleetRun moved here too.

// fleetRunRig is a host with runs on one in-process cluster, as box name;
// takes says whether it takes the fleet's run jobs.
func fleetRunRig(t *testing.T, c *fleettest.Cluster, name, extra string, takes bool, fn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)) (*rig, *runDocker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
	must(t, err)
	r, rd := newRunRigWith(t, extra, fn, func(o *sandboxtest.KitOptions) {
		o.Fleet, o.Config = f, func(c *config.Config) { c.Fleet.Box = name }
	})
	r.fleet = f
	if takes {
		stop, err := startFleetJobs(ctx, r)
		must(t, err)
		t.Cleanup(stop)
	}
	return r, rd
}

// startFleetJobs starts the kind's taking of the fleet's run jobs as the
// daemon does (the host starts every kind's; a run job is the code run's).
func startFleetJobs(ctx context.Context, r *rig) (func(), error) {
	return fleetjobs.StartAll(ctx, r.kit.Host.SpareYielding, r.k.StartFleet)
}

// never is the supervisor of a box that must not run anything.
func never(t *testing.T, box string) func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
	return func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		t.Errorf("box %s ran a job it should not have: %+v", box, job)
		return -1, io.EOF
	}
}

// events reads a run's NDJSON event stream as the host API answers it.
func events(t *testing.T, body []byte) []runs.Event {
	t.Helper()
	var out []runs.Event
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var ev runs.Event
		must(t, json.Unmarshal(sc.Bytes(), &ev))
		out = append(out, ev)
	}
	return out
}

// TestFleetRunAdmittedHereRunsThere: a run admitted on box A, which takes
// no jobs, runs on box B; A's client sees what a local run gives: its
// status, stdout and stderr, its events (states, output, the result with
// the artifacts) and its artifacts. B's container is gone, A made none.
func TestFleetRunAdmittedHereRunsThere(t *testing.T) {
	c := fleettest.Start(t, 1)
	a, _ := fleetRunRig(t, c, "box-a", runsExtra, false, never(t, "box-a"))
	b, rdB := fleetRunRig(t, c, "box-b", runsExtra, true, supervise(3))
	code, body := apiAs(t, a, clientUID, "POST", "/v1/runs", runs.Params{Command: "echo hello", Project: "demo", Artifacts: []string{"out/report.txt"}})
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/runs on A: %d %s", code, body)
	}
	var st runs.Status
	must(t, json.Unmarshal(body, &st))
	got := waitRun(t, a, st.ID)
	if got.Result != runs.ResultFailed || got.ExitCode == nil || *got.ExitCode != 3 || got.Stdout != "hello\n" || got.Stderr != "warn\n" || got.StartedAt == nil || got.OwnerUID != clientUID {
		t.Fatalf("run on A: %+v", got)
	}
	if len(got.Artifacts) != 1 || string(got.Artifacts[0].Data) != "data:out/report.txt" {
		t.Errorf("artifacts on A: %+v", got.Artifacts)
	}
	code, body = apiAs(t, a, clientUID, "GET", "/v1/runs/"+st.ID+"/events", nil)
	if code != http.StatusOK {
		t.Fatalf("events on A: %d", code)
	}
	evs := events(t, body)
	var kinds []string
	for _, ev := range evs {
		switch ev.Type {
		case runs.EventState:
			kinds = append(kinds, ev.State)
		case runs.EventOutput:
			kinds = append(kinds, ev.Stream+":"+string(ev.Data))
		case runs.EventResult:
			kinds = append(kinds, "result")
			if ev.Status == nil || ev.Status.Result != runs.ResultFailed || len(ev.Status.Artifacts) != 1 || string(ev.Status.Artifacts[0].Data) != "data:out/report.txt" {
				t.Errorf("result event: %+v", ev.Status)
			}
		}
	}
	want := []string{runs.StateQueued, runs.StateRunning, "stdout:hello\n", "stderr:warn\n", runs.StateFinished, "result"}
	if !slices.Equal(kinds, want) {
		t.Errorf("events on A = %q, want %q", kinds, want)
	}
	if len(rdB.Jobs) != 1 || rdB.Jobs[0].Command != "echo hello" || len(b.docker.Created) != 1 || b.docker.Created[0].WorkspaceDir != "/srv/demo" {
		t.Errorf("B ran %+v, created %d containers", rdB.Jobs, len(b.docker.Created))
	}
	if len(a.docker.Created) != 0 {
		t.Errorf("A created %d containers", len(a.docker.Created))
	}
	b.assertClean(t)
	a.assertClean(t)
	// B's API does not show A's run: it is A's client's.
	if code, _ := apiAs(t, b, clientUID, "GET", "/v1/runs/"+st.ID, nil); code != http.StatusNotFound {
		t.Errorf("A's run on B's API: %d, want 404", code)
	}
}

// TestFleetRunCancelReachesItsBox: a cancel on the admitting box stops the
// run on the box running it (its container removed there), and the
// admitting box's record ends cancelled.
func TestFleetRunCancelReachesItsBox(t *testing.T) {
	c := fleettest.Start(t, 1)
	// Closed once: a job delivered again (its ack wait expired on a
	// loaded machine) runs again.
	started, stopped := make(chan struct{}), make(chan struct{})
	start, stop := sync.OnceFunc(func() { close(started) }), sync.OnceFunc(func() { close(stopped) })
	a, _ := fleetRunRig(t, c, "box-a", runsExtra, false, never(t, "box-a"))
	b, _ := fleetRunRig(t, c, "box-b", runsExtra, true, func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		enc := wire.NewEncoder(stdout)
		_ = enc.Output(wire.FrameStdout, wire.PhaseMain, []byte("started\n"))
		start()
		<-ctx.Done() // until the cancel reaches this box
		stop()
		return -1, ctx.Err()
	})
	st, err := a.k.Start(runs.Params{Command: "sleep 1000"}, clientUID)
	must(t, err)
	<-started
	run, err := a.k.Registry().Get(st.ID)
	must(t, err)
	// The output reaching A says the run is running there.
	seen := make(chan struct{})
	go func() {
		_ = run.Subscribe(context.Background(), func(ev runs.Event) error {
			if ev.Type == runs.EventOutput && string(ev.Data) == "started\n" {
				close(seen)
				return io.EOF
			}
			return nil
		})
	}()
	<-seen
	if code, body := apiAs(t, a, clientUID, "POST", "/v1/runs/"+st.ID+"/cancel", nil); code != http.StatusOK {
		t.Fatalf("cancel on A: %d %s", code, body)
	}
	<-stopped
	got := waitRun(t, a, st.ID)
	if got.Result != runs.ResultCancelled || got.Stdout != "started\n" {
		t.Fatalf("run on A after cancel: %+v", got)
	}
	b.assertClean(t)
}

// TestFleetRunApprovedOnAnotherBox: a network run admitted on A awaits
// its approval; an admin on B approves it (B does not hold the run); A
// sees the approval, the run runs on B with B's broker and policy, and a
// second decision anywhere is refused.
func TestFleetRunApprovedOnAnotherBox(t *testing.T) {
	c := fleettest.Start(t, 1)
	a, _ := fleetRunRig(t, c, "box-a", runsExtra, false, never(t, "box-a"))
	b, _ := fleetRunRig(t, c, "box-b", runsExtra, true, supervise(0))
	st, err := a.k.Start(runs.Params{Command: "curl x", Network: true}, clientUID)
	must(t, err)
	if st.State != runs.StateAwaitingApproval {
		t.Fatalf("state %s", st.State)
	}
	// The approval is in the fleet once A's run waits for it.
	sandboxtest.WaitFor(t, "the approval in the fleet", func() bool {
		_, _, err := fleetjobs.New(a.fleet).PendingApproval(context.Background(), fleetjobs.JobRun, st.ID)
		return err == nil
	})
	code, body := apiAs(t, b, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/approve", nil)
	if code != http.StatusOK {
		t.Fatalf("approve on B: %d %s", code, body)
	}
	var shown runs.Status
	must(t, json.Unmarshal(body, &shown))
	if shown.ID != st.ID || shown.ApprovedBy == nil || *shown.ApprovedBy != os.Getuid() {
		t.Errorf("B's answer: %+v", shown)
	}
	got := waitRun(t, a, st.ID)
	if got.Result != runs.ResultOK || got.ApprovedBy == nil || *got.ApprovedBy != os.Getuid() {
		t.Fatalf("run on A: %+v", got)
	}
	if len(b.units.Started) != 1 || len(b.docker.Policies) != 1 || len(a.docker.Policies) != 0 {
		t.Errorf("broker units on B %d, policies on B %d, on A %d; want B's own", len(b.units.Started), len(b.docker.Policies), len(a.docker.Policies))
	}
	if code, _ := apiAs(t, a, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/deny", nil); code != http.StatusConflict {
		t.Errorf("deny after the approval on A: %d, want 409", code)
	}
	if code, _ := apiAs(t, b, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/deny", nil); code != http.StatusNotFound {
		t.Errorf("deny after the approval on B: %d, want 404", code)
	}
	b.assertClean(t)
}

// TestFleetRunWithCredentialStaysHere: a run asking for a credential
// never travels (another box's credential of that name is not the one
// approved): it runs on its admitting box although only B takes jobs.
func TestFleetRunWithCredentialStaysHere(t *testing.T) {
	c := fleettest.Start(t, 1)
	a, rdA := fleetRunRig(t, c, "box-a", runsCredExtra, false, supervise(0))
	fleetRunRig(t, c, "box-b", runsCredExtra, true, never(t, "box-b"))
	st, err := a.k.Start(runs.Params{Project: "demo", Command: "git clone https://127.0.0.1:8443/r.git", Network: true, Credentials: []string{"git"}}, clientUID)
	must(t, err)
	if code, body := apiAs(t, a, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/approve", nil); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	if got := waitRun(t, a, st.ID); got.Result != runs.ResultOK {
		t.Fatalf("run %+v", got)
	}
	if len(rdA.Jobs) != 1 || len(a.docker.Policies) != 1 {
		t.Errorf("A ran %d jobs, wrote %d policies; want the run here", len(rdA.Jobs), len(a.docker.Policies))
	}
	a.assertClean(t)
}

// TestFleetRunOnItsOwnBox: the only box of the fleet takes its own run's
// job: the run's record and its shadow (same id) live side by side, the
// reaper sees the run once, and the run ends as a local one.
func TestFleetRunOnItsOwnBox(t *testing.T) {
	c := fleettest.Start(t, 1)
	listed := make(chan int, 1)
	var a *rig
	a, _ = fleetRunRig(t, c, "box-a", runsExtra, true, func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error) {
		n := 0
		for _, l := range a.k.Listed() {
			if l.Run {
				n++
			}
		}
		select {
		case listed <- n:
		default: // a second delivery of the job: the first run's count is the one read
		}
		return supervise(0)(ctx, job, stdout)
	})
	st, err := a.k.Start(runs.Params{Command: "echo hello"}, clientUID)
	must(t, err)
	got := waitRun(t, a, st.ID)
	if got.Result != runs.ResultOK || got.Stdout != "hello\n" {
		t.Fatalf("run: %+v", got)
	}
	if n := <-listed; n != 1 {
		t.Errorf("the reaper saw the running run %d times, want once", n)
	}
	a.assertClean(t)
}

// TestFleetRunJobWithCredentialRefused: a run job naming a credential
// never comes from an honest box (such a run stays on the box that has
// it): a box that takes one refuses it with a result, runs nothing and
// writes no policy, whatever approval the payload claims.
func TestFleetRunJobWithCredentialRefused(t *testing.T) {
	c := fleettest.Start(t, 1)
	b, rdB := fleetRunRig(t, c, "box-b", runsCredExtra, true, never(t, "box-b"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	evil, err := fleet.Open(ctx, c.Connect("box-evil"), fleet.Layout{Partitions: 1, Replicas: 1})
	must(t, err)
	uid := 0
	payload, err := json.Marshal(map[string]any{"params": runs.Params{Project: "demo", Command: "git clone https://127.0.0.1:8443/r.git", Network: true, Credentials: []string{"git"}}, "approvedBy": &uid})
	must(t, err)
	id := "0123456789abcdef0123456789abcdef"
	_, err = fleetjobs.New(evil).SubmitJob(ctx, fleetjobs.JobRun, id, payload)
	must(t, err)
	res, err := fleetjobs.New(evil).FollowJob(ctx, fleetjobs.JobRun, id, func(fleetjobs.JobFrame) error { return nil })
	must(t, err)
	var st runs.Status
	if err := json.Unmarshal(res.Data, &st); err != nil {
		t.Fatalf("result %+v: %v", res, err)
	}
	if st.Result != runs.ResultError || res.Box != "box-b" {
		t.Errorf("result %+v from %s, want an error from box-b", st, res.Box)
	}
	if len(rdB.Jobs) != 0 || len(b.docker.Policies) != 0 || len(b.docker.Created) != 0 {
		t.Errorf("B ran %d jobs, wrote %d policies, created %d containers; want none", len(rdB.Jobs), len(b.docker.Policies), len(b.docker.Created))
	}
	b.assertClean(t)
}

// TestFleetRunWithCredentialApprovedHereOnly: a run asking for a
// credential never puts its approval in the fleet (it grants this box's
// credential: no other box, nor one writing the control bucket, may give
// it); it is approved here and runs here. The watch of its approval key,
// from before the approval to a marker written after the run ended, sees
// no record but the marker.
func TestFleetRunWithCredentialApprovedHereOnly(t *testing.T) {
	c := fleettest.Start(t, 1)
	a, rdA := fleetRunRig(t, c, "box-a", runsCredExtra, false, supervise(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, err := jetstream.New(c.Connect("watcher"))
	must(t, err)
	kv, err := js.KeyValue(ctx, fleet.JobControlBucket)
	must(t, err)
	st, err := a.k.Start(runs.Params{Project: "demo", Command: "git clone https://127.0.0.1:8443/r.git", Network: true, Credentials: []string{"git"}}, clientUID)
	must(t, err)
	key := "approval." + fleetjobs.JobRun + "." + st.ID
	w, err := kv.Watch(ctx, key)
	must(t, err)
	defer w.Stop()
	if code, body := apiAs(t, a, os.Getuid(), "POST", "/v1/runs/"+st.ID+"/approve", nil); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	if got := waitRun(t, a, st.ID); got.Result != runs.ResultOK {
		t.Fatalf("run %+v", got)
	}
	_, err = kv.Put(ctx, key, []byte(`"marker"`))
	must(t, err)
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if string(e.Value()) == `"marker"` {
			break
		}
		t.Errorf("the credential run's approval was in the fleet: %s", e.Value())
	}
	if len(rdA.Jobs) != 1 {
		t.Errorf("A ran %d jobs, want 1", len(rdA.Jobs))
	}
	a.assertClean(t)
}

// TestFleetRunFromAHostileBoxRefused: what the box that took a run sends
// back is checked by the admitting box against its own bounds: an output
// frame of no phase fails the run; a result naming a setup command the run
// does not have ends in an error; an error text over the bound is replaced
// by a generic one. A takes no jobs; the taker is a bare fleet connection.
func TestFleetRunFromAHostileBoxRefused(t *testing.T) {
	exit := 1
	for _, c := range []struct {
		name    string
		frame   any // published before the result, or nil
		result  runs.Status
		want    string // the run's result on A
		wantErr string // its error text ("" as sent)
	}{
		{"output frame of no phase", map[string]any{"event": runs.Event{Type: runs.EventOutput, Stream: "stdout", Phase: "bogus", Data: []byte("x")}},
			runs.Status{Result: runs.ResultOK}, runs.ResultError, "the run's events from the fleet were lost or refused; the host log has details"},
		{"setup index out of range", nil,
			runs.Status{Result: runs.ResultFailed, ExitCode: &exit, FailedSetup: 9, Error: "x"}, runs.ResultError, "x"},
		{"error text over the bound", nil,
			runs.Status{Result: runs.ResultFailed, ExitCode: &exit, Error: strings.Repeat("e", 2048)}, runs.ResultFailed, "the run failed on another box; its log has details"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := fleettest.Start(t, 1)
			a, _ := fleetRunRig(t, cl, "box-a", runsExtra, false, never(t, "box-a"))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			evil, err := fleet.Open(ctx, cl.Connect("box-evil"), fleet.Layout{Partitions: 1, Replicas: 1})
			must(t, err)
			st, err := a.k.Start(runs.Params{Command: "true", Project: "demo"}, clientUID)
			must(t, err)
			j, err := fleetjobs.New(evil).NextJob(ctx, fleetjobs.JobRun, "box-evil", 30*time.Second)
			must(t, err)
			if j.ID != st.ID {
				t.Fatalf("took job %s, want %s", j.ID, st.ID)
			}
			if c.frame != nil {
				b, err := json.Marshal(c.frame)
				must(t, err)
				must(t, j.Publish(ctx, b))
			}
			res := c.result
			res.ID, res.State = st.ID, runs.StateFinished
			b, err := json.Marshal(res)
			must(t, err)
			must(t, j.Finish(ctx, b))
			got := waitRun(t, a, st.ID)
			if got.Result != c.want || got.Error != c.wantErr || got.FailedSetup != 0 {
				t.Errorf("run on A: result %s, error %q, failedSetup %d; want %s, error %q, no setup index", got.Result, got.Error, got.FailedSetup, c.want, c.wantErr)
			}
			a.assertClean(t)
		})
	}
}

// BenchmarkFleetRun: a trivial run (the fake engine's) from admission to
// its result, here without a fleet, through the fleet on its own box, and
// admitted on A run on B: the engine's cost per run (go test -bench
// FleetRun -benchtime 100x ./pkg/coderun). Moved from pkg/host.
func BenchmarkFleetRun(b *testing.B) {
	rigOn := func(f *fleet.Fleet, name string, takes bool) *rig {
		r, _ := newRunRigWith(b, runsExtra, supervise(0), func(o *sandboxtest.KitOptions) {
			if f != nil {
				o.Fleet, o.Config = f, func(c *config.Config) { c.Fleet.Box = name }
			}
		})
		if takes {
			stop, err := startFleetJobs(context.Background(), r)
			must(b, err)
			b.Cleanup(stop)
		}
		return r
	}
	open := func(c *fleettest.Cluster, name string) *fleet.Fleet {
		f, err := fleet.Open(context.Background(), c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
		must(b, err)
		return f
	}
	run := func(b *testing.B, a *rig) {
		for b.Loop() {
			st, err := a.k.Start(runs.Params{Command: "true"}, clientUID)
			must(b, err)
			r, err := a.k.Registry().Get(st.ID)
			must(b, err)
			<-r.Done()
			if s := r.Summary(); s.Result != runs.ResultOK {
				b.Fatalf("run %+v", s)
			}
		}
	}
	b.Run("local", func(b *testing.B) { run(b, rigOn(nil, "", false)) })
	b.Run("fleet-own-box", func(b *testing.B) {
		c := fleettest.Start(b, 1)
		run(b, rigOn(open(c, "box-a"), "box-a", true))
	})
	b.Run("fleet-other-box", func(b *testing.B) {
		c := fleettest.Start(b, 1)
		a := rigOn(open(c, "box-a"), "box-a", false)
		rigOn(open(c, "box-b"), "box-b", true)
		run(b, a)
	})
}
