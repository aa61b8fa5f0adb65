package fleetjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// Job kinds on the jobs work queue (fleet.JobsStream): any box takes a job, once
// at a time; each kind has its own durable consumer, so a box pulls only
// the kinds it runs.
const (
	JobRun        = "run"
	JobPrecheck   = "precheck"
	JobDelegation = "delegation"
)

func validJobKind(kind string) bool {
	return kind == JobRun || kind == JobPrecheck || kind == JobDelegation
}

var jobIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func checkJob(kind, id string) error {
	if !validJobKind(kind) {
		return fmt.Errorf("job kind %q: %w", kind, fleet.ErrInvalid)
	}
	if !jobIDRe.MatchString(id) {
		return fmt.Errorf("job id must match %s: %w", jobIDRe, fleet.ErrInvalid)
	}
	return nil
}

// jobKey is a job's key in fleet.JobResultsBucket, and the suffix of its keys in
// fleet.JobControlBucket and of its events subject.
func jobKey(kind, id string) string { return kind + "." + id }

func jobEventsSubject(kind, id string) string { return fleet.JobEventsSubjectPrefix + kind + "." + id }
func jobCancelKey(kind, id string) string     { return "cancel." + jobKey(kind, id) }

// SubmitJob publishes a job of kind (Job*) with id (de-duplicated like
// turns) and its payload (the kind's own JSON, at most fleet.MaxJobBytes).
func (q *Queue) SubmitJob(ctx context.Context, kind, id string, payload []byte) (fleet.Submitted, error) {
	if err := checkJob(kind, id); err != nil {
		return fleet.Submitted{}, err
	}
	if len(payload) > fleet.MaxJobBytes {
		return fleet.Submitted{}, fmt.Errorf("job is %d bytes, the limit is %d: %w", len(payload), fleet.MaxJobBytes, fleet.ErrInvalid)
	}
	ack, err := q.js.PublishMsg(ctx, &nats.Msg{Subject: fleet.JobsSubjectPrefix + kind, Data: payload}, jetstream.WithMsgID(kind+"-"+id), jetstream.WithExpectStream(fleet.JobsStream))
	if err != nil {
		return fleet.Submitted{}, fmt.Errorf("publish job to %s: %w", fleet.JobsStream, err)
	}
	return fleet.Submitted{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// Job is one taken job. The box that took it publishes its events
// (Publish), then its result (Finish: create-only, so a job delivered
// twice has one result), or hands it back (Retry).
type Job struct {
	Kind    string
	ID      string
	Payload []byte
	// Attempt counts deliveries of this job (1 on the first).
	Attempt uint64
	box     string
	q       *Queue
	msg     jetstream.Msg
	settled atomic.Bool // Finish acknowledged it or Retry handed it back
	// claimRev is the revision of this delivery's claim in the results
	// bucket (claimJob; 0: none, the job already had a result): its result
	// lands only at that revision, so an attempt another delivery took
	// over since (a paused box's) cannot write it.
	claimRev uint64
}

// JobFrame is one message of a job's event stream: an event of the kind
// (Data, the kind's JSON), or the end (Done: the result is in
// fleet.JobResultsBucket). Attempt and Box say which delivery published it, so
// the admitting box can tell a dead attempt's frames from its successor's.
type JobFrame struct {
	Attempt uint64          `json:"attempt"`
	Box     string          `json:"box"`
	Done    bool            `json:"done,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// JobResult is a job's one result, under its key in fleet.JobResultsBucket.
type JobResult struct {
	Attempt uint64 `json:"attempt"`
	Box     string `json:"box"`
	// GaveUp: the job was delivered more than the bound (it killed every
	// box it landed on, or none could run it); Data is then empty.
	GaveUp bool            `json:"gaveUp,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
	// Claim marks no result but the claim of the delivery under way
	// (claimJob): the job's result is written over it, at its revision.
	Claim bool `json:"claim,omitempty"`
}

// claimJob records this delivery as the job's current attempt in the
// results bucket, by compare-and-swap over any earlier attempt's claim, so
// that an earlier attempt still running (its box paused past the ack wait)
// can no longer write the result (docs/fleet.md: one attempt's output with
// that attempt's result). A result already there is left alone (claimRev
// stays 0: the worker finishes from it).
func (q *Queue) claimJob(ctx context.Context, j *Job) error {
	key := jobKey(j.Kind, j.ID)
	b, err := json.Marshal(JobResult{Attempt: j.Attempt, Box: j.box, Claim: true})
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		var rev uint64
		e, err := q.results.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rev, err = q.results.Create(ctx, key, b)
		case err != nil:
		default:
			if r, derr := decodeJobResult(e.Value()); derr == nil && !r.Claim {
				return nil // finished already
			}
			rev, err = q.results.Update(ctx, key, b, e.Revision())
		}
		if err == nil {
			j.claimRev = rev
			return nil
		}
		if !casRefused(err) || try == 2 {
			return fmt.Errorf("job claim into %s: %w", fleet.JobResultsBucket, err)
		}
	}
}

