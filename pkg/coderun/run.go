package coderun

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// Generic Status.Error texts this package sets.
const (
	ErrorDenied          = "network was denied"
	ErrorApprovalTimeout = "approval timed out"
	ErrorCancelled       = "cancelled"
	ErrorInternal        = "internal error"
)

// eventCost is what one event counts against MaxHistoryBytes besides its
// Data: what it holds in memory (an Event is 112 bytes, and the history's
// array grows by doubling), so that the bound is on real memory, also for a
// flood of tiny output events.
const eventCost = 256

// Finish is how the host ends a run (Run.Finish).
type Finish struct {
	Result      string // Result* constant; anything else is recorded as ResultError
	ExitCode    *int   // the main command's (or failed setup's) exit code, if it ran
	FailedSetup int    // 1-based index of the setup command that failed
	// Duration of the run's commands; 0: from StartedAt to now (0 if never started).
	Duration  time.Duration
	Artifacts []runs.Artifact // as CheckArtifacts returned them
	Error     string          // generic reason; empty for cancelled becomes "cancelled"
	// Cut says which streams the supervisor cut at the output bound and
	// how many bytes it dropped of each (its result).
	Cut Cut
}

// Cut is what the supervisor dropped of each output stream past the bound.
type Cut struct {
	Stdout, Stderr               bool
	StdoutDropped, StderrDropped int64
}

// Run is one run's record and state machine:
//
//	awaiting_approval --Approve--> queued --Start--> running --Finish--> finished
//	awaiting_approval --Deny / approval timeout--> finished (denied)
//	awaiting_approval, queued --Cancel--> finished (cancelled)
//	running --Cancel--> CancelRequested closed; the host removes the container, then Finish
//	any unfinished --Finish--> finished (first Finish wins)
//
// Every state change is an EventState in the run's event history; Finish
// appends the EventResult, the last event. All methods are safe for
// concurrent use.
type Run struct {
	id     string
	params runs.Params
	owner  int
	lim    RegistryLimits
	now    func() time.Time
	order  uint64

	done      chan struct{} // closed when finished
	ended     chan struct{} // closed by End: its sandbox is gone, its slot free
	endOnce   sync.Once
	sandboxed atomic.Bool   // from before its sandbox is made until End
	cancelReq chan struct{} // closed by the first Cancel

	mu sync.Mutex
	// st is the run's record; its artifacts keep their Data (Finish).
	// Stdout and Stderr live in out, raw, and are made text when shown.
	st        runs.Status
	out       [2][]byte // stdout, stderr, bounded by MaxOutputBytes each (their capacity too)
	size      int64     // once finished: the bytes it holds (RegistryLimits.MaxRetainedBytes)
	released  bool      // pruned: its output, events and artifact data are gone
	readers   int       // answers being written from it: it is not pruned meanwhile
	cancelled bool      // Cancel was called (cancelReq closed)
	timer     *time.Timer
	changed   chan struct{} // closed and replaced at every event: wakes waiters
	seq       int64
	hist      []runs.Event // ordered by Seq; holes where output events were dropped
	histBytes int
}

// setCredentialVariables records the variables of the run's credentials
// (configuration's egress.credentials[].env), for its status and approval.
func (r *Run) setCredentialVariables(m map[string]string) {
	if len(m) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.CredentialVariables = maps.Clone(m)
}

