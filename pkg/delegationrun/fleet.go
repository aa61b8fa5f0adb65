package delegationrun

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Delegated jobs in fleet mode (docs/fleet.md): a job admitted here
// (its channel's bound, its record and the finished-jobs stream stay here)
// travels as a job of SANDBOX_JOBS with its deadline; the box that takes it
// with a free slot runs the research turn under a record of its own (its
// scratch workspace, container, broker and policy, its model credential),
// and sends the report back in chunks, then the job's one result. A cancel
// here (the channel turned off, the deadline, a stopping host) reaches it.

// fleetRetryDelay is how long a job this box cannot run waits before the
// next box may take it.
const fleetRetryDelay = time.Second

// fleetOpTimeout bounds one call to the fleet that has no caller deadline.
const fleetOpTimeout = 10 * time.Second

// fleetChunk is the most report bytes one frame carries.
const fleetChunk = 256 << 10

// jobPayload is a delegated job as it travels.
type jobPayload struct {
	Channel        string             `json:"channel"`
	Request        delegation.Request `json:"request"`
	DeadlineUnixMs int64              `json:"deadlineUnixMs"`
}

// jobOutcome is its result; the report came before it, in frames.
type jobOutcome struct {
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
}

// runRemote is drive's fleet path: the job's finish from the box that ran it.
func (k *Kind) runRemote(ctx context.Context, j *delegation.Job, log *slog.Logger) delegation.Finish {
	payload, err := json.Marshal(jobPayload{Channel: j.Channel(), DeadlineUnixMs: j.Deadline().UnixMilli(),
		Request: delegation.Request{Title: j.Title(), Task: j.Task(), Author: j.Author()}})
	if err != nil {
		return delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed}
	}
	sctx, cancel := context.WithTimeout(ctx, fleetOpTimeout)
	_, err = k.queue.SubmitJob(sctx, fleetjobs.JobDelegation, j.ID(), payload)
	cancel()
	if err != nil {
		log.Error("delegated job not handed to the fleet: NATS JetStream failed", "err", err)
		return jobEnded(ctx, delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed})
	}
	// The report, chunk by chunk, of the attempt followed; bounded by
	// this box's report bound (UTF-8: at most 4 bytes a character).
	var report strings.Builder
	var attempt uint64
	limit := 4 * k.cfg.Delegation.MaxReportChars
	over := false
	res, err := k.queue.FollowJob(ctx, fleetjobs.JobDelegation, j.ID(), func(fr fleetjobs.JobFrame) error {
		if fr.Attempt != attempt {
			attempt, over = fr.Attempt, false
			report.Reset()
		}
		var chunk string
		if json.Unmarshal(fr.Data, &chunk) != nil {
			return fleet.ErrInvalid
		}
		if report.Len()+len(chunk) > limit {
			over = true
			return nil
		}
		report.WriteString(chunk)
		return nil
	})
	if err != nil {
		cctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
		if cerr := k.queue.CancelJob(cctx, fleetjobs.JobDelegation, j.ID()); cerr != nil {
			log.Warn("delegated job's cancel not handed to the fleet (NATS JetStream)", "err", cerr)
		}
		c()
		if ctx.Err() == nil {
			log.Error("delegated job lost in the fleet (NATS JetStream, or a box sent what was refused)", "err", err)
		}
		return jobEnded(ctx, delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed})
	}
	fctx, c := context.WithTimeout(context.WithoutCancel(ctx), fleetOpTimeout)
	_ = k.queue.ForgetJob(fctx, fleetjobs.JobDelegation, j.ID())
	c()
	var out jobOutcome
	if res.GaveUp || json.Unmarshal(res.Data, &out) != nil {
		log.Error("delegated job given up or its result refused", "result_box", res.Box, "attempts", res.Attempt)
		return delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed}
	}
	log.Info("delegated job carried out in the fleet", "result_box", res.Box, "attempt", res.Attempt)
	// Finish bounds the report and scrubs the reason.
	fin := delegation.Finish{Result: out.Result, Reason: out.Reason}
	if out.Result == delegation.ResultOK {
		if over || res.Attempt != attempt || !utf8.ValidString(report.String()) {
			return delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed}
		}
		fin.Report = report.String()
	}
	return fin
}

