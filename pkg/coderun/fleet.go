package coderun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Runs in fleet mode (docs/fleet.md): a run admitted here keeps its
// record here (status, events, cancel and approval answer from it, as for
// a local run), waits for its approval here (the decision in the fleet's
// control bucket, so an operator on any box can give it), then travels as
// a job of SANDBOX_JOBS. The box that takes it (this one or another, when
// it has a free slot) runs it through its own kind under a shadow record:
// its container, broker and policy are that box's, written from its own
// configuration. The shadow's events come back as frames and are applied
// to the record here; its artifacts follow as chunks, checked against this
// box's bounds; its result is the job's one result.
//
// A run asking for a credential never travels: the approval names this
// box's credential (its host, header, the projects and clients it is
// granted to), and another box's credential of that name may be another
// secret with another grant, which nobody approved. It runs here, as
// without a fleet. Neither does a run whose job is over fleet.MaxJobBytes.

// ErrorNoBox is the error of a run no box of the fleet could carry out
// (handed back, or killing its box, more often than the bound).
const ErrorNoBox = "no box of the fleet could carry out the run; the hosts' logs have details"

// fleetRetryDelay is how long a job this box cannot run waits before the
// next box may take it.
const fleetRetryDelay = time.Second

// fleetChunk is the most output or artifact bytes one frame carries
// (base64 in JSON stays under fleet.MaxJobFrameBytes).
const fleetChunk = 256 << 10

// maxRemoteErrorBytes bounds a result's error text from another box.
const maxRemoteErrorBytes = 1024

// runJob is a run's job payload.
type runJob struct {
	Params runs.Params `json:"params"`
	// ApprovedBy is the uid that approved a network run on the admitting box.
	ApprovedBy *int `json:"approvedBy,omitempty"`
}

// runFrame is one frame of a run's events: an event of its shadow, or a
// chunk of an artifact once the shadow finished.
type runFrame struct {
	Event    *runs.Event    `json:"event,omitempty"`
	Artifact *runs.Artifact `json:"artifact,omitempty"`
}

// travels: the run goes to the fleet (a fleet, and nothing that must stay
// on this box).
func (k *Kind) travels(p runs.Params) bool {
	if k.queue == nil || len(p.Credentials) > 0 {
		return false
	}
	b, err := json.Marshal(runJob{Params: p})
	return err == nil && len(b) <= fleet.MaxJobBytes
}

// fleetApproval records a network run's pending approval in the fleet, so
// an operator on any box may decide it, and applies the decision to r.
// The returned stop ends the wait and forgets the record.
//
// A run asking for a credential keeps its approval here: it grants this
// box's credential, which is this box's admins' to give, not any box's
// that may write the fleet's control bucket.
func (k *Kind) fleetApproval(ctx context.Context, r *Run, log *slog.Logger) (stop func()) {
	if k.queue == nil || len(r.Params().Credentials) > 0 {
		return func() {}
	}
	what, err := json.Marshal(r.Summary())
	if err == nil {
		actx, cancel := context.WithTimeout(ctx, fleetOpTimeout)
		err = k.queue.AskApproval(actx, fleetjobs.JobRun, r.ID(), what)
		cancel()
	}
	if err != nil {
		// The run still waits for an approval here (on this box's API).
		log.Warn("run approval not shared with the fleet (NATS JetStream): only this box can decide it", "err", err)
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, err := k.queue.AwaitDecision(wctx, fleetjobs.JobRun, r.ID())
		if err != nil {
			return
		}
		k.applyDecision(r, a, log)
	}()
	return func() {
		cancel()
		<-done
		fctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
		defer c()
		if err := k.queue.ForgetApproval(fctx, fleetjobs.JobRun, r.ID()); err != nil {
			log.Warn("run approval record not removed from the fleet (NATS JetStream); it expires", "err", err)
		}
	}
}

