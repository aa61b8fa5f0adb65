package fleetjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// freeSlot is a box with slots to spare: every Slot call is granted.
func freeSlot(ctx context.Context) (func(), <-chan struct{}, error) {
	return func() {}, make(chan struct{}), nil
}

func (r *rig) worker(f *Queue, o JobWorkerOptions) *JobWorker {
	r.t.Helper()
	if o.Kind == "" {
		o.Kind = JobRun
	}
	if o.Slot == nil {
		o.Slot = freeSlot
	}
	o.AckWait, o.Logger = testAckWait, quiet
	w, err := f.StartJobWorker(r.ctx(), o)
	if err != nil {
		r.t.Fatalf("start job worker %s: %v", o.Box, err)
	}
	r.t.Cleanup(w.Stop)
	return w
}

// TestJobsWorkQueue: a job submitted twice is queued once, taken by one
// of two boxes, and gone once done.
func TestJobsWorkQueue(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	b, _ := r.fleet("b")
	ctx := r.ctx()
	if _, err := a.SubmitJob(ctx, JobRun, "run-1", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if s, err := a.SubmitJob(ctx, JobRun, "run-1", []byte(`{"x":1}`)); err != nil || !s.Duplicate {
		t.Fatalf("resubmitted job: %+v, %v; want a duplicate", s, err)
	}
	j, err := b.NextJob(ctx, JobRun, "b", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != JobRun || j.ID != "run-1" || string(j.Payload) != `{"x":1}` || j.Attempt != 1 {
		t.Fatalf("job %+v", j)
	}
	if err := j.Finish(ctx, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	s, err := a.js.Stream(ctx, fleet.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 0 {
		t.Fatalf("jobs stream after done: %+v, %v; want empty", info.State, err)
	}
}

// TestJobBoundsRefused: what breaks a bound is refused before anything is
// published or written.
func TestJobBoundsRefused(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	ctx := r.ctx()
	for _, c := range []struct {
		name, kind, id string
		payload        int
	}{
		{"unknown kind", "shell", "x", 1},
		{"bad id", JobRun, "a.b", 1},
		{"empty id", JobRun, "", 1},
		{"payload over the bound", JobRun, "big", fleet.MaxJobBytes + 1},
	} {
		if _, err := a.SubmitJob(ctx, c.kind, c.id, make([]byte, c.payload)); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("%s: SubmitJob = %v, want fleet.ErrInvalid", c.name, err)
		}
	}
	if _, err := a.SubmitJob(ctx, JobRun, "ok-1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	j, err := a.NextJob(ctx, JobRun, "a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Publish(ctx, json.RawMessage(`"`+strings.Repeat("x", fleet.MaxJobFrameBytes)+`"`)); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("frame over the bound: %v, want fleet.ErrInvalid", err)
	}
	if err := j.Finish(ctx, json.RawMessage(`"`+strings.Repeat("x", fleet.MaxJobResultBytes)+`"`)); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("result over the bound: %v, want fleet.ErrInvalid", err)
	}
	if _, err := a.JobResultOf(ctx, JobRun, "ok-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a refused result was written: %v", err)
	}
	if err := j.Finish(ctx, []byte(`1`)); err != nil {
		t.Errorf("a result within the bound after a refused one: %v", err)
	}
}

// TestJobsOneBoxPerJob: two boxes pull the same kind; each job is run by
// exactly one of them and has one result, which its follower receives
// after every frame, in order.
func TestJobsOneBoxPerJob(t *testing.T) {
	r := newRig(t, 1, 1)
	admit, _ := r.fleet("admit")
	var mu sync.Mutex
	ran := map[string][]string{}
	handle := func(box string) func(context.Context, *Job) {
		return func(ctx context.Context, j *Job) {
			mu.Lock()
			ran[j.ID] = append(ran[j.ID], box)
			mu.Unlock()
			for i := 1; i <= 3; i++ {
				if err := j.Publish(ctx, []byte(fmt.Sprint(i))); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
			// Settled even if the test ends meanwhile (as the kinds do).
			if err := j.Finish(context.WithoutCancel(ctx), []byte(`"`+box+`"`)); err != nil {
				t.Errorf("finish: %v", err)
			}
		}
	}
	for _, box := range []string{"a", "b"} {
		f, _ := r.fleet(box)
		r.worker(f, JobWorkerOptions{Box: box, Handle: handle(box)})
	}
	ctx := r.ctx()
	const n = 12
	for i := range n {
		if _, err := admit.SubmitJob(ctx, JobRun, fmt.Sprintf("j%d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		id := fmt.Sprintf("j%d", i)
		var frames []string
		res, err := admit.FollowJob(ctx, JobRun, id, func(fr JobFrame) error {
			frames = append(frames, string(fr.Data))
			return nil
		})
		if err != nil {
			t.Fatalf("follow %s: %v", id, err)
		}
		if got := strings.Join(frames, ","); got != "1,2,3" {
			t.Errorf("%s frames = %s, want 1,2,3", id, got)
		}
		if string(res.Data) != `"`+res.Box+`"` || res.Attempt != 1 {
			t.Errorf("%s result = %+v", id, res)
		}
		if err := admit.ForgetJob(ctx, JobRun, id); err != nil {
			t.Errorf("forget %s: %v", id, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, boxes := range ran {
		if len(boxes) != 1 {
			t.Errorf("job %s ran on %v, want one box", id, boxes)
		}
	}
	if len(ran) != n {
		t.Errorf("%d jobs ran, want %d", len(ran), n)
	}
}

// TestBusyBoxTakesNoJob: a box whose slots are all taken never pulls; the
// box with a free slot runs every job. A slot wanted by local work is
// given back while no job came.
func TestBusyBoxTakesNoJob(t *testing.T) {
	r := newRig(t, 1, 1)
	admit, _ := r.fleet("admit")
	busy, _ := r.fleet("busy")
	asked := make(chan struct{}, 1)
	r.worker(busy, JobWorkerOptions{Box: "busy", Slot: func(ctx context.Context) (func(), <-chan struct{}, error) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-ctx.Done() // never a free slot
		return nil, nil, ctx.Err()
	}, Handle: func(ctx context.Context, j *Job) { t.Errorf("the busy box took job %s", j.ID) }})
	<-asked
	free, _ := r.fleet("free")
	released := make(chan struct{})
	wanted := make(chan struct{})
	var once sync.Once
	r.worker(free, JobWorkerOptions{Box: "free", Slot: func(ctx context.Context) (func(), <-chan struct{}, error) {
		first := false
		once.Do(func() { first = true })
		if first {
			// The first slot is wanted back before any job comes.
			return func() { close(released) }, wanted, nil
		}
		<-released
		return func() {}, make(chan struct{}), nil
	}, Handle: func(ctx context.Context, j *Job) { _ = j.Finish(ctx, []byte(`"free"`)) }})
	close(wanted)
	<-released
	ctx := r.ctx()
	for i := range 4 {
		id := fmt.Sprintf("b%d", i)
		if _, err := admit.SubmitJob(ctx, JobRun, id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		res, err := admit.FollowJob(ctx, JobRun, id, func(JobFrame) error { return nil })
		if err != nil || res.Box != "free" {
			t.Fatalf("job %s: %+v, %v; want the free box's", id, res, err)
		}
	}
}

// TestJobRedeliveredWhenItsBoxDies: the box running a job loses its
// connection; after the ack wait another box takes the job (attempt 2) and
// its result is the one; the dead attempt's late result is refused.
func TestJobRedeliveredWhenItsBoxDies(t *testing.T) {
	r := newRig(t, 1, 1)
	admit, _ := r.fleet("admit")
	deadF, deadNC := r.fleet("dead")
	taken := make(chan *Job, 1)
	unblock := make(chan struct{})
	lateErr := make(chan error, 1)
	r.worker(deadF, JobWorkerOptions{Box: "dead", Handle: func(ctx context.Context, j *Job) {
		_ = j.Publish(ctx, []byte(`"dead-1"`))
		taken <- j
		<-unblock
		lateErr <- j.Finish(context.Background(), []byte(`"dead"`))
	}})
	ctx := r.ctx()
	if _, err := admit.SubmitJob(ctx, JobRun, "r1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	<-taken
	deadNC.Close() // the box dies: no heartbeat, no ack
	live, _ := r.fleet("live")
	r.worker(live, JobWorkerOptions{Box: "live", Handle: func(ctx context.Context, j *Job) {
		_ = j.Publish(ctx, []byte(`"live-`+fmt.Sprint(j.Attempt)+`"`))
		if err := j.Finish(context.WithoutCancel(ctx), []byte(`"live"`)); err != nil {
			t.Errorf("finish on the live box: %v", err)
		}
	}})
	var frames []string
	res, err := admit.FollowJob(ctx, JobRun, "r1", func(fr JobFrame) error {
		frames = append(frames, fmt.Sprintf("%s@%d", fr.Data, fr.Attempt))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Box != "live" || res.Attempt < 2 || string(res.Data) != `"live"` {
		t.Fatalf("result = %+v, want the live box's, attempt >= 2", res)
	}
	if len(frames) != 2 || frames[0] != `"dead-1"@1` {
		t.Errorf("frames = %v, want the dead attempt's then the live one's", frames)
	}
	close(unblock)
	if err := <-lateErr; err == nil {
		t.Error("the dead box's late result was accepted")
	}
	// The result is the live box's, whatever the dead one tried.
	if got, err := admit.JobResultOf(ctx, JobRun, "r1"); err != nil || got.Box != "live" {
		t.Errorf("stored result = %+v, %v", got, err)
	}
}

// TestJobResultOnce: a job delivered twice (the first taker stalled past
// the ack wait) has one result, the first written; the second is refused
// and the job is acknowledged all the same.
func TestJobResultOnce(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	b, _ := r.fleet("b")
	ctx := r.ctx()
	if _, err := a.SubmitJob(ctx, JobRun, "once", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	ja, err := a.NextJob(ctx, JobRun, "a", testAckWait)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := b.NextJob(ctx, JobRun, "b", testAckWait) // after a's ack wait
	if err != nil {
		t.Fatal(err)
	}
	if jb.Attempt != 2 {
		t.Fatalf("second delivery attempt = %d", jb.Attempt)
	}
	if err := jb.Finish(ctx, []byte(`"b"`)); err != nil {
		t.Fatal(err)
	}
	if err := ja.Finish(ctx, []byte(`"a"`)); !errors.Is(err, ErrResultTaken) {
		t.Fatalf("second result: %v, want ErrResultTaken", err)
	}
	res, err := a.JobResultOf(ctx, JobRun, "once")
	if err != nil || res.Box != "b" || string(res.Data) != `"b"` {
		t.Fatalf("result = %+v, %v", res, err)
	}
}

// TestJobGivenUpAfterBound: a job every box hands back is given up once
// delivered more than MaxAttempts times: its result says so.
func TestJobGivenUpAfterBound(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	var mu sync.Mutex
	handled := 0
	r.worker(a, JobWorkerOptions{Box: "a", MaxAttempts: 2, Handle: func(ctx context.Context, j *Job) {
		mu.Lock()
		handled++
		mu.Unlock()
		_ = j.Retry(0)
	}})
	ctx := r.ctx()
	if _, err := a.SubmitJob(ctx, JobRun, "doomed", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	res, err := a.FollowJob(ctx, JobRun, "doomed", func(JobFrame) error { return nil })
	if err != nil || !res.GaveUp || res.Attempt != 3 {
		t.Fatalf("result = %+v, %v; want given up at attempt 3", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if handled != 2 {
		t.Errorf("handled %d times, want 2 (the bound)", handled)
	}
}

// TestJobCancelReachesItsBox: a cancellation recorded on the admitting
// box reaches the box running the job, and one taken after it.
func TestJobCancelReachesItsBox(t *testing.T) {
	r := newRig(t, 1, 1)
	admit, _ := r.fleet("admit")
	run, _ := r.fleet("run")
	r.worker(run, JobWorkerOptions{Box: "run", Handle: func(ctx context.Context, j *Job) {
		cancelled, err := j.CancelRequested(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		_ = j.Publish(ctx, []byte(`"started"`))
		<-cancelled
		_ = j.Finish(ctx, []byte(`"cancelled"`))
	}})
	ctx := r.ctx()
	for _, early := range []bool{false, true} {
		id := fmt.Sprintf("c-%v", early)
		if early {
			if err := admit.CancelJob(ctx, JobRun, id); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := admit.SubmitJob(ctx, JobRun, id, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		res, err := admit.FollowJob(ctx, JobRun, id, func(fr JobFrame) error {
			if !early {
				return admit.CancelJob(ctx, JobRun, id)
			}
			return nil
		})
		if err != nil || string(res.Data) != `"cancelled"` {
			t.Fatalf("%s: %+v, %v", id, res, err)
		}
		if err := admit.CancelJob(ctx, JobRun, id); err != nil {
			t.Errorf("cancelling twice: %v", err)
		}
	}
}

// TestApprovalDecidedOnce: an approval asked on one box is decided on
// another, seen by the asker; a second decision from anywhere is refused.
func TestApprovalDecidedOnce(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	b, _ := r.fleet("b")
	ctx := r.ctx()
	if _, err := b.Decide(ctx, JobRun, "nope", true, 0, "b"); !errors.Is(err, ErrNotPending) {
		t.Fatalf("decide an approval never asked: %v", err)
	}
	if err := a.AskApproval(ctx, JobRun, "ap1", []byte(`{"id":"ap1"}`)); err != nil {
		t.Fatal(err)
	}
	got, _, err := b.PendingApproval(ctx, JobRun, "ap1")
	if err != nil || got.State != ApprovalPending || string(got.What) != `{"id":"ap1"}` {
		t.Fatalf("pending on b = %+v, %v", got, err)
	}
	decided := make(chan Approval, 1)
	go func() {
		d, err := a.AwaitDecision(ctx, JobRun, "ap1")
		if err != nil {
			t.Error(err)
		}
		decided <- d
	}()
	if _, err := b.Decide(ctx, JobRun, "ap1", true, 1000, "b"); err != nil {
		t.Fatal(err)
	}
	if d := <-decided; d.State != ApprovalApproved || d.By != 1000 || d.Box != "b" {
		t.Fatalf("decision seen on a = %+v", d)
	}
	if _, err := a.Decide(ctx, JobRun, "ap1", false, 0, "a"); !errors.Is(err, ErrNotPending) {
		t.Fatalf("second decision: %v, want ErrNotPending", err)
	}
	if err := a.AskApproval(ctx, JobRun, "big", []byte(`"`+strings.Repeat("x", fleet.MaxJobControlBytes)+`"`)); !errors.Is(err, fleet.ErrInvalid) {
		t.Fatalf("approval over the bound: %v", err)
	}
}

// TestJobHeartbeatKeepsItsBox: a job running longer than the ack wait
// stays with its box (heartbeats) while that box lives: the other box
// pulling the same kind never gets it.
func TestJobHeartbeatKeepsItsBox(t *testing.T) {
	r := newRig(t, 1, 1)
	admit, _ := r.fleet("admit")
	a, _ := r.fleet("a")
	r.worker(a, JobWorkerOptions{Box: "a", Handle: func(ctx context.Context, j *Job) {
		time.Sleep(3 * testAckWait) // the work itself: longer than the ack wait
		_ = j.Finish(context.WithoutCancel(ctx), []byte(`"a"`))
	}})
	ctx := r.ctx()
	if _, err := admit.SubmitJob(ctx, JobRun, "long", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// b starts once a holds the job: its first frame-less sign is the
	// consumer's ack pending count.
	waitAckPending(t, admit, JobRun, 1)
	b, _ := r.fleet("b")
	r.worker(b, JobWorkerOptions{Box: "b", Handle: func(ctx context.Context, j *Job) {
		t.Errorf("box b took job %s (attempt %d) while box a ran it", j.ID, j.Attempt)
		_ = j.Finish(context.WithoutCancel(ctx), []byte(`"b"`))
	}})
	res, err := admit.FollowJob(ctx, JobRun, "long", func(JobFrame) error { return nil })
	if err != nil || res.Box != "a" || res.Attempt != 1 {
		t.Fatalf("result = %+v, %v; want box a's first attempt", res, err)
	}
}

// waitAckPending waits until kind's consumer has n jobs taken and not yet
// settled (a steady state while the job runs).
func waitAckPending(t *testing.T, f *Queue, kind string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := f.js.Consumer(ctx, fleet.JobsStream, jobsConsumer(kind))
		if err == nil {
			if info, err := c.Info(ctx); err == nil && info.NumAckPending == n {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("consumer %s never had %d jobs pending", jobsConsumer(kind), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestJobRecordsFromAHostileBoxRefused: what a box wrote past this
// package's encoders (it has publish rights on sandbox.>) is refused as
// read: a frame, a result or an approval that is not JSON, or names a box
// that is no box name (it would reach the admitting box's log), ends the
// follow or the read with fleet.ErrInvalid.
func TestJobRecordsFromAHostileBoxRefused(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	ctx := r.ctx()
	badBoxes := []string{"", "Box\nINFO forged=1", strings.Repeat("b", 64), "-lead"}
	for i, box := range append(badBoxes, "not json") {
		id := fmt.Sprintf("hostile-frame-%d", i)
		frame, _ := json.Marshal(JobFrame{Attempt: 1, Box: box})
		if box == "not json" {
			frame = []byte(`{"attempt":`)
		}
		if _, err := a.js.Publish(ctx, jobEventsSubject(JobRun, id), frame); err != nil {
			t.Fatal(err)
		}
		accepted := errors.New("the frame was accepted")
		if _, err := a.FollowJob(ctx, JobRun, id, func(JobFrame) error { return accepted }); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("frame from box %q: FollowJob = %v, want fleet.ErrInvalid", box, err)
		}
	}
	for i, box := range append(badBoxes, "not json") {
		id := fmt.Sprintf("hostile-result-%d", i)
		res, _ := json.Marshal(JobResult{Attempt: 1, Box: box})
		if box == "not json" {
			res = []byte(`[`)
		}
		if _, err := a.results.Create(ctx, jobKey(JobRun, id), res); err != nil {
			t.Fatal(err)
		}
		if _, err := a.JobResultOf(ctx, JobRun, id); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("result from box %q: JobResultOf = %v, want fleet.ErrInvalid", box, err)
		}
	}
	for i, ap := range []Approval{{State: ApprovalApproved}, {State: ApprovalApproved, Box: "Box\nforged"}, {State: "maybe", Box: "b"}} {
		id := fmt.Sprintf("hostile-approval-%d", i)
		b, _ := json.Marshal(ap)
		if _, err := a.control.Create(ctx, approvalKey(JobRun, id), b); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AwaitDecision(ctx, JobRun, id); !errors.Is(err, fleet.ErrInvalid) {
			t.Errorf("approval %+v: AwaitDecision = %v, want fleet.ErrInvalid", ap, err)
		}
	}
	// A well-formed record of each is read.
	ok, _ := json.Marshal(JobResult{Attempt: 1, Box: "box-b"})
	if _, err := a.results.Create(ctx, jobKey(JobRun, "fine"), ok); err != nil {
		t.Fatal(err)
	}
	if res, err := a.JobResultOf(ctx, JobRun, "fine"); err != nil || res.Box != "box-b" {
		t.Errorf("a well-formed result: %+v, %v", res, err)
	}
}

// TestJobWithAnotherKindsIDDropped: a job on a kind's subject whose
// Msg-Id is not <kind>-<id> (no box's SubmitJob wrote it) is dropped, not
// handed out under an id cut from it.
func TestJobWithAnotherKindsIDDropped(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	ctx := r.ctx()
	msg := nats.NewMsg(fleet.JobsSubjectPrefix + JobRun)
	msg.Header.Set(jetstream.MsgIDHeader, "xyz-forged")
	msg.Data = []byte(`{}`)
	if _, err := a.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SubmitJob(ctx, JobRun, "good", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	j, err := a.NextJob(ctx, JobRun, "a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != "good" {
		t.Errorf("NextJob handed out job %q, want good (the forged one dropped)", j.ID)
	}
}

// TestApprovalRefusedWhileAdmitterAway: the box that admitted a run and
// waits for its approval dies; a decision on another box is refused with
// ErrAdmitterAway (nobody would apply it) and the approval stays pending.
func TestApprovalRefusedWhileAdmitterAway(t *testing.T) {
	r := newRig(t, 1, 1)
	a, nca := r.fleet("a")
	b, _ := r.fleet("b")
	ctx := r.ctx()
	if err := a.AskApproval(ctx, JobRun, "gone1", []byte(`{"id":"gone1"}`)); err != nil {
		t.Fatal(err)
	}
	nca.Close() // the admitting box dies
	if _, err := b.Decide(ctx, JobRun, "gone1", true, 1000, "b"); !errors.Is(err, ErrAdmitterAway) {
		t.Fatalf("decide while the admitting box is away: %v, want ErrAdmitterAway", err)
	}
	got, _, err := b.PendingApproval(ctx, JobRun, "gone1")
	if err != nil || got.State != ApprovalPending {
		t.Fatalf("approval after the refusal = %+v, %v; want still pending", got, err)
	}
}

// TestStaleAttemptFenced: the first taker stalls (a paused box) past the
// ack wait and the job is delivered again; the stalled attempt's result,
// written first, is refused (the retry claimed the job since), and the
// retry's is the job's: the run shows one attempt's output with that
// attempt's result. The stale attempt publishes no done frame.
func TestStaleAttemptFenced(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	b, _ := r.fleet("b")
	ctx := r.ctx()
	if _, err := a.SubmitJob(ctx, JobRun, "stale", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	ja, err := a.NextJob(ctx, JobRun, "a", testAckWait)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := b.NextJob(ctx, JobRun, "b", testAckWait) // after a's ack wait
	if err != nil {
		t.Fatal(err)
	}
	if err := ja.Publish(ctx, []byte(`"a's late output"`)); err != nil {
		t.Fatal(err)
	}
	if err := ja.Finish(ctx, []byte(`"a"`)); !errors.Is(err, ErrResultTaken) {
		t.Fatalf("the stale attempt's result: %v, want ErrResultTaken", err)
	}
	if _, err := a.JobResultOf(ctx, JobRun, "stale"); err == nil {
		t.Fatal("the stale attempt's result was stored")
	}
	if err := jb.Publish(ctx, []byte(`"b's output"`)); err != nil {
		t.Fatal(err)
	}
	if err := jb.Finish(ctx, []byte(`"b"`)); err != nil {
		t.Fatal(err)
	}
	var frames []JobFrame
	res, err := a.FollowJob(ctx, JobRun, "stale", func(fr JobFrame) error { frames = append(frames, fr); return nil })
	if err != nil || res.Box != "b" || res.Attempt != jb.Attempt || string(res.Data) != `"b"` {
		t.Fatalf("result = %+v, %v; want b's", res, err)
	}
	if n := len(frames); n == 0 || frames[n-1].Attempt != res.Attempt {
		t.Errorf("frames %+v: the last one shown is not the result's attempt's", frames)
	}
}
