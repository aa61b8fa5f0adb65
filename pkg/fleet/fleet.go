package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetworkspace"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// Fleet is one connection's handles on the family's resources.
type Fleet struct {
	nc *nats.Conn
	js jetstream.JetStream
	// pub publishes turns: js, or a test's fake that loses acks.
	pub      publisher
	layout   Layout
	replies  jetstream.KeyValue
	channels jetstream.KeyValue
	ws       *fleetworkspace.Store
	// jobResults and jobControl are the jobs' buckets (Jobs, pkg/fleetjobs).
	jobResults, jobControl jetstream.KeyValue
	// beforeModeWrite, when set (tests), runs between each of writeMode's
	// reads and its write.
	beforeModeWrite func()
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

// BindFrontend binds what a frontend on no box uses (Ask, Submit,
// AwaitReply, Reply): the turns group's partition count and the replies
// bucket, nothing else, so that a frontend's NATS user needs only publish
// turns and read replies (fleetnats.FrontendPermissions). Any other method
// of the returned Fleet must not be called.
func BindFrontend(ctx context.Context, nc *nats.Conn, partitions int) (*Fleet, error) {
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
	f := &Fleet{nc: nc, js: js, pub: js, layout: Layout{Partitions: partitions}}
	if f.replies, err = js.KeyValue(ctx, RepliesBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", RepliesBucket, err)
	}
	return f, nil
}

func bind(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, l Layout) (*Fleet, error) {
	f := &Fleet{nc: nc, js: js, pub: js, layout: l}
	var err error
	if f.replies, err = js.KeyValue(ctx, RepliesBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", RepliesBucket, err)
	}
	if f.channels, err = js.KeyValue(ctx, ChannelsBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %w", ChannelsBucket, err)
	}
	if f.ws, err = fleetworkspace.Bind(ctx, js); err != nil {
		return nil, err
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

// publisher is what publishing a turn needs of JetStream.
type publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

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
	if t.TimeoutMs == 0 {
		// The deadline as a duration, on this publisher's own clock.
		left := time.Until(time.UnixMilli(t.DeadlineUnixMs))
		if left < time.Millisecond {
			return Submitted{}, fmt.Errorf("turn %s: its deadline passed before it was published: %w", t.ID, ErrInvalid)
		}
		t.TimeoutMs = left.Milliseconds()
	}
	data, err := encodeJSON(t)
	if err != nil {
		return Submitted{}, err
	}
	// The stream's MaxMsgSize counts the headers too.
	if limit := valueLimit(MaxTurnBytes, f.nc.MaxPayload()); len(data) > limit {
		return Submitted{}, fmt.Errorf("turn is %d bytes as stored, the limit is %d: %w", len(data), limit, ErrInvalid)
	}
	msg := &nats.Msg{Subject: TurnSubject(Partition(t.Channel, f.layout.Partitions)), Data: data}
	ack, err := f.pub.PublishMsg(ctx, msg, jetstream.WithMsgID(t.ID), jetstream.WithExpectStream(TurnsStream))
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
	// A wildcard would watch (and read) other turns' replies.
	if err := ids.ValidTurnID(turnID); err != nil {
		return Reply{}, fmt.Errorf("turn id: %w: %w", err, ErrInvalid)
	}
	w, err := f.replies.Watch(ctx, turnID)
	if err != nil {
		w = nil // read meanwhile, and watched again (await)
	}
	r, _, err := f.await(ctx, turnID, w, nil, nil)
	return r, err
}

// Ask submits a turn and waits for its reply. The watch is in place before
// the turn is published where the cluster can make one, and the reply is
// also read beside it (await), so no reply can be missed. A publish whose
// outcome is unknown (its ack lost, the stream's leader away) is retried
// under the same turn id within the stream's de-duplication window, so
// it is one stream message however often it is sent; meanwhile, and
// after the retries when the turn may have been stored, the reply is
// waited for: a turn that committed is answered, never reported failed.
// Only a publish the stream refused (or a context that ended) fails Ask.
func (f *Fleet) Ask(ctx context.Context, t Turn) (Reply, Submitted, error) {
	if err := t.Validate(); err != nil {
		return Reply{}, Submitted{}, err
	}
	w, err := f.replies.Watch(ctx, t.ID)
	if err != nil {
		w = nil // read meanwhile, and watched again (await)
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	published := make(chan published, 1)
	go func() { published <- f.publishRetrying(pctx, t) }()
	return f.await(ctx, t.ID, w, published, stop)
}

// Publishing a turn: each attempt bounded by publishTimeout, the next one
// after a wait from publishBackoff doubling up to publishBackoffMax.
const (
	publishTimeout    = 5 * time.Second
	publishBackoff    = 100 * time.Millisecond
	publishBackoffMax = 5 * time.Second
)

// Reading a reply beside its watch. The watch is an ephemeral consumer,
// and making one (again, after a reconnect) needs the meta leader, which a
// partial cut can keep away for tens of seconds; each attempt a server
// without the leader answers 503 may still leave a consumer behind
// (docs/fleet.md, *What the partial cut's tail is made of*). A direct get
// needs only a replica of the replies stream, and a reply is create-only,
// so any replica's copy is the reply; one that lags is read again later.
// The reads start at replyReadFirst and back off to replyReadMax; the
// watch is made again backing off to rewatchBackoffMax.
const (
	replyReadFirst    = time.Second
	replyReadMax      = 4 * time.Second
	replyReadTimeout  = 2 * time.Second
	rewatchBackoffMax = 10 * time.Second
)

// published is how publishing a turn ended: stored (sub), or err, after
// which the turn may still have been stored (maybeStored: an attempt's
// outcome was unknown).
type published struct {
	sub         Submitted
	err         error
	maybeStored bool
}

// publishRetrying publishes t until the stream acknowledges it, refuses it,
// or ctx or the stream's de-duplication window (from the first attempt)
// ends: past the window a retry could be stored a second time.
func (f *Fleet) publishRetrying(ctx context.Context, t Turn) published {
	deadline := time.Now().Add(f.layout.withDefaults().DuplicateWindow)
	backoff := publishBackoff
	var res published
	for {
		actx, cancel := context.WithTimeout(ctx, publishTimeout)
		sub, err := f.Submit(actx, t)
		cancel()
		if err == nil {
			return published{sub: sub}
		}
		res.err = err
		retry := retryablePublish(err)
		res.maybeStored = res.maybeStored || retry
		if !retry || ctx.Err() != nil || !time.Now().Add(backoff).Before(deadline) {
			return res
		}
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return res
		}
		backoff = min(2*backoff, publishBackoffMax)
	}
}

// retryablePublish: the publish's outcome is unknown or the stream was
// away (a lost ack, a timeout, no leader), not refused by the stream.
func retryablePublish(err error) bool {
	var apiErr *jetstream.APIError
	return !errors.Is(err, ErrInvalid) && !errors.Is(err, ids.ErrInvalid) && !errors.As(err, &apiErr) &&
		!errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrMaxPayload)
}

// await waits for the turn's reply on w (nil: no watch yet), watching the
// key again when a watch ends (a reconnect) or could not be made, and
// reading the key beside it (replyReadFirst): a watch starts with the
// current value, and a read finds a reply any watch missed, so no reply is
// missed. pub, when not nil, reports how publishing the turn ended; stop
// ends that publishing.
func (f *Fleet) await(ctx context.Context, turnID string, w jetstream.KeyWatcher, pub <-chan published, stop func()) (Reply, Submitted, error) {
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	var res published
	// settle ends publishing and takes its outcome.
	settle := func() {
		if pub != nil {
			stop()
			res, pub = <-pub, nil
		}
	}
	readEvery := replyReadFirst
	read := time.NewTimer(readEvery)
	defer read.Stop()
	rewatchEvery := publishBackoff
	rewatch := time.NewTimer(rewatchEvery)
	defer rewatch.Stop()
	if w != nil {
		rewatch.Stop()
	}
	for {
		var updates <-chan jetstream.KeyValueEntry
		if w != nil {
			updates = w.Updates()
		}
		select {
		case e, ok := <-updates:
			if !ok {
				w.Stop()
				w = nil
				rewatch.Reset(rewatchEvery)
				continue
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue // nil marks the end of the initial values
			}
			settle()
			r, err := decodeReply(e.Value())
			return r, res.sub, err
		case <-rewatch.C:
			nw, err := f.replies.Watch(ctx, turnID)
			if err != nil {
				rewatchEvery = min(2*rewatchEvery, rewatchBackoffMax)
				rewatch.Reset(rewatchEvery)
				continue
			}
			w, rewatchEvery = nw, publishBackoff
		case <-read.C:
			if r, found, err := f.readReply(ctx, turnID); found {
				settle()
				return r, res.sub, err
			}
			readEvery = min(2*readEvery, replyReadMax)
			read.Reset(readEvery)
		case res = <-pub:
			pub = nil
			if res.err != nil && !res.maybeStored {
				return Reply{}, res.sub, res.err
			}
			// Stored, or maybe: its reply comes.
		case <-ctx.Done():
			settle()
			if res.err != nil {
				return Reply{}, res.sub, fmt.Errorf("turn %s: %w: %w", turnID, ErrNoReply, res.err)
			}
			return Reply{}, res.sub, fmt.Errorf("turn %s: %w: %w", turnID, ErrNoReply, context.Cause(ctx))
		}
	}
}

// readReply reads the turn's reply from any replica: found is false when
// none answered with one (not there yet, a replica that lags, or no
// replica in replyReadTimeout).
func (f *Fleet) readReply(ctx context.Context, turnID string) (r Reply, found bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, replyReadTimeout)
	defer cancel()
	e, err := f.replies.Get(rctx, turnID)
	if err != nil || e.Operation() != jetstream.KeyValuePut {
		return Reply{}, false, nil
	}
	r, err = decodeReply(e.Value())
	return r, true, err
}

