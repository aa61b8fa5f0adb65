// The engine (pkg/fleet) run under the permissions
// sandbox-nats gives a box: every call Open, a box, a turn, the reply, the
// channel state, a workspace read and a job make must be allowed, so a stream
// or call the engine adds without a permission fails here.

package fleetnats

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

func TestEngineUnderBoxPermissions(t *testing.T) {
	p := newPKI(t)
	pubA, seedA := newUser(t, p.dir, "box-a")
	pubB, seedB := newUser(t, p.dir, "box-b")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pubA}, config.FleetBox{Name: "box-b", NKey: pubB})
	startServer(t, &f, p.files)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	violations := asyncErrs(make(chan error, 64))
	open := func(seed string) *fleet.Fleet {
		g := f
		g.NkeySeedFile = seed
		nc, err := Connect(g, violations.option())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		fl, err := fleet.Open(ctx, nc, fleet.Layout{Partitions: 4, Replicas: 1})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return fl
	}
	fa := open(seedA)
	b, err := fleet.NewBox(fa, fleet.BoxOptions{Name: "box-a", Executor: &fleet.StubExecutor{Duration: 10 * time.Millisecond}, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatalf("box start: %v", err)
	}
	defer b.Stop()
	fb := open(seedB)
	for i := 0; i < 3; i++ {
		tn := fleet.Turn{ID: ids.NewTurnID(), Channel: "chan-1", Speaker: fleet.Speaker{ID: "u1"}, Text: "hello", DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()}
		if _, err := fb.Submit(ctx, tn); err != nil {
			t.Fatalf("submit: %v", err)
		}
		if rep, err := fb.AwaitReply(ctx, tn.ID); err != nil || !rep.OK {
			t.Fatalf("reply %+v %v", rep, err)
		}
	}
	if _, _, err := fb.Channel(ctx, "chan-1"); err != nil {
		t.Fatalf("channel: %v", err)
	}
	// A job: submitted on b, taken on a, its frame, cancellation, result
	// and approval, followed and forgotten on b.
	qa, qb := fleetjobs.New(fa), fleetjobs.New(fb)
	if err := qb.AskApproval(ctx, fleetjobs.JobRun, "run-1", []byte(`{}`)); err != nil {
		t.Fatalf("ask approval: %v", err)
	}
	if _, err := qa.Decide(ctx, fleetjobs.JobRun, "run-1", true, 1000, "box-a"); err != nil {
		t.Fatalf("decide: %v", err)
	}
	if _, err := qb.AwaitDecision(ctx, fleetjobs.JobRun, "run-1"); err != nil {
		t.Fatalf("await decision: %v", err)
	}
	if _, err := qb.SubmitJob(ctx, fleetjobs.JobRun, "run-1", []byte(`{}`)); err != nil {
		t.Fatalf("job: %v", err)
	}
	j, err := qa.NextJob(ctx, fleetjobs.JobRun, "box-a", 5*time.Second)
	if err != nil {
		t.Fatalf("next job: %v", err)
	}
	if _, err := j.CancelRequested(ctx); err != nil {
		t.Fatalf("watch cancel: %v", err)
	}
	if err := qb.CancelJob(ctx, fleetjobs.JobRun, "run-1"); err != nil {
		t.Fatalf("cancel job: %v", err)
	}
	if err := j.Publish(ctx, []byte(`1`)); err != nil {
		t.Fatalf("job frame: %v", err)
	}
	if err := j.Finish(ctx, []byte(`2`)); err != nil {
		t.Fatalf("job done: %v", err)
	}
	if _, err := qb.FollowJob(ctx, fleetjobs.JobRun, "run-1", func(fleetjobs.JobFrame) error { return nil }); err != nil {
		t.Fatalf("follow job: %v", err)
	}
	if err := qb.ForgetJob(ctx, fleetjobs.JobRun, "run-1"); err != nil {
		t.Fatalf("forget job: %v", err)
	}
	if err := qb.ForgetApproval(ctx, fleetjobs.JobRun, "run-1"); err != nil {
		t.Fatalf("forget approval: %v", err)
	}
	w, err := qa.StartJobWorker(ctx, fleetjobs.JobWorkerOptions{Kind: fleetjobs.JobPrecheck, Box: "box-a",
		Slot:   func(context.Context) (func(), <-chan struct{}, error) { return func() {}, nil, nil },
		Handle: func(ctx context.Context, j *fleetjobs.Job) { _ = j.Finish(ctx, []byte(`3`)) }})
	if err != nil {
		t.Fatalf("job worker: %v", err)
	}
	if _, err := qb.SubmitJob(ctx, fleetjobs.JobPrecheck, "pc-1", []byte(`{}`)); err != nil {
		t.Fatalf("precheck job: %v", err)
	}
	if _, err := qb.FollowJob(ctx, fleetjobs.JobPrecheck, "pc-1", func(fleetjobs.JobFrame) error { return nil }); err != nil {
		t.Fatalf("follow precheck job: %v", err)
	}
	w.Stop()
	for n := len(violations); n > 0; n-- {
		if err := <-violations; errorIsViolation(err) {
			t.Errorf("the engine was refused: %v", err)
		}
	}
}

func errorIsViolation(err error) bool {
	return err != nil && errors.Is(err, nats.ErrPermissionViolation)
}