func newRun(id string, p runs.Params, owner int, lim RegistryLimits, now func() time.Time, order uint64) *Run {
	r := &Run{
		id: id, params: p, owner: owner, lim: lim, now: now, order: order,
		done:      make(chan struct{}),
		ended:     make(chan struct{}),
		cancelReq: make(chan struct{}),
		changed:   make(chan struct{}),
	}
	created := now()
	r.st = runs.Status{
		ID:          id,
		Mode:        p.Mode(),
		Project:     p.Project,
		Network:     p.Network,
		Credentials: slices.Clone(p.Credentials),
		OwnerUID:    owner,
		CreatedAt:   created,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Network {
		deadline := created.Add(lim.ApprovalTimeout)
		r.st.ApprovalDeadline = &deadline
		r.timer = time.AfterFunc(lim.ApprovalTimeout, r.expireApproval)
		r.setStateLocked(runs.StateAwaitingApproval)
	} else {
		r.setStateLocked(runs.StateQueued)
	}
	return r
}

// ID is the run's id: 32 lowercase hex digits.
func (r *Run) ID() string { return r.id }

// Owner is the uid that created the run.
func (r *Run) Owner() int { return r.owner }

// Params returns a copy of the run's (validated) parameters.
func (r *Run) Params() runs.Params { return r.params.Clone() }

// Done is closed when the run is finished.
func (r *Run) Done() <-chan struct{} { return r.done }

// Ended is closed once the host is done with the run: its container and
// files removed (or the log says what was left) and its slot given back.
// A run's result may come before (docs/code-runs.md: the result leaves
// before the cleanup).
func (r *Run) Ended() <-chan struct{} { return r.ended }

// End closes Ended (idempotent): the run's sandbox, if any, is gone.
func (r *Run) End() {
	r.endOnce.Do(func() {
		r.sandboxed.Store(false)
		close(r.ended)
	})
}

// Sandboxed marks the run as having (or about to have) a sandbox until
// End: listed for the reaper even once its result is recorded.
func (r *Run) Sandboxed() { r.sandboxed.Store(true) }

// CancelRequested is closed by the first Cancel. For a running run the host
// must then stop and remove its container and call Finish (ResultCancelled);
// a run cancelled before it started is already finished (Done is closed too).
func (r *Run) CancelRequested() <-chan struct{} { return r.cancelReq }

// Status returns a deep copy of the run as the API shows it. It copies
// every byte the run holds: to answer a client, WriteStatusJSON streams the
// same document without the copy.
func (r *Run) Status() runs.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := cloneStatus(r.st, true)
	s.Stdout = strings.ToValidUTF8(string(r.out[0]), "\uFFFD")
	s.Stderr = strings.ToValidUTF8(string(r.out[1]), "\uFFFD")
	return s
}

// Summary is Status without Stdout, Stderr and artifact Data (artifact
// paths, sizes and errors stay): what List shows, cheap at any size.
func (r *Run) Summary() runs.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cloneStatus(r.st, false) // r.st never holds Stdout or Stderr
}

func (r *Run) summary() runs.Status { return r.Summary() }

// release forgets what a pruned run holds, so that nothing still holding
// the *Run keeps its bytes alive; a reader ends with ErrNotFound. Unless
// forced it does nothing (false) while an answer is being written from the
// run.
func (r *Run) release(force bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.readers > 0 && !force { // became read since the registry looked
		return false
	}
	r.released = true
	r.out = [2][]byte{}
	r.hist = nil
	r.histBytes = 0
	for i := range r.st.Artifacts {
		r.st.Artifacts[i].Data = nil
	}
	close(r.changed) // wake subscribers: they see released
	r.changed = make(chan struct{})
	return true
}

// cloneStatus deep-copies s; withData false leaves artifact Data out.
func cloneStatus(s runs.Status, withData bool) runs.Status {
	s.StartedAt = clonePtr(s.StartedAt)
	s.FinishedAt = clonePtr(s.FinishedAt)
	s.ApprovalDeadline = clonePtr(s.ApprovalDeadline)
	s.ApprovedBy = clonePtr(s.ApprovedBy)
	s.ExitCode = clonePtr(s.ExitCode)
	s.Credentials = slices.Clone(s.Credentials)
	s.CredentialVariables = maps.Clone(s.CredentialVariables)
	if s.Artifacts != nil {
		s.Artifacts = slices.Clone(s.Artifacts)
		for i := range s.Artifacts {
			if withData {
				s.Artifacts[i].Data = bytes.Clone(s.Artifacts[i].Data)
			} else {
				s.Artifacts[i].Data = nil
			}
		}
	}
	return s
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func (r *Run) finished() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st.State == runs.StateFinished
}

