package fleetjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// Approval states in fleet.JobControlBucket.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
)

// ErrNotPending: the approval was already decided (on this box or
// another), or was never asked for.
var ErrNotPending = errors.New("no approval pending")

// Approval is a job's approval record, key approval.<kind>.<id> in
// fleet.JobControlBucket: asked by the admitting box, decided once (a
// compare-and-swap on the pending record) by an operator on any box.
type Approval struct {
	State string `json:"state"`
	// By is the uid that decided, on box Box.
	By  int    `json:"by,omitempty"`
	Box string `json:"box,omitempty"`
	// What is the admitting box's view of the job for the approver (the
	// kind's JSON, e.g. a run's status).
	What json.RawMessage `json:"what,omitempty"`
}

func approvalKey(kind, id string) string { return "approval." + jobKey(kind, id) }

// ErrAdmitterAway: the box that admitted the job is not there to apply a
// decision (dead, cut off, its host restarting), so none is recorded: a
// decision nobody applies would answer 200 and leave the run waiting.
var ErrAdmitterAway = errors.New("the box that admitted the run is not reachable to apply the decision; try again once it is back")

// approvalWaitSubject is where the admitting box answers, for as long as
// it waits for the job's decision (from AskApproval to ForgetApproval, on
// its own connection: gone with it). Not a stream's subject: nothing
// stores it.
func approvalWaitSubject(kind, id string) string { return "sandbox.approvals." + jobKey(kind, id) }

// admitterTimeout bounds Decide's question to the admitting box.
const admitterTimeout = 2 * time.Second

// AskApproval records the job as awaiting an approval, with what the
// approver is shown.
func (q *Queue) AskApproval(ctx context.Context, kind, id string, what []byte) error {
	if err := checkJob(kind, id); err != nil {
		return err
	}
	b, err := json.Marshal(Approval{State: ApprovalPending, What: what})
	if err != nil {
		return err
	}
	if len(b) > fleet.MaxJobControlBytes {
		return fmt.Errorf("approval record is %d bytes, the limit is %d: %w", len(b), fleet.MaxJobControlBytes, fleet.ErrInvalid)
	}
	// The responder first: once the record is there, a decider finds this
	// box waiting.
	sub, err := q.js.Conn().Subscribe(approvalWaitSubject(kind, id), func(m *nats.Msg) { _ = m.Respond([]byte("waiting")) })
	if err != nil {
		return fmt.Errorf("approval responder: %w", err)
	}
	if _, err := q.control.Create(ctx, approvalKey(kind, id), b); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("approval into %s: %w", fleet.JobControlBucket, err)
	}
	q.mu.Lock()
	if q.waiting == nil {
		q.waiting = map[string]*nats.Subscription{}
	}
	if old := q.waiting[jobKey(kind, id)]; old != nil {
		_ = old.Unsubscribe()
	}
	q.waiting[jobKey(kind, id)] = sub
	q.mu.Unlock()
	return nil
}

// admitterThere asks the admitting box whether it still waits for the
// job's decision.
func (q *Queue) admitterThere(ctx context.Context, kind, id string) error {
	ctx, cancel := context.WithTimeout(ctx, admitterTimeout)
	defer cancel()
	if _, err := q.js.Conn().RequestWithContext(ctx, approvalWaitSubject(kind, id), nil); err != nil {
		return fmt.Errorf("%w (%v)", ErrAdmitterAway, err)
	}
	return nil
}

// PendingApproval returns the job's approval record and its revision;
// jetstream.ErrKeyNotFound when none was asked for (or it expired).
func (q *Queue) PendingApproval(ctx context.Context, kind, id string) (Approval, uint64, error) {
	if err := checkJob(kind, id); err != nil {
		return Approval{}, 0, err
	}
	e, err := q.control.Get(ctx, approvalKey(kind, id))
	if err != nil {
		return Approval{}, 0, err
	}
	a, err := decodeApproval(e.Value())
	return a, e.Revision(), err
}

func decodeApproval(b []byte) (Approval, error) {
	var a Approval
	if len(b) > fleet.MaxJobControlBytes || json.Unmarshal(b, &a) != nil || (a.Box != "" && !fleet.ValidBox(a.Box)) || (a.Box == "" && a.State != ApprovalPending) {
		return Approval{}, fmt.Errorf("approval record: %w", fleet.ErrInvalid)
	}
	switch a.State {
	case ApprovalPending, ApprovalApproved, ApprovalDenied:
	default:
		return Approval{}, fmt.Errorf("approval state %q: %w", a.State, fleet.ErrInvalid)
	}
	return a, nil
}

// Decide approves or denies a pending job as uid on box: exactly one
// decision lands (compare-and-swap on the pending record); any later one,
// from any box, is ErrNotPending. While the admitting box does not answer
// that it waits (approvalWaitSubject), none is recorded: ErrAdmitterAway. It returns the decided record.
func (q *Queue) Decide(ctx context.Context, kind, id string, approve bool, uid int, box string) (Approval, error) {
	a, rev, err := q.PendingApproval(ctx, kind, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Approval{}, ErrNotPending
	}
	if err != nil {
		return Approval{}, err
	}
	if a.State != ApprovalPending {
		return Approval{}, ErrNotPending
	}
	if err := q.admitterThere(ctx, kind, id); err != nil {
		return Approval{}, err
	}
	a.State, a.By, a.Box = ApprovalDenied, uid, box
	if approve {
		a.State = ApprovalApproved
	}
	b, err := json.Marshal(a)
	if err != nil {
		return Approval{}, err
	}
	if _, err := q.control.Update(ctx, approvalKey(kind, id), b, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Approval{}, ErrNotPending // decided meanwhile
		}
		return Approval{}, fmt.Errorf("approval into %s: %w", fleet.JobControlBucket, err)
	}
	return a, nil
}

// AwaitDecision waits until the job's approval is decided (on any box)
// and returns the decision; ctx ends the wait (context.Cause).
func (q *Queue) AwaitDecision(ctx context.Context, kind, id string) (Approval, error) {
	if err := checkJob(kind, id); err != nil {
		return Approval{}, err
	}
	w, err := q.control.Watch(ctx, approvalKey(kind, id))
	if err != nil {
		return Approval{}, fmt.Errorf("watch approval: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return Approval{}, fmt.Errorf("approval watch closed: %w", ErrNotPending)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			a, err := decodeApproval(e.Value())
			if err != nil {
				return Approval{}, err
			}
			if a.State != ApprovalPending {
				return a, nil
			}
		case <-ctx.Done():
			return Approval{}, context.Cause(ctx)
		}
	}
}

// ForgetApproval drops the job's approval record (the run moved on).
func (q *Queue) ForgetApproval(ctx context.Context, kind, id string) error {
	if err := checkJob(kind, id); err != nil {
		return err
	}
	q.mu.Lock()
	if sub := q.waiting[jobKey(kind, id)]; sub != nil {
		_ = sub.Unsubscribe()
		delete(q.waiting, jobKey(kind, id))
	}
	q.mu.Unlock()
	if err := q.control.Delete(ctx, approvalKey(kind, id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("forget approval: %w", err)
	}
	return nil
}