// applyDecision applies a decision taken in the fleet to the run here (it
// may already be applied: the box that decided is this one).
func (k *Kind) applyDecision(r *Run, a fleetjobs.Approval, log *slog.Logger) {
	var err error
	if a.State == fleetjobs.ApprovalApproved {
		err = r.Approve(a.By)
	} else {
		err = r.Deny(a.By)
	}
	if err == nil && a.Box != k.box {
		log.Info("run approval decided on another box", "decision", a.State, "by_uid", a.By, "decided_on", a.Box)
	}
}

// decide is the approve and deny routes in fleet mode for a run of this
// box: the decision lands in the fleet first (one decision, whichever box
// gives it), then here.
func (k *Kind) decide(r *Run, approve bool, uid int) error {
	if k.queue == nil {
		if approve {
			return r.Approve(uid)
		}
		return r.Deny(uid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), fleetOpTimeout)
	defer cancel()
	a, err := k.queue.Decide(ctx, fleetjobs.JobRun, r.ID(), approve, uid, k.box)
	if errors.Is(err, fleetjobs.ErrNotPending) {
		// Decided already, or not shared with the fleet: this box's
		// record says which.
		if approve {
			return r.Approve(uid)
		}
		return r.Deny(uid)
	}
	if err != nil {
		return err
	}
	k.applyDecision(r, a, k.log.With("run", r.ID()))
	return nil
}

// handleRemoteDecision answers approve or deny for a run this box does not
// hold: if the fleet has its approval pending, the decision lands there and
// the box that admitted it applies it. The answer is the run as the
// admitting box showed it to approvers, with the decision.
func (k *Kind) handleRemoteDecision(w http.ResponseWriter, r *http.Request, id string, approve bool) error {
	if k.queue == nil || ids.ValidTurnID(id) != nil {
		return runs.ErrNotFound
	}
	ctx, cancel := context.WithTimeout(r.Context(), fleetOpTimeout)
	defer cancel()
	uid := api.CallerUID(r)
	a, err := k.queue.Decide(ctx, fleetjobs.JobRun, id, approve, uid, k.box)
	if errors.Is(err, fleetjobs.ErrNotPending) {
		return runs.ErrNotFound
	}
	if errors.Is(err, fleetjobs.ErrAdmitterAway) {
		k.log.Info("run approval refused: the box that admitted the run is not there to apply it", "run", id)
		return err
	}
	if err != nil {
		k.log.Warn("run approval not recorded: the fleet (NATS JetStream) failed", "run", id, "err", err)
		return err
	}
	var st runs.Status
	if json.Unmarshal(a.What, &st) != nil || st.ID != id {
		st = runs.Status{ID: id}
	}
	st.ApprovalDeadline = nil
	if approve {
		st.State, st.ApprovedBy = runs.StateQueued, &uid
	} else {
		st.State, st.Result, st.Error = runs.StateFinished, runs.ResultDenied, ErrorDenied
	}
	k.log.Info("run approval decided for another box's run", "run", id, "approve", approve, "by_uid", uid)
	api.WriteJSON(w, http.StatusOK, st)
	return nil
}

// errFinishedHere: the run finished on this box before any box took it.
var errFinishedHere = errors.New("run finished here")

// fleetOpTimeout bounds one call to the fleet that has no caller deadline.
const fleetOpTimeout = 10 * time.Second

