package fleetjobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// JobWorkerOptions configure a box's taking of one kind's jobs.
type JobWorkerOptions struct {
	Kind string
	Box  string // this box's name, recorded in frames and results
	// Slot waits for a free admission slot of this box: a job is pulled
	// only while one is held, so a busy box takes no work it cannot start.
	// wanted is closed when local work starts waiting for a slot; a worker
	// still waiting for a job then gives its slot back.
	Slot SlotFunc
	// Handle runs a taken job on this box, holding the slot, and settles
	// it (Finish or Retry); a job it leaves unsettled is handed back. The
	// job's ctx ends when the worker stops, and once Handle returns.
	Handle func(ctx context.Context, j *Job)
	// AckWait: a job whose box stops answering (dead, cut off) goes to
	// another box after it; the worker heartbeats every AckWait/3 while a
	// job runs. Default DefaultJobAckWait.
	AckWait time.Duration
	// MaxAttempts: a job delivered more often is given up (a JobResult
	// with GaveUp) without running. Default 5.
	MaxAttempts uint64
	Logger      *slog.Logger
}

// SlotFunc waits for a free admission slot of this box (see
// JobWorkerOptions.Slot).
type SlotFunc func(ctx context.Context) (release func(), wanted <-chan struct{}, err error)

// Starter starts one kind's taking of jobs (a kind's StartFleet).
type Starter func(ctx context.Context, slot SlotFunc) (stop func(), err error)

// StartAll starts every kind's taking of jobs on slot; stop stops them
// all. If one fails to start, those started are stopped.
func StartAll(ctx context.Context, slot SlotFunc, starters ...Starter) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, start := range starters {
		s, err := start(ctx, slot)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// DefaultJobAckWait is JobWorkerOptions.AckWait's default.
const DefaultJobAckWait = 10 * time.Second

// JobWorker pulls one kind's jobs while this box has free slots.
type JobWorker struct {
	q      *Queue
	o      JobWorkerOptions
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartJobWorker creates the kind's consumer and starts pulling.
func (q *Queue) StartJobWorker(ctx context.Context, o JobWorkerOptions) (*JobWorker, error) {
	if !validJobKind(o.Kind) {
		return nil, fmt.Errorf("job kind %q: %w", o.Kind, fleet.ErrInvalid)
	}
	if o.Box == "" || o.Slot == nil || o.Handle == nil {
		return nil, fmt.Errorf("job worker needs a box name, a slot and a handler: %w", fleet.ErrInvalid)
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultJobAckWait
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c, err := q.jobConsumer(ctx, o.Kind, o.AckWait)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	w := &JobWorker{q: q, o: o, log: o.Logger.With("box", o.Box, "job_kind", o.Kind), ctx: wctx, cancel: cancel}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for w.ctx.Err() == nil {
			if err := w.once(func(ctx context.Context) (*Job, error) { return q.nextJob(ctx, c, o.Kind, o.Box) }); err != nil && w.ctx.Err() == nil {
				if errors.Is(err, errNoSlot) {
					w.log.Debug("fleet jobs: no slot of this box's admission (it is stopping)", "err", err)
				} else {
					w.log.Warn("fleet jobs: pulling failed (NATS JetStream); retrying", "err", err)
				}
				t := time.NewTimer(time.Second)
				select {
				case <-t.C:
				case <-w.ctx.Done():
					t.Stop()
				}
			}
		}
	}()
	return w, nil
}

// Stop stops pulling, ends running jobs' contexts and waits for them.
func (w *JobWorker) Stop() {
	w.cancel()
	w.wg.Wait()
}

var errNoSlot = errors.New("no slot")

// once takes a slot, waits for a job while nothing local wants the slot,
// and hands the job with the slot to a goroutine of its own.
func (w *JobWorker) once(next func(context.Context) (*Job, error)) error {
	release, wanted, err := w.o.Slot(w.ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoSlot, err)
	}
	pctx, cancel := context.WithCancel(w.ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-wanted:
			cancel()
		case <-stop:
		}
	}()
	j, err := next(pctx)
	close(stop)
	cancel()
	if err != nil {
		release()
		if pctx.Err() != nil {
			return nil // the slot was wanted, or the worker stops
		}
		return err
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer release()
		w.run(j)
	}()
	return nil
}

func (w *JobWorker) run(j *Job) {
	log := w.log.With("job", j.ID, "attempt", j.Attempt)
	ctx := w.ctx
	if j.Attempt > w.o.MaxAttempts {
		log.Error("fleet job given up: delivered more often than the bound (it failed every box it landed on, or none could run it)", "max_attempts", w.o.MaxAttempts)
		if err := w.q.finishJob(ctx, j, JobResult{Attempt: j.Attempt, Box: j.box, GaveUp: true}); err != nil && !errors.Is(err, ErrResultTaken) {
			log.Warn("fleet job: recording its end failed (NATS JetStream)", "err", err)
		}
		return
	}
	// A delivery after a result was written (its box died before the ack):
	// only the done frame and the ack are left to do.
	if res, err := w.q.JobResultOf(ctx, j.Kind, j.ID); err == nil {
		log.Info("fleet job already has a result; acknowledging it", "result_box", res.Box)
		if err := w.q.finishJob(ctx, j, res); err != nil && !errors.Is(err, ErrResultTaken) {
			log.Warn("fleet job: acknowledging failed (NATS JetStream)", "err", err)
		}
		return
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(w.o.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = j.Progress()
			case <-done:
				return
			}
		}
	}()
	// The job's own context: what the handler watches for the job (its
	// cancellation's watch) ends with it.
	jctx, cancel := context.WithCancel(ctx)
	w.o.Handle(jctx, j)
	cancel()
	close(done)
	if !j.settled.Load() {
		if err := j.Retry(0); err != nil {
			log.Warn("fleet job: handing it back failed (NATS JetStream); it moves after the ack wait", "err", err)
		}
	}
}