// encodeReply encodes r as RepliesBucket stores it, or refuses it
// (ErrInvalid) when the bucket would.
func (f *Fleet) encodeReply(r Reply) ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	data, err := encodeJSON(r)
	if err != nil {
		return nil, err
	}
	if limit := valueLimit(MaxReplyBytes, f.nc.MaxPayload()); len(data) > limit {
		return nil, fmt.Errorf("reply is %d bytes as stored, the limit is %d: %w", len(data), limit, ErrInvalid)
	}
	return data, nil
}

// errReplyDiffers: the turn's reply key holds a reply other than the one
// being stored (a box that gave up on the turn stored "failed" first, say):
// the first stored stands, and the caller says so in its log.
var errReplyDiffers = errors.New("another reply is stored for the turn")

// putReply stores a turn's reply, create-only: a reply already there (a
// redelivery's, another box's) stays and counts as stored; one that
// differs from r is errReplyDiffers. A reply the bucket would refuse is
// refused here (ErrInvalid), before the cluster.
func (f *Fleet) putReply(ctx context.Context, r Reply) error {
	data, err := f.encodeReply(r)
	if err != nil {
		return err
	}
	_, err = f.replies.Create(ctx, r.TurnID, data)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	// Read only on this rare path (a redelivery, a round whose answer was
	// lost): the same bytes are this box's own earlier write.
	if e, gerr := f.replies.Get(ctx, r.TurnID); gerr == nil && !bytes.Equal(e.Value(), data) {
		return errReplyDiffers
	}
	return nil
}