func casRefused(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// Publish sends one event frame for the admitting box, in order after the
// job's earlier frames (each publish waits for the stream's ack).
func (j *Job) Publish(ctx context.Context, data []byte) error {
	return j.q.publishFrame(ctx, j.Kind, j.ID, JobFrame{Attempt: j.Attempt, Box: j.box, Data: data})
}

func (q *Queue) publishFrame(ctx context.Context, kind, id string, fr JobFrame) error {
	b, err := json.Marshal(fr)
	if err != nil {
		return err
	}
	if len(b) > fleet.MaxJobFrameBytes {
		return fmt.Errorf("job frame is %d bytes, the limit is %d: %w", len(b), fleet.MaxJobFrameBytes, fleet.ErrInvalid)
	}
	if _, err := q.js.PublishMsg(ctx, &nats.Msg{Subject: jobEventsSubject(kind, id), Data: b}, jetstream.WithExpectStream(fleet.JobEventsStream)); err != nil {
		return fmt.Errorf("publish job frame to %s: %w", fleet.JobEventsStream, err)
	}
	return nil
}

// ErrResultTaken: another delivery of the job wrote its result first;
// this one's is dropped (the job is acknowledged all the same).
var ErrResultTaken = errors.New("the job already has a result")

// Finish writes the job's result create-only, publishes the done frame
// and acknowledges the job. If another delivery's result is already there
// it is left as it is: ErrResultTaken, the job acknowledged and its done
// frame published again (the other box may have died before it).
func (j *Job) Finish(ctx context.Context, data []byte) error {
	return j.q.finishJob(ctx, j, JobResult{Attempt: j.Attempt, Box: j.box, Data: data})
}

func (q *Queue) finishJob(ctx context.Context, j *Job, res JobResult) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if len(b) > fleet.MaxJobResultBytes {
		return fmt.Errorf("job result is %d bytes, the limit is %d: %w", len(b), fleet.MaxJobResultBytes, fleet.ErrInvalid)
	}
	if j.claimRev == 0 {
		_, err = q.results.Create(ctx, jobKey(j.Kind, j.ID), b)
	} else {
		_, err = q.results.Update(ctx, jobKey(j.Kind, j.ID), b, j.claimRev)
	}
	taken := casRefused(err)
	if err != nil && !taken {
		return fmt.Errorf("job result into %s: %w", fleet.JobResultsBucket, err)
	}
	if taken {
		// Another delivery claimed the job since, or wrote its result.
		// Only over a result are the done frame and the ack ours to
		// repeat; under a newer attempt's claim they are its own (an ack
		// here would drop the job should that attempt's box die).
		if _, err := q.JobResultOf(ctx, j.Kind, j.ID); err != nil {
			j.settled.Store(true)
			return ErrResultTaken
		}
	}
	if err := q.publishFrame(ctx, j.Kind, j.ID, JobFrame{Attempt: j.Attempt, Box: j.box, Done: true}); err != nil {
		return err
	}
	j.settled.Store(true)
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack job: %w", err)
	}
	if taken {
		return ErrResultTaken
	}
	return nil
}

