package fleet

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Job kinds on the jobs work queue (JobsStream): any box takes a job, once.
const (
	JobRun        = "run"
	JobPrecheck   = "precheck"
	JobDelegation = "delegation"
)

var jobIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// SubmitJob publishes a job of kind (Job*) with id (de-duplicated like
// turns) and its payload (the kind's own JSON, at most MaxTurnBytes).
func (f *Fleet) SubmitJob(ctx context.Context, kind, id string, payload []byte) (Submitted, error) {
	if kind != JobRun && kind != JobPrecheck && kind != JobDelegation {
		return Submitted{}, fmt.Errorf("job kind %q: %w", kind, ErrInvalid)
	}
	if !jobIDRe.MatchString(id) {
		return Submitted{}, fmt.Errorf("job id must match %s: %w", jobIDRe, ErrInvalid)
	}
	if len(payload) > MaxTurnBytes {
		return Submitted{}, fmt.Errorf("job is %d bytes, the limit is %d: %w", len(payload), MaxTurnBytes, ErrInvalid)
	}
	ack, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: jobsSubjectPrefix + kind, Data: payload}, jetstream.WithMsgID(kind+"-"+id), jetstream.WithExpectStream(JobsStream))
	if err != nil {
		return Submitted{}, fmt.Errorf("publish job to %s: %w", JobsStream, err)
	}
	return Submitted{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// Job is one taken job; the box acknowledges it when done (Done) or hands
// it back (Retry).
type Job struct {
	Kind    string
	ID      string
	Payload []byte
	msg     jetstream.Msg
}

// Done removes the job from the queue (work-queue retention).
func (j *Job) Done(ctx context.Context) error { return j.msg.DoubleAck(ctx) }

// Retry hands the job back for any box.
func (j *Job) Retry() error { return j.msg.Nak() }

// Progress keeps the job with this box past the ack wait.
func (j *Job) Progress() error { return j.msg.InProgress() }

// jobsConsumer is the one durable consumer every box pulls from: a work
// queue admits one consumer per subject, and all boxes share it.
const jobsConsumer = "boxes"

// NextJob waits for the next job until ctx ends; a job not settled
// within ackWait goes to another box.
func (f *Fleet) NextJob(ctx context.Context, ackWait time.Duration) (*Job, error) {
	c, err := f.js.CreateOrUpdateConsumer(ctx, JobsStream, jetstream.ConsumerConfig{
		Durable: jobsConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs consumer: %w", err)
	}
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
		sub := msg.Subject()
		kind := sub[len(jobsSubjectPrefix):]
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if len(id) > len(kind)+1 {
			id = id[len(kind)+1:]
		}
		return &Job{Kind: kind, ID: id, Payload: msg.Data(), msg: msg}, nil
	}
}
