package precheckrun

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Prechecks in fleet mode (docs/fleet.md): a precheck admitted here
// (checked against this box's grants, counted in its bound) travels as a
// job of SANDBOX_JOBS with its firing time and zone fixed here; the box
// that takes it with a free slot checks it again against its own grants,
// runs it with its own broker and policy (its MCP servers), and its answer
// is the job's one result. The caller here gets that answer as from a
// local precheck; a caller that leaves, or a stopping host, cancels it
// where it runs.

// fleetRetryDelay is how long a job this box cannot run waits before the
// next box may take it.
const fleetRetryDelay = time.Second

// fleetOpTimeout bounds one call to the fleet that has no caller deadline.
const fleetOpTimeout = 10 * time.Second

// precheckOutcome is a precheck job's result.
type precheckOutcome struct {
	// Answer is the precheck's answer; nil when the system failed
	// (ErrFailed on the admitting box).
	Answer *precheck.Answer `json:"answer,omitempty"`
}

// runRemote is Run's fleet path once admitted here.
func (k *Kind) runRemote(ctx context.Context, id string, req precheck.Request, plan precheckPlan, log *slog.Logger) (precheck.Answer, error) {
	req.FiredAt, req.TimeZone = plan.job.FiredAt, plan.job.TimeZone // the same day and time on every box
	payload, err := json.Marshal(req)
	if err != nil {
		return precheck.Answer{}, ErrFailed
	}
	sctx, cancel := context.WithTimeout(ctx, fleetOpTimeout)
	_, err = k.queue.SubmitJob(sctx, fleetjobs.JobPrecheck, id, payload)
	cancel()
	if err != nil {
		log.Error("precheck not handed to the fleet: NATS JetStream failed", "err", err)
		return precheck.Answer{}, k.gone(ctx, ErrFailed)
	}
	// As long as a local precheck may wait for a slot and run, and the
	// engine's own time around it.
	wait := time.Duration(k.cfg.TurnDeadlineSeconds+k.cfg.Prechecks.TimeoutSeconds)*time.Second + time.Minute
	wctx, cancelWait := context.WithTimeout(ctx, wait)
	defer cancelWait()
	res, err := k.queue.FollowJob(wctx, fleetjobs.JobPrecheck, id, func(fleetjobs.JobFrame) error { return nil })
	if err != nil {
		cctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
		if cerr := k.queue.CancelJob(cctx, fleetjobs.JobPrecheck, id); cerr != nil {
			log.Warn("precheck cancel not handed to the fleet (NATS JetStream)", "err", cerr)
		}
		c()
		if ctx.Err() == nil {
			log.Error("precheck lost in the fleet (NATS JetStream, or a box sent what was refused)", "err", err)
		}
		return precheck.Answer{}, k.gone(ctx, ErrFailed)
	}
	fctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
	_ = k.queue.ForgetJob(fctx, fleetjobs.JobPrecheck, id)
	c()
	var out precheckOutcome
	if res.GaveUp || json.Unmarshal(res.Data, &out) != nil || out.Answer == nil || !k.answerFits(*out.Answer) {
		log.Info("precheck done", "result", ResultFailed, "result_box", res.Box, "reason", "no answer from the fleet (given up, a failure there, or an answer over this box's bounds)")
		return precheck.Answer{}, ErrFailed
	}
	log.Info("precheck done in the fleet", "result_box", res.Box, "attempt", res.Attempt)
	return *out.Answer, nil
}

// gone is err, unless the host stops or the caller left.
func (k *Kind) gone(ctx context.Context, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), sandbox.ErrShuttingDown):
		return sandbox.ErrShuttingDown
	case ctx.Err() != nil:
		return sandbox.ErrClientGone
	}
	return err
}

// answerFits: an answer from another box within this box's bounds.
func (k *Kind) answerFits(a precheck.Answer) bool {
	pc := k.cfg.Prechecks
	ok := func(s string, n int) bool { return utf8.ValidString(s) && utf8.RuneCountInString(s) <= n }
	return ok(a.Note, pc.MaxNoteChars) && ok(a.Context, pc.MaxContextChars) && ok(a.Error, 4096)
}