// Retry hands the job back for any box after delay (this box cannot run
// it: it is stopping, or lacks what the job needs). It counts as a
// delivery towards the bound.
func (j *Job) Retry(delay time.Duration) error {
	j.settled.Store(true)
	return j.msg.NakWithDelay(delay)
}

// Progress keeps the job with this box past the ack wait.
func (j *Job) Progress() error { return j.msg.InProgress() }

// CancelRequested is closed once the job's cancellation is in
// fleet.JobControlBucket (CancelJob, from any box), or when ctx ends; the box
// running the job stops it and finishes it cancelled. It is already closed
// for a job cancelled before it was taken.
func (j *Job) CancelRequested(ctx context.Context) (<-chan struct{}, error) {
	w, err := j.q.control.Watch(ctx, jobCancelKey(j.Kind, j.ID))
	if err != nil {
		return nil, fmt.Errorf("watch job cancellation: %w", err)
	}
	ch := make(chan struct{})
	go func() {
		defer w.Stop()
		defer close(ch)
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// CancelJob records the job's cancellation for whichever box runs it (or
// takes it later). Cancelling twice is not an error.
func (q *Queue) CancelJob(ctx context.Context, kind, id string) error {
	if err := checkJob(kind, id); err != nil {
		return err
	}
	if _, err := q.control.Create(ctx, jobCancelKey(kind, id), []byte("{}")); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("job cancellation into %s: %w", fleet.JobControlBucket, err)
	}
	return nil
}

// JobResultOf returns the job's result, or jetstream.ErrKeyNotFound (also
// while only an attempt's claim is there).
func (q *Queue) JobResultOf(ctx context.Context, kind, id string) (JobResult, error) {
	e, err := q.results.Get(ctx, jobKey(kind, id))
	if err != nil {
		return JobResult{}, err
	}
	r, err := decodeJobResult(e.Value())
	if err == nil && r.Claim {
		return JobResult{}, jetstream.ErrKeyNotFound
	}
	return r, err
}

func decodeJobResult(b []byte) (JobResult, error) {
	var r JobResult
	if len(b) > fleet.MaxJobResultBytes {
		return r, fmt.Errorf("job result over %d bytes: %w", fleet.MaxJobResultBytes, fleet.ErrInvalid)
	}
	if err := json.Unmarshal(b, &r); err != nil || !fleet.ValidBox(r.Box) {
		return JobResult{}, fmt.Errorf("job result: %w", fleet.ErrInvalid)
	}
	return r, nil
}

// FollowJob calls onFrame with each event frame of the job, in the order
// they were published (from the first, whenever it is called), until the
// done frame; then it returns the job's result. It ends early with ctx
// (context.Cause) or with onFrame's error. A frame that breaks its bounds
// ends it with fleet.ErrInvalid: it came from another box.
func (q *Queue) FollowJob(ctx context.Context, kind, id string, onFrame func(JobFrame) error) (JobResult, error) {
	if err := checkJob(kind, id); err != nil {
		return JobResult{}, err
	}
	c, err := q.js.OrderedConsumer(ctx, fleet.JobEventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{jobEventsSubject(kind, id)}, DeliverPolicy: jetstream.DeliverAllPolicy,
		// The server drops it if this box dies; a live follower pulls.
		InactiveThreshold: followInactive,
	})
	if err != nil {
		return JobResult{}, fmt.Errorf("follow job: %w", err)
	}
	// Each consumer costs the stream at every frame any box publishes:
	// the follower's goes as soon as it is done, not after its threshold.
	defer func() {
		if info := c.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			_ = q.js.DeleteConsumer(dctx, fleet.JobEventsStream, info.Name)
			cancel()
		}
	}()
	for {
		msg, err := c.Next(jetstream.FetchContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return JobResult{}, context.Cause(ctx)
			}
			if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
				continue
			}
			return JobResult{}, fmt.Errorf("follow job: %w", err)
		}
		var fr JobFrame
		if len(msg.Data()) > fleet.MaxJobFrameBytes || json.Unmarshal(msg.Data(), &fr) != nil || !fleet.ValidBox(fr.Box) {
			return JobResult{}, fmt.Errorf("job %s frame: %w", id, fleet.ErrInvalid)
		}
		if fr.Done {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			res, err := q.JobResultOf(rctx, kind, id)
			cancel()
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				// A done frame without a result (a version before the
				// claims, a stale attempt): the job's own comes later.
				continue
			}
			if err != nil {
				return JobResult{}, fmt.Errorf("job %s result: %w", id, err)
			}
			return res, nil
		}
		if err := onFrame(fr); err != nil {
			return JobResult{}, err
		}
	}
}

