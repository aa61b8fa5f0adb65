package delegation

import (
	"context"
	"sort"
	"sync"
	"time"
)

// States of a job.
const (
	StateQueued    = "queued"  // admitted, waiting for a concurrency slot
	StateRunning   = "running" // its research turn runs
	StateDone      = "done"    // Report holds the report
	StateFailed    = "failed"  // Error holds the diagnostic
	StateCancelled = "cancelled"
)

// Results of a finished job (label "result" of sandbox_delegations_total).
const (
	ResultOK        = "ok"
	ResultFailed    = "failed"
	ResultTimeout   = "timeout"
	ResultCancelled = "cancelled"
)

// Status is a job as the API shows it. Report and Error are set once the
// job finished; the task is never echoed.
type Status struct {
	ID      string `json:"id"`
	Channel string `json:"channel"`
	Title   string `json:"title"`
	State   string `json:"state"`
	// Result is set once finished: ok, failed, timeout or cancelled.
	Result string `json:"result,omitempty"`
	// Author is the bound author (id and name; never the principal).
	Author          *Author    `json:"author,omitempty"`
	Report          string     `json:"report,omitempty"`
	ReportTruncated bool       `json:"reportTruncated,omitempty"`
	Error           string     `json:"error,omitempty"`
	CreatedAt       *time.Time `json:"createdAt,omitempty"`
	StartedAt       *time.Time `json:"startedAt,omitempty"`
	FinishedAt      *time.Time `json:"finishedAt,omitempty"`
	DeadlineUnixMs  int64      `json:"deadlineUnixMs,omitempty"`
}

// Finished reports whether the status is final.
func (s Status) Finished() bool {
	return s.State == StateDone || s.State == StateFailed || s.State == StateCancelled
}

// Finish is how a job ended. Report counts for ResultOK only; Reason is the
// generic reason of the others (ResultTimeout always reads TextTimeout).
type Finish struct {
	Result string
	Report string
	Reason string
}

// Retention bounds the finished jobs a registry keeps readable: for at most
// Retain, at most MaxRetained of them and MaxRetainedBytes of reports,
// oldest first; the newest finished job is never dropped by the count or
// byte bounds.
type Retention struct {
	Retain           time.Duration
	MaxRetained      int
	MaxRetainedBytes int
}

// DefaultRetention keeps finished jobs a day, 256 of them, 64 MiB of reports.
func DefaultRetention() Retention {
	return Retention{Retain: 24 * time.Hour, MaxRetained: 256, MaxRetainedBytes: 64 << 20}
}

// Job is one delegated task.
type Job struct {
	reg                      *Registry
	id, channel, title, task string
	author                   Author
	owner                    int
	created, deadline        time.Time

	// under reg.mu
	state             string
	result            string
	started, finished time.Time
	report            string
	cut               bool
	diag              string
	collected         map[int]bool // viewer uids it was delivered to
	cancel            func(error)
	cancelCause       error
}

func (j *Job) ID() string          { return j.id }
func (j *Job) Channel() string     { return j.channel }
func (j *Job) Title() string       { return j.title }
func (j *Job) Task() string        { return j.task }
func (j *Job) Author() Author      { return j.author }
func (j *Job) Owner() int          { return j.owner }
func (j *Job) Deadline() time.Time { return j.deadline }

// Visible says whether viewer may see the job (its owner, or all).
func (j *Job) Visible(viewer int, all bool) bool { return all || j.owner == viewer }

// Status is a copy of the job's state.
func (j *Job) Status() Status {
	j.reg.mu.Lock()
	defer j.reg.mu.Unlock()
	return j.statusLocked()
}

func (j *Job) statusLocked() Status {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	return Status{
		ID: j.id, Channel: j.channel, Title: j.title, State: j.state, Result: j.result,
		Author: &Author{ID: j.author.ID, Name: j.author.Name},
		Report: j.report, ReportTruncated: j.cut, Error: j.diag,
		CreatedAt: at(j.created), StartedAt: at(j.started), FinishedAt: at(j.finished),
		DeadlineUnixMs: j.deadline.UnixMilli(),
	}
}

// Start moves a queued job to running; a finished one refuses (ErrState).
func (j *Job) Start() error {
	r := j.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	if j.state != StateQueued {
		return ErrState
	}
	j.state, j.started = StateRunning, r.now()
	return nil
}

// SetCancel records how to cancel the unfinished job; a cancel requested
// before it was set is applied at once.
func (j *Job) SetCancel(f func(error)) {
	r := j.reg
	r.mu.Lock()
	if j.finishedLocked() {
		r.mu.Unlock()
		return
	}
	j.cancel = f
	cause := j.cancelCause
	r.mu.Unlock()
	if cause != nil {
		f(cause)
	}
}

func (j *Job) finishedLocked() bool {
	return j.state == StateDone || j.state == StateFailed || j.state == StateCancelled
}

// Finish records the end of the job once (later calls change nothing):
// the report cut to MaxReportChars, the reason scrubbed and cut to
// DiagnosticChars. Followers of its channel are woken.
func (j *Job) Finish(f Finish) {
	r := j.reg
	r.mu.Lock()
	defer r.mu.Unlock()
	if j.finishedLocked() {
		return
	}
	j.finished, j.cancel = r.now(), nil
	j.result = f.Result
	switch f.Result {
	case ResultOK:
		j.state = StateDone
		j.report, j.cut = BoundReport(f.Report, r.limits.MaxReportChars)
	case ResultCancelled:
		j.state = StateCancelled
		j.diag = Diagnostic(f.Reason, r.limits.DiagnosticChars)
	case ResultTimeout:
		j.state = StateFailed
		j.diag = Diagnostic(TextTimeout, r.limits.DiagnosticChars)
	default:
		j.state, j.result = StateFailed, ResultFailed
		j.diag = Diagnostic(f.Reason, r.limits.DiagnosticChars)
	}
	r.done = append(r.done, j)
	r.doneBytes += len(j.report) + len(j.diag)
	close(r.wake)
	r.wake = make(chan struct{})
	r.pruneLocked()
}