// finishedAt reports when the run finished, the bytes it holds and
// whether an answer is being written from it.
func (r *Run) finishedAt() (at time.Time, size int64, reading, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.FinishedAt == nil {
		return time.Time{}, 0, false, false
	}
	return *r.st.FinishedAt, r.size, r.readers > 0, true
}

// read marks an answer being written from the run, so that it is not
// pruned until done is called; ErrNotFound once pruned.
func (r *Run) read() (done func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil, fmt.Errorf("%w (pruned)", runs.ErrNotFound)
	}
	r.readers++
	return sync.OnceFunc(func() {
		r.mu.Lock()
		r.readers--
		r.mu.Unlock()
	}), nil
}

// Approve grants network to a run awaiting approval (-> queued), recording
// uid as ApprovedBy. It returns ErrState in any other state, and once the
// approval deadline has passed (the run is then denied, "approval timed out").
func (r *Run) Approve(uid int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State != runs.StateAwaitingApproval {
		return r.stateErrLocked("approve")
	}
	if d := r.st.ApprovalDeadline; d != nil && !r.now().Before(*d) {
		r.finishLocked(Finish{Result: runs.ResultDenied, Error: ErrorApprovalTimeout})
		return fmt.Errorf("cannot approve: %s: %w", ErrorApprovalTimeout, runs.ErrState)
	}
	r.stopTimerLocked()
	r.st.ApprovedBy = &uid
	r.st.ApprovalDeadline = nil
	r.setStateLocked(runs.StateQueued)
	return nil
}

// Deny refuses network to a run awaiting approval: it finishes denied
// ("network was denied"). ErrState in any other state.
func (r *Run) Deny(uid int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State != runs.StateAwaitingApproval {
		return r.stateErrLocked("deny")
	}
	r.finishLocked(Finish{Result: runs.ResultDenied, Error: ErrorDenied})
	return nil
}

// Cancel cancels an unfinished run. A run awaiting approval or queued
// finishes at once (cancelled); a running run stays running with
// CancelRequested closed until the host, having removed its container,
// calls Finish. Cancelling a running run again is not an error. ErrState
// for a finished run.
func (r *Run) Cancel() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.st.State {
	case runs.StateFinished:
		return r.stateErrLocked("cancel")
	case runs.StateRunning:
		r.requestCancelLocked()
		return nil
	}
	r.requestCancelLocked()
	r.finishLocked(Finish{Result: runs.ResultCancelled, Error: ErrorCancelled})
	return nil
}

func (r *Run) requestCancelLocked() {
	if !r.cancelled {
		r.cancelled = true
		close(r.cancelReq)
	}
}

// WaitApproval blocks while the run awaits approval. It returns nil once the
// run may proceed (approved, or a run without network), ErrDenied when a
// human denied it or the approval timed out, ErrCancelled when it was
// cancelled, ErrState when it finished otherwise, and ctx.Err() when ctx
// ends first (the run keeps waiting for its approval timeout).
func (r *Run) WaitApproval(ctx context.Context) error {
	for {
		r.mu.Lock()
		state, result, msg, ch := r.st.State, r.st.Result, r.st.Error, r.changed
		r.mu.Unlock()
		switch state {
		case runs.StateQueued, runs.StateRunning:
			return nil
		case runs.StateFinished:
			switch {
			case result == runs.ResultDenied && msg == ErrorApprovalTimeout:
				return fmt.Errorf("%s: %w", ErrorApprovalTimeout, runs.ErrDenied)
			case result == runs.ResultDenied:
				return runs.ErrDenied
			case result == runs.ResultCancelled:
				return runs.ErrCancelled
			}
			return fmt.Errorf("run finished (%s) while awaiting approval: %w", result, runs.ErrState)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *Run) expireApproval() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State == runs.StateAwaitingApproval {
		r.finishLocked(Finish{Result: runs.ResultDenied, Error: ErrorApprovalTimeout})
	}
}

// Start moves a queued run to running (StartedAt is now): the host calls it
// once it holds a concurrency slot, before it creates the container. It
// returns ErrState in any other state (also ErrCancelled if the run was
// cancelled meanwhile): the host must then not create a container.
func (r *Run) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State != runs.StateQueued {
		if r.st.Result == runs.ResultCancelled {
			return fmt.Errorf("cannot start: %w (%w)", runs.ErrCancelled, runs.ErrState)
		}
		return r.stateErrLocked("start")
	}
	t := r.now()
	r.st.StartedAt = &t
	r.setStateLocked(runs.StateRunning)
	return nil
}