// followInactive is how long the server keeps a follower's consumer that
// no longer pulls (its box died).
const followInactive = 30 * time.Second

// ForgetJob drops a followed job's frames and its cancellation (its
// result stays until its TTL, so a late redelivery still finds it).
func (q *Queue) ForgetJob(ctx context.Context, kind, id string) error {
	if err := checkJob(kind, id); err != nil {
		return err
	}
	s, err := q.js.Stream(ctx, fleet.JobEventsStream)
	if err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject(jobEventsSubject(kind, id)))
	}
	if derr := q.control.Delete(ctx, jobCancelKey(kind, id)); derr != nil && !errors.Is(derr, jetstream.ErrKeyNotFound) && err == nil {
		err = derr
	}
	if err != nil {
		return fmt.Errorf("forget job %s: %w", id, err)
	}
	return nil
}

// jobsConsumer is the durable consumer of a kind, shared by every box: a
// work queue gives each job to one of them.
func jobsConsumer(kind string) string { return "jobs-" + kind }

func (q *Queue) jobConsumer(ctx context.Context, kind string, ackWait time.Duration) (jetstream.Consumer, error) {
	c, err := q.js.CreateOrUpdateConsumer(ctx, fleet.JobsStream, jetstream.ConsumerConfig{
		Durable: jobsConsumer(kind), FilterSubject: fleet.JobsSubjectPrefix + kind,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs consumer %s: %w", jobsConsumer(kind), err)
	}
	return c, nil
}

// NextJob waits for the next job of kind until ctx ends, for box; a job
// not settled within ackWait (nor kept by Progress) goes to another box.
func (q *Queue) NextJob(ctx context.Context, kind, box string, ackWait time.Duration) (*Job, error) {
	if !validJobKind(kind) {
		return nil, fmt.Errorf("job kind %q: %w", kind, fleet.ErrInvalid)
	}
	c, err := q.jobConsumer(ctx, kind, ackWait)
	if err != nil {
		return nil, err
	}
	return q.nextJob(ctx, c, kind, box)
}

func (q *Queue) nextJob(ctx context.Context, c jetstream.Consumer, kind, box string) (*Job, error) {
	for {
		msg, err := c.Next(jetstream.FetchContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
				continue
			}
			return nil, fmt.Errorf("next job: %w", err)
		}
		// SubmitJob's Msg-Id is <kind>-<id>: another prefix is no job of
		// this kind (refused below as an empty id).
		id, _ := strings.CutPrefix(msg.Headers().Get(jetstream.MsgIDHeader), kind+"-")
		if id == msg.Headers().Get(jetstream.MsgIDHeader) {
			id = ""
		}
		j := &Job{Kind: kind, ID: id, Payload: msg.Data(), box: box, q: q, msg: msg, Attempt: 1}
		if md, err := msg.Metadata(); err == nil {
			j.Attempt = md.NumDelivered
		}
		if err := checkJob(kind, id); err != nil || len(j.Payload) > fleet.MaxJobBytes {
			// Not a job a box published (it would have been refused):
			// dropped, not retried forever.
			_ = msg.Term()
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		err = q.claimJob(cctx, j)
		cancel()
		if err != nil {
			// The cluster failed the claim: the job comes again.
			_ = msg.Nak()
			return nil, err
		}
		return j, nil
	}
}