// driveRemote is drive's fleet path once the run may start: publish the
// job, apply its frames to r, finish r with its result. A cancel of r
// reaches the box running it; a stopping host cancels it there too.
func (k *Kind) driveRemote(ctx context.Context, r *Run, log *slog.Logger, finish func(Finish)) {
	id := r.ID()
	p := r.Params()
	job := runJob{Params: p, ApprovedBy: r.Summary().ApprovedBy}
	payload, err := json.Marshal(job)
	if err != nil {
		finish(Finish{Result: runs.ResultError, Error: ErrorInternal})
		return
	}
	sctx, cancel := context.WithTimeout(ctx, fleetOpTimeout)
	_, err = k.queue.SubmitJob(sctx, fleetjobs.JobRun, id, payload)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			finish(Finish{Result: runs.ResultCancelled, Error: "the host stopped"})
			return
		}
		log.Error("run not handed to the fleet: NATS JetStream failed", "err", err)
		finish(Finish{Result: runs.ResultError, Error: "the run could not be handed to the fleet; the host log has details"})
		return
	}
	log.Info("run handed to the fleet", "box", k.box)
	// Following ends when the result is in, when r finished here (a
	// cancel while queued), or when the host stops; a cancel of a running
	// r (drive's ctx ends with it) goes to the box running it, and its
	// result is still followed.
	fctx, stopFollow := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopFollow(nil)
	defer context.AfterFunc(k.host.Stopped(), func() { stopFollow(sandbox.ErrShuttingDown) })()
	go func() {
		select {
		case <-r.CancelRequested():
		case <-fctx.Done():
			return
		}
		cctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
		if err := k.queue.CancelJob(cctx, fleetjobs.JobRun, id); err != nil {
			log.Warn("run cancel not handed to the fleet (NATS JetStream); the run goes on where it runs", "err", err)
		}
		c()
		select {
		case <-r.Done(): // cancelled before it was taken: nothing to follow
			stopFollow(errFinishedHere)
		case <-fctx.Done():
		}
	}()
	m := &mirror{k: k, r: r, p: p}
	res, err := k.queue.FollowJob(fctx, fleetjobs.JobRun, id, m.apply)
	if err != nil {
		switch cause := context.Cause(fctx); {
		case errors.Is(cause, errFinishedHere):
			return // r is finished (cancelled); the box that takes the job sees the cancel
		case errors.Is(cause, sandbox.ErrShuttingDown):
			cctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
			if err := k.queue.CancelJob(cctx, fleetjobs.JobRun, id); err != nil {
				log.Warn("run cancel not handed to the fleet (NATS JetStream); the run goes on where it runs", "err", err)
			}
			c()
			finish(Finish{Result: runs.ResultCancelled, Error: "the host stopped"})
		default:
			log.Error("run lost in the fleet: its events could not be followed (NATS JetStream, or a box sent what was refused)", "err", err)
			finish(Finish{Result: runs.ResultError, Error: "the run's events from the fleet were lost or refused; the host log has details"})
		}
		return
	}
	finish(m.finish(res, log))
	fgctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
	defer c()
	if err := k.queue.ForgetJob(fgctx, fleetjobs.JobRun, id); err != nil {
		log.Warn("run's frames not purged from the fleet (NATS JetStream); they age out", "err", err)
	}
}

// mirror applies a remote run's frames to its record here.
type mirror struct {
	k       *Kind
	r       *Run
	p       runs.Params
	attempt uint64
	box     string
	arts    []runs.Artifact
	bytes   int64
	refused bool // an artifact broke this box's bounds
}

func (m *mirror) apply(fr fleetjobs.JobFrame) error {
	if fr.Attempt < m.attempt {
		return nil // a dead (or stalled) attempt's late frame
	}
	if fr.Attempt > m.attempt {
		// The job moved to another box: its artifacts start over; what
		// the dead attempt wrote stays in the run's output.
		m.attempt, m.box, m.arts, m.bytes, m.refused = fr.Attempt, fr.Box, nil, 0, false
	}
	var f runFrame
	if err := json.Unmarshal(fr.Data, &f); err != nil {
		return fmt.Errorf("run frame: %w", fleet.ErrInvalid)
	}
	switch {
	case f.Event != nil:
		ev := f.Event
		switch ev.Type {
		case runs.EventState:
			if ev.State == runs.StateRunning {
				_ = m.r.Start() // already running after a move
			}
		case runs.EventOutput:
			if ev.Phase != runs.PhaseSetup && ev.Phase != runs.PhaseMain {
				return fmt.Errorf("run frame phase: %w", fleet.ErrInvalid)
			}
			m.r.Output(ev.Stream, ev.Phase, ev.Data) // bounded by the record, as local output
		}
	case f.Artifact != nil:
		a := *f.Artifact
		rc := m.k.cfg.Runs
		m.bytes += int64(len(a.Data))
		if m.refused || m.bytes > rc.MaxArtifactTotalBytes || len(m.arts) > len(m.p.Artifacts) {
			m.refused, m.arts = true, nil
			return nil
		}
		if n := len(m.arts); n > 0 && m.arts[n-1].Path == a.Path && m.arts[n-1].Error == "" && a.Error == "" {
			last := &m.arts[n-1]
			if int64(len(last.Data)+len(a.Data)) > rc.MaxArtifactBytes {
				m.refused, m.arts = true, nil
				return nil
			}
			last.Data = append(last.Data, a.Data...)
			return nil
		}
		m.arts = append(m.arts, a)
	}
	return nil
}