// fleetHandle runs a precheck job on this box, holding the slot the job
// worker took.
func (k *Kind) fleetHandle(ctx context.Context, j *fleetjobs.Job) {
	log := k.log.With("precheck", j.ID, "fleet_attempt", j.Attempt)
	var req precheck.Request
	if err := json.Unmarshal(j.Payload, &req); err != nil || ids.ValidTurnID(j.ID) != nil {
		log.Warn("fleet precheck job refused: not a precheck job", "err", err)
		k.fleetFinish(ctx, j, precheckOutcome{}, log)
		return
	}
	plan, err := k.check(req) // this box's grants and bounds
	if err != nil || !k.cfg.Prechecks.Enabled {
		log.Info("fleet precheck job handed back: this box cannot run it (prechecks.enabled, its grants or bounds here)", "err", err)
		_ = j.Retry(fleetRetryDelay)
		return
	}
	timeout := time.Duration(k.cfg.Prechecks.TimeoutSeconds) * time.Second
	done, err := k.host.Admit(func() error {
		if !k.active.add(j.ID, activePrecheck{tag: ids.ChannelTag(plan.channel), deadline: k.now().Add(timeout)}) {
			return ErrBusy
		}
		return nil
	})
	if err != nil {
		log.Info("fleet precheck job handed back: this box is stopping or at its bound", "err", err)
		_ = j.Retry(fleetRetryDelay)
		return
	}
	defer done()
	defer k.active.remove(j.ID)
	cancelReq, err := j.CancelRequested(ctx)
	if err != nil {
		_ = j.Retry(fleetRetryDelay)
		return
	}
	rctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	defer context.AfterFunc(k.host.Stopped(), func() { cancel(sandbox.ErrShuttingDown) })()
	defer context.AfterFunc(ctx, func() { cancel(sandbox.ErrShuttingDown) })()
	go func() {
		select {
		case <-cancelReq:
			cancel(sandbox.ErrClientGone)
		case <-rctx.Done():
		}
	}()
	log.Info("fleet precheck taken", "channel", ids.ChannelTag(plan.channel))
	ans, err := k.answer(rctx, j.ID, plan, k.now(), log, nil)
	var out precheckOutcome
	switch {
	case errors.Is(err, sandbox.ErrShuttingDown):
		_ = j.Retry(0) // another box runs it
		return
	case err == nil:
		out.Answer = &ans
	}
	k.fleetFinish(context.WithoutCancel(ctx), j, out, log)
}

func (k *Kind) fleetFinish(ctx context.Context, j *fleetjobs.Job, out precheckOutcome, log *slog.Logger) {
	data, err := json.Marshal(out)
	if err == nil {
		err = j.Finish(ctx, data)
	}
	if err != nil && !errors.Is(err, fleetjobs.ErrResultTaken) {
		log.Error("fleet precheck's result not recorded (NATS JetStream): the job moves to another box", "err", err)
	}
}

// StartFleet starts taking the fleet's precheck jobs while this box has a
// free slot, until stop or the host stops; nothing without a fleet.
func (k *Kind) StartFleet(ctx context.Context, slot fleetjobs.SlotFunc) (stop func(), err error) {
	if k.queue == nil || !k.cfg.Prechecks.Enabled {
		return func() {}, nil // a box that cannot run one takes none
	}
	w, err := k.queue.StartJobWorker(ctx, fleetjobs.JobWorkerOptions{
		Kind: fleetjobs.JobPrecheck, Box: k.box, Slot: slot, Handle: k.fleetHandle, Logger: k.log,
	})
	if err != nil {
		return nil, err
	}
	once := sync.OnceFunc(w.Stop)
	unhook := context.AfterFunc(k.host.Stopped(), once)
	return func() { unhook(); once() }, nil
}