// encodeState encodes st as ChannelsBucket stores it, or refuses it
// (ErrInvalid) when the bucket would.
func (f *Fleet) encodeState(st ChannelState) ([]byte, error) {
	data, err := encodeJSON(st)
	if err != nil {
		return nil, err
	}
	if limit := valueLimit(MaxStateBytes, f.nc.MaxPayload()); len(data) > limit {
		return nil, fmt.Errorf("channel state is %d bytes as stored, the limit is %d: %w", len(data), limit, ErrInvalid)
	}
	return data, nil
}

// storable: a commit's state and its reply fit their buckets as stored.
func (f *Fleet) storable(st ChannelState) error {
	if st.LastReply != nil {
		if _, err := f.encodeReply(*st.LastReply); err != nil {
			return err
		}
	}
	_, err := f.encodeState(st)
	return err
}

// putState writes a channel's state at revision rev (0: create), or
// refuses it (ErrInvalid) when ChannelsBucket would.
func (f *Fleet) putState(ctx context.Context, key string, st ChannelState, rev uint64) (uint64, error) {
	data, err := f.encodeState(st)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return f.channels.Create(ctx, key, data)
	}
	return f.channels.Update(ctx, key, data, rev)
}

// Reply returns the committed reply of a turn, or jetstream.ErrKeyNotFound.
// Any replica may answer (direct get), so a reply committed a moment ago
// may not be there yet; AwaitReply waits for it.
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

// Workspace returns a committed snapshot by its name: from its channel's
// state when it was committed inside it (ChannelState.WorkspaceData),
// otherwise the workspace store's object.
func (f *Fleet) Workspace(ctx context.Context, name string) ([]byte, error) {
	if ch, ok := snapshotChannelKey(name); ok {
		e, err := f.channels.Get(ctx, ch)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, err
		}
		if err == nil {
			if st, err := decodeState(e.Value()); err == nil && st.Workspace == name && st.inline() {
				return st.WorkspaceData, nil
			}
		}
	}
	return f.object(ctx, name)
}

// object returns a snapshot stored as an object of the workspace store.
func (f *Fleet) object(ctx context.Context, name string) ([]byte, error) {
	data, err := f.ws.Get(ctx, name)
	if errors.Is(err, fleetworkspace.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	return data, err
}

// deadline of a call that needs the cluster but carries no caller ctx.
const opTimeout = 10 * time.Second

// Reach asks the cluster what a turn needs of it, at once: the meta
// leader (the account's JetStream), and the leaders of the channels bucket
// (claims and commits), the replies bucket (a take reads the turn's reply,
// a commit writes it) and the workspace store (snapshots). Each answer
// comes from that stream's leader, so a server cut from a leader (still
// routed to the others) fails here, not only in a turn.
//
// It also reads the turns stream's leader (publishes, pulls and acks need
// it) and returns the stream's latest timestamp: the engine's clock, by
// which a box ages a turn (Turn.TimeoutMs).
func (f *Fleet) Reach(ctx context.Context) (time.Time, error) {
	errs := make(chan error, 5)
	var latest time.Time
	go func() {
		_, err := f.js.AccountInfo(ctx)
		errs <- err
	}()
	go func() {
		s, err := f.js.Stream(ctx, TurnsStream)
		if err == nil {
			latest = s.CachedInfo().State.LastTime
		}
		errs <- err
	}()
	go func() {
		_, err := f.channels.Status(ctx)
		errs <- err
	}()
	go func() {
		_, err := f.replies.Status(ctx)
		errs <- err
	}()
	go func() {
		errs <- f.ws.Status(ctx)
	}()
	var all []error
	for range 5 {
		all = append(all, <-errs)
	}
	return latest, errors.Join(all...)
}