// finish is the run's Finish from the job's result: the result's fields,
// checked, and the artifacts of the attempt that wrote it, checked against
// this box's bounds as a local run's are.
func (m *mirror) finish(res fleetjobs.JobResult, log *slog.Logger) Finish {
	if res.GaveUp {
		log.Error("run given up by the fleet: no box could carry it out", "attempts", res.Attempt)
		return Finish{Result: runs.ResultError, Error: ErrorNoBox}
	}
	var st runs.Status
	if err := json.Unmarshal(res.Data, &st); err != nil {
		log.Error("run result from the fleet refused", "result_box", res.Box, "err", err)
		return Finish{Result: runs.ResultError, Error: "the run's result from the fleet was refused; the host log has details"}
	}
	if st.Standby {
		m.r.ServedByStandby()
	}
	f := Finish{Result: st.Result, ExitCode: st.ExitCode, FailedSetup: st.FailedSetup,
		Duration: time.Duration(max(st.DurationMs, 0)) * time.Millisecond, Error: st.Error,
		Cut: Cut{Stdout: st.StdoutTruncated, Stderr: st.StderrTruncated, StdoutDropped: st.StdoutDroppedBytes, StderrDropped: st.StderrDroppedBytes}}
	if f.FailedSetup < 0 || f.FailedSetup > len(m.p.Setup) {
		f.FailedSetup, f.Result = 0, runs.ResultError
	}
	if len(f.Error) > maxRemoteErrorBytes || !utf8.ValidString(f.Error) {
		f.Error = "the run failed on another box; its log has details"
	}
	if f.Result == runs.ResultOK || f.Result == runs.ResultFailed {
		arts := m.arts
		if res.Attempt != m.attempt {
			arts = nil // the winner's frames were not the ones followed
		}
		rc := m.k.cfg.Runs
		checked, err := runs.CheckArtifacts(m.p.Artifacts, arts, rc.MaxArtifactBytes, rc.MaxArtifactTotalBytes)
		if err != nil || m.refused {
			log.Warn("run artifacts from the fleet refused", "result_box", res.Box, "err", err)
			return Finish{Result: runs.ResultError, Error: "the run's artifacts were refused"}
		}
		f.Artifacts = checked
	}
	log.Info("run carried out in the fleet", "result_box", res.Box, "attempt", res.Attempt)
	return f
}

