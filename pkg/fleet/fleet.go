package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"
)

// Fleet is one connection's handles on the family's resources.
type Fleet struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	layout   Layout
	replies  jetstream.KeyValue
	channels jetstream.KeyValue
	objects  jetstream.ObjectStore
	// jobResults and jobControl are the jobs' buckets (Jobs, pkg/fleetjobs).
	jobResults, jobControl jetstream.KeyValue
}

// Open ensures the family's resources (Ensure) and binds them; a box calls
// it at start.
func Open(ctx context.Context, nc *nats.Conn, l Layout) (*Fleet, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := Ensure(ctx, js, l); err != nil {
		return nil, err
	}
	return bind(ctx, nc, js, l)
}

// Bind binds existing resources without creating any (a fleet client's
// user may not create them); partitions must match the boxes'.
func Bind(ctx context.Context, nc *nats.Conn, partitions int) (*Fleet, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cfg, err := pcgroups.GetStaticConsumerGroupConfig(ctx, js, TurnsStream, TurnsGroup)
	if err != nil {
		return nil, fmt.Errorf("the fleet's turns group (are the boxes in fleet mode?): %w", err)
	}
	if int(cfg.MaxMembers) != partitions {
		return nil, fmt.Errorf("the fleet has %d partitions, this client was given %d (fleet.partitions): %w", cfg.MaxMembers, partitions, ErrMismatch)
	}
	return bind(ctx, nc, js, Layout{Partitions: partitions})
}

func bind(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, l Layout) (*Fleet, error) {
	f := &Fleet{nc: nc, js: js, layout: l}
	var err error
	if f.replies, err = js.KeyValue(ctx, RepliesBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", RepliesBucket, err)
	}
	if f.channels, err = js.KeyValue(ctx, ChannelsBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", ChannelsBucket, err)
	}
	if f.objects, err = js.ObjectStore(ctx, WorkspaceBucket); err != nil {
		return nil, fmt.Errorf("object store %s: %w", WorkspaceBucket, err)
	}
	if f.jobResults, err = js.KeyValue(ctx, JobResultsBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", JobResultsBucket, err)
	}
	if f.jobControl, err = js.KeyValue(ctx, JobControlBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", JobControlBucket, err)
	}
	return f, nil
}

// Partitions is the layout's partition count.
func (f *Fleet) Partitions() int { return f.layout.Partitions }

// Submitted is a published turn's place in the stream.
type Submitted struct {
	Seq uint64
	// Duplicate: the stream already held this turn id (a resubmission
	// within the duplicate window); Seq is then the original's.
	Duplicate bool
}

// Submit publishes an admitted turn; a resubmission of the same turn id is
// de-duplicated by the stream (Nats-Msg-Id).
func (f *Fleet) Submit(ctx context.Context, t Turn) (Submitted, error) {
	if err := t.Validate(); err != nil {
		return Submitted{}, err
	}
	data, err := json.Marshal(t)
	if err != nil {
		return Submitted{}, err
	}
	if len(data) > MaxTurnBytes {
		return Submitted{}, fmt.Errorf("turn is %d bytes, the limit is %d: %w", len(data), MaxTurnBytes, ErrInvalid)
	}
	msg := &nats.Msg{Subject: TurnSubject(Partition(t.Channel, f.layout.Partitions)), Data: data}
	ack, err := f.js.PublishMsg(ctx, msg, jetstream.WithMsgID(t.ID), jetstream.WithExpectStream(TurnsStream))
	if err != nil {
		return Submitted{}, fmt.Errorf("publish turn to %s: %w", TurnsStream, err)
	}
	return Submitted{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// ErrNoReply: the wait for a reply ended before one was committed.
var ErrNoReply = errors.New("no reply in time")

// AwaitReply waits for the turn's committed reply until ctx ends; a reply
// already there is returned at once (a watch delivers the current value).
func (f *Fleet) AwaitReply(ctx context.Context, turnID string) (Reply, error) {
	w, err := f.replies.Watch(ctx, turnID)
	if err != nil {
		return Reply{}, fmt.Errorf("watch reply: %w", err)
	}
	defer w.Stop()
	return awaitReply(ctx, w, turnID)
}

func awaitReply(ctx context.Context, w jetstream.KeyWatcher, turnID string) (Reply, error) {
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return Reply{}, fmt.Errorf("turn %s: reply watch closed: %w", turnID, ErrNoReply)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // nil marks the end of the initial values
			}
			return decodeReply(e.Value())
		case <-ctx.Done():
			return Reply{}, fmt.Errorf("turn %s: %w: %w", turnID, ErrNoReply, context.Cause(ctx))
		}
	}
}

// Ask submits a turn and waits for its reply. The watch is in place before
// the turn is published, so no reply can be missed.
func (f *Fleet) Ask(ctx context.Context, t Turn) (Reply, Submitted, error) {
	if err := t.Validate(); err != nil {
		return Reply{}, Submitted{}, err
	}
	w, err := f.replies.Watch(ctx, t.ID)
	if err != nil {
		return Reply{}, Submitted{}, fmt.Errorf("watch reply: %w", err)
	}
	defer w.Stop()
	sub, err := f.Submit(ctx, t)
	if err != nil {
		return Reply{}, sub, err
	}
	r, err := awaitReply(ctx, w, t.ID)
	return r, sub, err
}

// Reply returns the committed reply of a turn, or jetstream.ErrKeyNotFound.
func (f *Fleet) Reply(ctx context.Context, turnID string) (Reply, error) {
	e, err := f.replies.Get(ctx, turnID)
	if err != nil {
		return Reply{}, err
	}
	return decodeReply(e.Value())
}

// Channel returns the channel's committed state and its revision (0 and
// no error for a channel that never ran a turn).
func (f *Fleet) Channel(ctx context.Context, channel string) (ChannelState, uint64, error) {
	e, err := f.channels.Get(ctx, channelKey(channel))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ChannelState{Channel: channel}, 0, nil
	}
	if err != nil {
		return ChannelState{}, 0, err
	}
	st, err := decodeState(e.Value())
	return st, e.Revision(), err
}

// Workspace returns a committed snapshot by its object name.
func (f *Fleet) Workspace(ctx context.Context, name string) ([]byte, error) {
	if name == "" {
		return nil, nil
	}
	r, err := f.objects.Get(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, MaxWorkspaceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	if len(data) > MaxWorkspaceBytes {
		return nil, fmt.Errorf("workspace %s exceeds %d bytes: %w", name, MaxWorkspaceBytes, ErrInvalid)
	}
	return data, nil
}

// deadline of a call that needs the cluster but carries no caller ctx.
const opTimeout = 10 * time.Second