// ServedByStandby records that a run standby serves the run.
func (r *Run) ServedByStandby() {
	r.mu.Lock()
	r.st.Standby = true
	r.mu.Unlock()
}

// Output records data the run wrote on stream (StreamStdout or
// StreamStderr) in phase (PhaseSetup or PhaseMain): an output event, and
// Status.Stdout or Status.Stderr up to MaxOutputBytes (beyond it the
// Truncated flag is set). Output of a run that is not running, of an unknown
// stream, and empty data are ignored. data is copied.
func (r *Run) Output(stream, phase string, data []byte) {
	var i int
	switch stream {
	case runs.StreamStdout:
		i = 0
	case runs.StreamStderr:
		i = 1
	default:
		return
	}
	if len(data) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.State != runs.StateRunning {
		return
	}
	if room := r.lim.MaxOutputBytes - len(r.out[i]); room < len(data) {
		r.out[i] = appendCapped(r.out[i], data[:max(room, 0)], r.lim.MaxOutputBytes)
		if i == 0 {
			r.st.StdoutTruncated = true
		} else {
			r.st.StderrTruncated = true
		}
	} else {
		r.out[i] = appendCapped(r.out[i], data, r.lim.MaxOutputBytes)
	}
	r.appendLocked(runs.Event{Type: runs.EventOutput, Stream: stream, Phase: phase, Data: bytes.Clone(data)})
}

// appendCapped appends data (len(b)+len(data) <= limit) doubling the
// capacity as append does, but never past limit: what the run holds is what
// MaxRetainedBytes counts.
func appendCapped(b, data []byte, limit int) []byte {
	if need := len(b) + len(data); need > cap(b) {
		nb := make([]byte, len(b), min(max(2*cap(b), need), max(limit, need)))
		copy(nb, b)
		b = nb
	}
	return append(b, data...)
}

// Finish ends an unfinished run; the first Finish wins, later ones (and a
// Finish of a run already denied or cancelled) are ignored. It records the
// result, appends the finished state event and the result event (its
// Status is the run's Summary: WriteEventJSON writes the whole run in its
// place), and closes Done. The run keeps f.Artifacts' Data (not a copy):
// the caller must not modify it afterwards.
func (r *Run) Finish(f Finish) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finishLocked(f)
}