// fleetHandle runs a job of another box's run (or this one's) on this box,
// holding the slot the job worker took: a shadow record, driven as a local
// run's from the slot on, its events published as they come, its artifacts
// after, then its result.
func (k *Kind) fleetHandle(ctx context.Context, j *fleetjobs.Job) {
	log := k.log.With("run", j.ID, "fleet_attempt", j.Attempt)
	var job runJob
	if err := json.Unmarshal(j.Payload, &job); err != nil || ids.ValidTurnID(j.ID) != nil {
		log.Warn("fleet run job refused: not a run job", "err", err)
		k.fleetFail(ctx, j, log)
		return
	}
	p, rc := job.Params, k.cfg.Runs
	if len(p.Credentials) > 0 {
		// No honest box hands out a run naming a credential (it stays on
		// the box whose credential was approved): refused for good, not
		// bounced through the fleet to its bound.
		log.Warn("fleet run job refused: it names a credential (a run with one stays on its box)", "credentials", len(p.Credentials))
		k.fleetFail(ctx, j, log)
		return
	}
	// The job came from another box: this box's own rules apply, and no
	// credential ever travels (Validate below has no credential known).
	err := p.Validate(runs.ParamLimits{MaxArtifacts: rc.MaxArtifacts, ProjectKnown: func(name string) bool {
		_, ok := rc.ProjectPath(name)
		return ok
	}})
	_, canRun := k.life.Containers().(sandbox.RunContainers)
	if err != nil || !rc.Enabled || !canRun || (p.Network && job.ApprovedBy == nil) {
		log.Info("fleet run job handed back: this box cannot run it (runs.enabled, its project, or its bounds here)", "err", err)
		_ = j.Retry(fleetRetryDelay)
		return
	}
	// Admitted like a local run: a stopping host waits for its cleanup.
	var shadow *Run
	done, err := k.host.Admit(func() error {
		var err error
		shadow, err = k.shadows.adopt(j.ID, p, job.ApprovedBy)
		return err
	})
	if err != nil {
		log.Info("fleet run job handed back: this box is stopping or at its runs bound", "err", err)
		_ = j.Retry(fleetRetryDelay)
		return
	}
	defer done()
	defer k.shadows.remove(j.ID)
	cancelReq, err := j.CancelRequested(ctx)
	if err != nil {
		log.Warn("fleet run job handed back: its cancellation cannot be watched (NATS JetStream)", "err", err)
		shadow.Finish(Finish{Result: runs.ResultCancelled})
		_ = j.Retry(fleetRetryDelay)
		return
	}
	// The shadow's events go out as they come, in order, from its bounded
	// history (a publisher slower than the run skips output, as a slow
	// local subscriber does).
	published := make(chan error, 1)
	go func() {
		published <- shadow.Subscribe(context.WithoutCancel(ctx), func(ev runs.Event) error {
			if ev.Type == runs.EventResult {
				return nil
			}
			return k.publishEvent(context.WithoutCancel(ctx), j, ev)
		})
	}()
	k.driveShadow(ctx, shadow, cancelReq, log)
	if err := <-published; err != nil {
		log.Warn("fleet run's events not all published (NATS JetStream)", "err", err)
	}
	st := shadow.Status()
	for _, a := range st.Artifacts {
		if err := k.publishArtifact(context.WithoutCancel(ctx), j, a); err != nil {
			log.Warn("fleet run's artifacts not published (NATS JetStream)", "err", err)
			break
		}
	}
	for i := range st.Artifacts {
		st.Artifacts[i].Data = nil
	}
	st.Stdout, st.Stderr = "", ""
	data, err := json.Marshal(st)
	if err == nil {
		err = j.Finish(context.WithoutCancel(ctx), data)
	}
	switch {
	case errors.Is(err, fleetjobs.ErrResultTaken):
		log.Warn("fleet run carried out twice: another box's result was first (at least once); this one is dropped")
	case err != nil:
		log.Error("fleet run's result not recorded (NATS JetStream): the job moves to another box", "err", err)
	default:
		log.Info("fleet run done for the fleet", "result", st.Result)
	}
}

// fleetFail records a job's failure as its result.
func (k *Kind) fleetFail(ctx context.Context, j *fleetjobs.Job, log *slog.Logger) {
	data, _ := json.Marshal(runs.Status{ID: j.ID, State: runs.StateFinished, Result: runs.ResultError, Error: "the run was refused by the box that took it"})
	if err := j.Finish(ctx, data); err != nil && !errors.Is(err, fleetjobs.ErrResultTaken) {
		log.Warn("fleet run's result not recorded (NATS JetStream)", "err", err)
	}
}

// driveShadow is drive from the slot on, for a shadow: start, execute,
// finish; a cancel from the fleet or a stopping host stops it.
func (k *Kind) driveShadow(ctx context.Context, r *Run, cancelReq <-chan struct{}, log *slog.Logger) {
	defer r.End()
	rctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stopWatch := context.AfterFunc(k.host.Stopped(), func() { cancel(sandbox.ErrShuttingDown) })
	defer stopWatch()
	stopJob := context.AfterFunc(ctx, func() { cancel(sandbox.ErrShuttingDown) })
	defer stopJob()
	go func() {
		select {
		case <-cancelReq:
			_ = r.Cancel()
		case <-rctx.Done():
		}
	}()
	go func() {
		select {
		case <-r.CancelRequested():
			cancel(errCancelled)
		case <-rctx.Done():
		}
	}()
	select {
	case <-cancelReq: // cancelled before it was taken
		_ = r.Cancel()
	default:
	}
	if err := r.Start(); err != nil {
		return // cancelled before it started: the record is finished
	}
	// The first Finish wins: the supervisor's result as soon as its frame
	// arrived, anything else after the cleanup.
	r.Sandboxed()
	fin := k.execute(rctx, r, log, r.Finish)
	r.Finish(fin)
}