// fleetHandle runs a delegated job of the fleet on this box, holding the
// slot the job worker took.
func (k *Kind) fleetHandle(ctx context.Context, fj *fleetjobs.Job) {
	log := k.log.With("job", fj.ID, "fleet_attempt", fj.Attempt)
	var p jobPayload
	if err := json.Unmarshal(fj.Payload, &p); err != nil || ids.ValidTurnID(fj.ID) != nil || ids.ValidChannel(p.Channel) != nil {
		log.Warn("fleet delegated job refused: not a delegated job", "err", err)
		k.fleetFinish(ctx, fj, "", jobOutcome{Result: delegation.ResultFailed, Reason: reasonFailed}, log)
		return
	}
	if !k.cfg.Delegation.Enabled {
		_ = fj.Retry(fleetRetryDelay)
		return
	}
	var j *delegation.Job
	done, err := k.host.Admit(func() error {
		var err error
		j, err = k.shadows.Admit(fj.ID, p.Channel, -1, p.Request) // this box's bounds
		return err
	})
	if err != nil {
		log.Info("fleet delegated job handed back: this box is stopping, or it breaks a bound here", "err", err)
		_ = fj.Retry(fleetRetryDelay)
		return
	}
	defer done()
	cancelReq, err := fj.CancelRequested(ctx)
	if err != nil {
		j.Finish(delegation.Finish{Result: delegation.ResultCancelled})
		_ = fj.Retry(fleetRetryDelay)
		return
	}
	jctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	deadline := time.UnixMilli(p.DeadlineUnixMs)
	if d := j.Deadline(); d.Before(deadline) {
		deadline = d
	}
	jctx, cancelDeadline := context.WithDeadlineCause(jctx, deadline, errTimeout)
	defer cancelDeadline()
	defer context.AfterFunc(k.host.Stopped(), func() { cancel(sandbox.ErrShuttingDown) })()
	defer context.AfterFunc(ctx, func() { cancel(sandbox.ErrShuttingDown) })()
	go func() {
		select {
		case <-cancelReq:
			cancel(errCancelledThere)
		case <-jctx.Done():
		}
	}()
	var fin delegation.Finish
	if j.Start() == nil {
		log.Info("fleet delegated job taken", "channel", ids.ChannelTag(p.Channel))
		fin = k.execute(jctx, j, log)
	}
	j.Finish(fin)
	if errors.Is(context.Cause(jctx), sandbox.ErrShuttingDown) {
		_ = fj.Retry(0) // this box stops: another one runs it
		return
	}
	k.fleetFinish(context.WithoutCancel(ctx), fj, fin.Report, jobOutcome{Result: fin.Result, Reason: fin.Reason}, log)
}

// errCancelledThere: the admitting box cancelled the job.
var errCancelledThere = errors.New("cancelled by the admitting box")

// fleetFinish publishes the report in chunks, then the result.
func (k *Kind) fleetFinish(ctx context.Context, fj *fleetjobs.Job, report string, out jobOutcome, log *slog.Logger) {
	for len(report) > 0 {
		n := min(len(report), fleetChunk)
		for n < len(report) && !utf8.RuneStart(report[n]) {
			n--
		}
		b, _ := json.Marshal(report[:n])
		if err := fj.Publish(ctx, b); err != nil {
			log.Error("fleet delegated job's report not published (NATS JetStream): the job moves to another box", "err", err)
			return
		}
		report = report[n:]
	}
	data, err := json.Marshal(out)
	if err == nil {
		err = fj.Finish(ctx, data)
	}
	if err != nil && !errors.Is(err, fleetjobs.ErrResultTaken) {
		log.Error("fleet delegated job's result not recorded (NATS JetStream): the job moves to another box", "err", err)
	}
}

// StartFleet starts taking the fleet's delegated jobs while this box has a
// free slot, until stop or the host stops; nothing without a fleet.
func (k *Kind) StartFleet(ctx context.Context, slot fleetjobs.SlotFunc) (stop func(), err error) {
	if k.queue == nil || !k.cfg.Delegation.Enabled {
		return func() {}, nil // a box that cannot run one takes none
	}
	w, err := k.queue.StartJobWorker(ctx, fleetjobs.JobWorkerOptions{
		Kind: fleetjobs.JobDelegation, Box: k.box, Slot: slot, Handle: k.fleetHandle, Logger: k.log,
	})
	if err != nil {
		return nil, err
	}
	once := sync.OnceFunc(w.Stop)
	unhook := context.AfterFunc(k.host.Stopped(), once)
	return func() { unhook(); once() }, nil
}