// Registry holds a host's jobs.
type Registry struct {
	mu        sync.Mutex
	limits    Limits
	ret       Retention
	now       func() time.Time
	jobs      map[string]*Job
	done      []*Job // finished and retained, in finish order
	doneBytes int
	wake      chan struct{} // closed and replaced at each finish
}

// NewRegistry makes an empty registry; now is the clock (time.Now if nil).
func NewRegistry(l Limits, ret Retention, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{limits: l, ret: ret, now: now, jobs: map[string]*Job{}, wake: make(chan struct{})}
}

// Limits are the registry's limits.
func (r *Registry) Limits() Limits { return r.limits }

// Admit checks req (Limits.Check) and the channel's bound and records a
// queued job with the given id, its deadline Timeout from now.
func (r *Registry) Admit(id, channel string, owner int, req Request) (*Job, error) {
	if err := r.limits.Check(req); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.unfinishedLocked(channel); n >= r.limits.MaxRunning {
		return nil, Busy(n)
	}
	if _, dup := r.jobs[id]; dup {
		return nil, ErrState
	}
	now := r.now()
	j := &Job{
		reg: r, id: id, channel: channel, title: req.Title, task: req.Task, author: req.Author, owner: owner,
		created: now, deadline: now.Add(r.limits.Timeout), state: StateQueued, collected: map[int]bool{},
	}
	r.jobs[id] = j
	return j, nil
}

func (r *Registry) unfinishedLocked(channel string) int {
	n := 0
	for _, j := range r.jobs {
		if j.channel == channel && !j.finishedLocked() {
			n++
		}
	}
	return n
}

// Running is the number of unfinished jobs of a channel.
func (r *Registry) Running(channel string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unfinishedLocked(channel)
}

// Get is the job with that id (ErrNotFound once it was pruned).
func (r *Registry) Get(id string) (*Job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked()
	j, ok := r.jobs[id]
	if !ok {
		return nil, ErrNotFound
	}
	return j, nil
}

// Unfinished lists the queued and running jobs, by id.
func (r *Registry) Unfinished() []*Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Job
	for _, j := range r.jobs {
		if !j.finishedLocked() {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].id < out[b].id })
	return out
}

// CancelChannel cancels every unfinished job of channel with cause and
// returns how many it asked.
func (r *Registry) CancelChannel(channel string, cause error) int {
	r.mu.Lock()
	var fns []func(error)
	for _, j := range r.jobs {
		if j.channel != channel || j.finishedLocked() {
			continue
		}
		if j.cancelCause == nil {
			j.cancelCause = cause
		}
		if j.cancel != nil {
			fns = append(fns, j.cancel)
		}
	}
	n := 0
	for _, j := range r.jobs {
		if j.channel == channel && !j.finishedLocked() {
			n++
		}
	}
	r.mu.Unlock()
	for _, f := range fns {
		f(cause)
	}
	return n
}

// Pending lists the finished jobs of channel that viewer may see (all: every
// job) and that were not yet delivered to viewer, in finish order.
func (r *Registry) Pending(channel string, viewer int, all bool) []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked()
	return r.pendingLocked(channel, viewer, all)
}

func (r *Registry) pendingLocked(channel string, viewer int, all bool) []Status {
	var out []Status
	for _, j := range r.done {
		if j.channel == channel && j.Visible(viewer, all) && !j.collected[viewer] {
			out = append(out, j.statusLocked())
		}
	}
	return out
}

// Wait returns Pending as soon as it is not empty, or ctx's error.
func (r *Registry) Wait(ctx context.Context, channel string, viewer int, all bool) ([]Status, error) {
	for {
		r.mu.Lock()
		r.pruneLocked()
		p := r.pendingLocked(channel, viewer, all)
		wake := r.wake
		r.mu.Unlock()
		if len(p) > 0 {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-wake:
		}
	}
}

// Collected records that job id was delivered to viewer.
func (r *Registry) Collected(id string, viewer int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[id]; ok {
		j.collected[viewer] = true
	}
}

// pruneLocked drops finished jobs past Retain, then the oldest while the
// count or byte bound is passed (never the newest).
func (r *Registry) pruneLocked() {
	cutoff := r.now().Add(-r.ret.Retain)
	drop := 0
	bytes := r.doneBytes
	for drop < len(r.done) {
		j := r.done[drop]
		left := len(r.done) - drop
		old := r.ret.Retain > 0 && j.finished.Before(cutoff)
		over := left > 1 && ((r.ret.MaxRetained > 0 && left > r.ret.MaxRetained) || (r.ret.MaxRetainedBytes > 0 && bytes > r.ret.MaxRetainedBytes))
		if !old && !over {
			break
		}
		bytes -= len(j.report) + len(j.diag)
		delete(r.jobs, j.id)
		drop++
	}
	if drop > 0 {
		r.done = append([]*Job(nil), r.done[drop:]...)
		r.doneBytes = bytes
	}
}

// Event is one line of a channel's finished-jobs stream (NDJSON): a
// finished job with its report or diagnostic, or a keepalive sent when
// nothing finished for a while, so a client can bound its silence.
type Event struct {
	Type string  `json:"type"`
	Job  *Status `json:"job,omitempty"`
}

// Event types.
const (
	EventJob       = "job"
	EventKeepalive = "keepalive"
)