func (r *Run) finishLocked(f Finish) {
	if r.st.State == runs.StateFinished {
		return
	}
	r.stopTimerLocked()
	switch f.Result {
	case runs.ResultOK, runs.ResultFailed, runs.ResultTimeout, runs.ResultCancelled, runs.ResultDenied, runs.ResultError:
	default:
		f.Result = runs.ResultError
		if f.Error == "" {
			f.Error = ErrorInternal
		}
	}
	if f.Result == runs.ResultCancelled && f.Error == "" {
		f.Error = ErrorCancelled
	}
	t := r.now()
	r.st.Result = f.Result
	r.st.ExitCode = clonePtr(f.ExitCode)
	r.st.FailedSetup = f.FailedSetup
	switch {
	case f.Duration > 0:
		r.st.DurationMs = f.Duration.Milliseconds()
	case r.st.StartedAt != nil:
		r.st.DurationMs = max(t.Sub(*r.st.StartedAt).Milliseconds(), 0)
	}
	r.st.Artifacts = slices.Clone(f.Artifacts)
	r.st.Error = f.Error
	r.st.StdoutTruncated = r.st.StdoutTruncated || f.Cut.Stdout
	r.st.StderrTruncated = r.st.StderrTruncated || f.Cut.Stderr
	r.st.StdoutDroppedBytes, r.st.StderrDroppedBytes = max(f.Cut.StdoutDropped, 0), max(f.Cut.StderrDropped, 0)
	r.st.FinishedAt = &t
	r.st.ApprovalDeadline = nil
	r.setStateLocked(runs.StateFinished)
	// Nothing changes a finished run: the result event shares no byte of
	// it, and every reader copies or streams from r.
	sum := cloneStatus(r.st, false)
	r.appendLocked(runs.Event{Type: runs.EventResult, Status: &sum})
	r.size = int64(r.histBytes + cap(r.out[0]) + cap(r.out[1]))
	for _, a := range r.st.Artifacts {
		r.size += int64(cap(a.Data))
	}
	close(r.done)
}

func (r *Run) stopTimerLocked() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
}

func (r *Run) stateErrLocked(op string) error {
	s := r.st.State
	if s == runs.StateFinished {
		s += " (" + r.st.Result + ")"
	}
	return fmt.Errorf("cannot %s a run that is %s: %w", op, s, runs.ErrState)
}

func (r *Run) setStateLocked(s string) {
	r.st.State = s
	r.appendLocked(runs.Event{Type: runs.EventState, State: s})
}

// appendLocked numbers ev, appends it to the history, drops the oldest
// output events while the history is over MaxHistoryBytes, and wakes every
// waiter.
func (r *Run) appendLocked(ev runs.Event) {
	r.seq++
	ev.Seq = r.seq
	r.hist = append(r.hist, ev)
	r.histBytes += eventCost + len(ev.Data)
	for r.histBytes > r.lim.MaxHistoryBytes {
		// State events precede output events except for the last few, so
		// the first output event is near the front: k is small.
		k := slices.IndexFunc(r.hist, func(e runs.Event) bool { return e.Type == runs.EventOutput })
		if k < 0 {
			break
		}
		r.histBytes -= eventCost + len(r.hist[k].Data)
		copy(r.hist[1:k+1], r.hist[:k])
		r.hist[0] = runs.Event{} // release the dropped Data
		r.hist = r.hist[1:]
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// Subscribe calls fn with the run's history and then its live events, in
// Seq order, until fn has received the result event (then it returns nil),
// fn returns an error (returned), or ctx ends (ctx.Err()). fn runs on the
// caller's goroutine without any lock held; it must not modify the event's
// Data or Status, which are shared.
//
// A slow subscriber never blocks the run: there is no per-subscriber
// buffer, each subscriber reads the run's bounded history at its own pace.
// Output events dropped from the history before a subscriber read them are
// skipped, and the next event it receives says how many in Dropped. State
// and result events are never dropped.
func (r *Run) Subscribe(ctx context.Context, fn func(runs.Event) error) error {
	done, err := r.read() // a follower gets the result it waits for
	if err != nil {
		return err
	}
	defer done()
	var last int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.mu.Lock()
		if r.released {
			r.mu.Unlock()
			return fmt.Errorf("%w (pruned while being read)", runs.ErrNotFound)
		}
		i := sort.Search(len(r.hist), func(i int) bool { return r.hist[i].Seq > last })
		if i == len(r.hist) {
			ch := r.changed
			r.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		ev := r.hist[i]
		r.mu.Unlock()
		ev.Dropped = ev.Seq - last - 1
		last = ev.Seq
		if err := fn(ev); err != nil {
			return err
		}
		if ev.Type == runs.EventResult {
			return nil
		}
	}
}