func (k *Kind) publishEvent(ctx context.Context, j *fleetjobs.Job, ev runs.Event) error {
	for {
		part := ev
		if len(ev.Data) > fleetChunk {
			part.Data = ev.Data[:fleetChunk]
		}
		b, err := json.Marshal(runFrame{Event: &part})
		if err != nil {
			return err
		}
		if err := j.Publish(ctx, b); err != nil {
			return err
		}
		ev.Data = ev.Data[len(part.Data):]
		if len(ev.Data) == 0 {
			return nil
		}
		ev.Dropped = 0
	}
}

func (k *Kind) publishArtifact(ctx context.Context, j *fleetjobs.Job, a runs.Artifact) error {
	for first := true; first || len(a.Data) > 0; first = false {
		part := a
		part.Data = a.Data[:min(len(a.Data), fleetChunk)]
		b, err := json.Marshal(runFrame{Artifact: &part})
		if err != nil {
			return err
		}
		if err := j.Publish(ctx, b); err != nil {
			return err
		}
		a.Data = a.Data[len(part.Data):]
	}
	return nil
}

// StartFleet starts taking the fleet's run jobs while this box has a free
// slot (slot: the host's spare slot that yields to local work), until stop
// or the host stops; stop waits for the jobs running. Nothing without a
// fleet.
func (k *Kind) StartFleet(ctx context.Context, slot fleetjobs.SlotFunc) (stop func(), err error) {
	if _, ok := k.life.Containers().(sandbox.RunContainers); k.queue == nil || !k.cfg.Runs.Enabled || !ok {
		return func() {}, nil // a box that cannot run one takes none
	}
	w, err := k.queue.StartJobWorker(ctx, fleetjobs.JobWorkerOptions{
		Kind: fleetjobs.JobRun, Box: k.box, Slot: slot, Handle: k.fleetHandle, Logger: k.log,
	})
	if err != nil {
		return nil, err
	}
	once := sync.OnceFunc(w.Stop)
	unhook := context.AfterFunc(k.host.Stopped(), once)
	return func() { unhook(); once() }, nil
}

// shadowRuns are the runs this box executes for the fleet: not in the
// API's registry (they are another box's record), but listed for the
// reaper like any run here.
type shadowRuns struct{ reg *Registry }

// adopt records a shadow of run id, approved by approvedBy if it has network.
func (s shadowRuns) adopt(id string, p runs.Params, approvedBy *int) (*Run, error) {
	g := s.reg
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked()
	if g.runs[id] != nil {
		return nil, fmt.Errorf("run %s already runs here: %w", id, runs.ErrBusy)
	}
	active := 0
	for _, r := range g.runs {
		if !r.finished() {
			active++
		}
	}
	if active >= g.lim.MaxActive {
		return nil, runs.Busyf("at most %d runs here%s", g.lim.MaxActive, keys(g.lim.ActiveKeys))
	}
	g.created++
	r := newRun(id, p.Clone(), -1, g.lim, g.now, g.created)
	if p.Network {
		uid := -1
		if approvedBy != nil {
			uid = *approvedBy
		}
		if err := r.Approve(uid); err != nil {
			return nil, err
		}
	}
	g.runs[id] = r
	return r, nil
}

func (s shadowRuns) remove(id string) {
	g := s.reg
	g.mu.Lock()
	r := g.runs[id]
	delete(g.runs, id)
	g.mu.Unlock()
	if r != nil {
		r.release(true)
	}
}
