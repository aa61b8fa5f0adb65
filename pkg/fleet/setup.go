package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"
)

// Layout is what every box of a family must agree on.
type Layout struct {
	// Partitions (fleet.partitions): fixed for the life of the stream, since
	// a channel's partition is its hash modulo this number.
	Partitions int
	// Replicas (fleet.replicas) of every stream and bucket: 1, 3 or 5.
	Replicas int
	// DuplicateWindow is how long a resubmitted turn id is de-duplicated by
	// the stream (default 10 minutes, a client's turn timeout); the reply
	// bucket and each channel's last sequence catch a later resubmission.
	DuplicateWindow time.Duration
	// ReplyTTL is how long a reply stays in RepliesBucket (default 24 h).
	ReplyTTL time.Duration
}

// Defaults of Layout's durations.
const (
	DefaultDuplicateWindow = 10 * time.Minute
	DefaultReplyTTL        = 24 * time.Hour
)

func (l Layout) withDefaults() Layout {
	if l.DuplicateWindow <= 0 {
		l.DuplicateWindow = DefaultDuplicateWindow
	}
	if l.ReplyTTL <= 0 {
		l.ReplyTTL = DefaultReplyTTL
	}
	return l
}

// Check refuses a layout no box could run, naming the config key.
func (l Layout) Check() error {
	if l.Partitions < 1 || l.Partitions > 1024 {
		return fmt.Errorf("fleet.partitions must be 1 to 1024 (got %d): %w", l.Partitions, ErrInvalid)
	}
	if l.Replicas != 1 && l.Replicas != 3 && l.Replicas != 5 {
		return fmt.Errorf("fleet.replicas must be 1, 3 or 5 (got %d): %w", l.Replicas, ErrInvalid)
	}
	return nil
}

// ErrMismatch: the cluster holds a resource made with another layout; the
// operator must reconcile (the error names the key), nothing is changed.
var ErrMismatch = errors.New("the fleet's existing resources disagree with this box's configuration")

func (l Layout) turnsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:     TurnsStream,
		Subjects: []string{turnsSubjectPrefix + "*"},
		// pcgroups' static groups read the partition from the first token.
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      turnsSubjectPrefix + "*",
			Destination: "{{wildcard(1)}}." + turnsSubjectPrefix + "{{wildcard(1)}}",
		},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		Replicas:   l.Replicas,
		Duplicates: l.DuplicateWindow,
		MaxMsgSize: MaxTurnBytes,
		// A turn older than a day has long been answered or given up on.
		MaxAge:  24 * time.Hour,
		Discard: jetstream.DiscardOld,
	}
}

func (l Layout) jobsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       JobsStream,
		Subjects:   []string{jobsSubjectPrefix + ">"},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Replicas:   l.Replicas,
		Duplicates: l.DuplicateWindow,
		MaxMsgSize: MaxTurnBytes,
		MaxAge:     24 * time.Hour,
	}
}

// jobEventsConfig: frames of running jobs, bounded in count and age, each
// frame at most MaxJobFrameBytes.
func (l Layout) jobEventsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       JobEventsStream,
		Subjects:   []string{jobEventsPrefix + ">"},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		Replicas:   l.Replicas,
		MaxMsgSize: MaxJobFrameBytes,
		MaxMsgs:    jobEventsMaxMsgs,
		MaxAge:     jobEventsMaxAge,
		Discard:    jetstream.DiscardOld,
	}
}

// Ensure creates the family's streams, buckets, object store and turns
// consumer group, or checks the existing ones against l (replicas,
// partitions, subjects); a mismatch is ErrMismatch naming the key, and
// nothing existing is changed.
func Ensure(ctx context.Context, js jetstream.JetStream, l Layout) error {
	if err := l.Check(); err != nil {
		return err
	}
	l = l.withDefaults()
	for _, cfg := range []jetstream.StreamConfig{l.turnsConfig(), l.jobsConfig(), l.jobEventsConfig()} {
		if err := untilElected(ctx, func() error { return ensureStream(ctx, js, cfg) }); err != nil {
			return err
		}
	}
	kvs := []jetstream.KeyValueConfig{
		// History 4: a reply is written once (create-only); kept history
		// lets an audit see any overwrite.
		{Bucket: RepliesBucket, History: 4, TTL: l.ReplyTTL, MaxValueSize: MaxReplyBytes, Storage: jetstream.FileStorage, Replicas: l.Replicas},
		{Bucket: ChannelsBucket, History: 1, MaxValueSize: MaxStateBytes, Storage: jetstream.FileStorage, Replicas: l.Replicas},
		// A job's result is written once, like a reply; its control keys
		// (cancellation, approval) are small.
		{Bucket: JobResultsBucket, History: 1, TTL: jobKVTTL, MaxValueSize: MaxJobResultBytes, Storage: jetstream.FileStorage, Replicas: l.Replicas},
		{Bucket: JobControlBucket, History: 1, TTL: jobKVTTL, MaxValueSize: maxControlBytes, Storage: jetstream.FileStorage, Replicas: l.Replicas},
	}
	for _, cfg := range kvs {
		if err := untilElected(ctx, func() error { return ensureKV(ctx, js, cfg) }); err != nil {
			return err
		}
	}
	objects := jetstream.ObjectStoreConfig{Bucket: WorkspaceBucket, Storage: jetstream.FileStorage, Replicas: l.Replicas, MaxBytes: -1}
	if err := untilElected(ctx, func() error { return ensureObjects(ctx, js, objects) }); err != nil {
		return err
	}
	return untilElected(ctx, func() error { return ensureGroup(ctx, js, l.Partitions) })
}

// electionWait bounds how long Ensure waits for a stream it just made to
// elect its leader: until then the cluster answers "no responders".
const electionWait = 15 * time.Second

// untilElected retries f while the cluster has no responder for it (a new
// stream's leader is being elected: a state that ends, not a race).
func untilElected(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(electionWait)
	backoff := 50 * time.Millisecond
	for {
		err := f()
		if !(errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, time.Second)
	}
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		s, err = js.Stream(ctx, want.Name)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", want.Name, err)
	}
	got := s.CachedInfo().Config
	if got.Replicas != want.Replicas {
		return fmt.Errorf("stream %s has %d replicas, fleet.replicas is %d: %w", want.Name, got.Replicas, want.Replicas, ErrMismatch)
	}
	if !slices.Equal(got.Subjects, want.Subjects) || got.Retention != want.Retention || got.Storage != want.Storage {
		return fmt.Errorf("stream %s: subjects %v, retention %s, storage %s; want %v, %s, %s: %w",
			want.Name, got.Subjects, got.Retention, got.Storage, want.Subjects, want.Retention, want.Storage, ErrMismatch)
	}
	return nil
}

// leaderReads: buckets whose reads must see the latest write (a fence, a
// result just written, an approval's revision), never a lagging replica.
func leaderReads(bucket string) bool {
	return bucket == ChannelsBucket || bucket == JobResultsBucket || bucket == JobControlBucket
}

func ensureKV(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) error {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, want)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, want.Bucket)
		}
	}
	if err != nil {
		return fmt.Errorf("bucket %s: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", want.Bucket, err)
	}
	scfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	if scfg.Replicas != want.Replicas {
		return fmt.Errorf("bucket %s has %d replicas, fleet.replicas is %d: %w", want.Bucket, scfg.Replicas, want.Replicas, ErrMismatch)
	}
	if leaderReads(want.Bucket) && scfg.AllowDirect {
		// A direct get may be answered by any replica, a stale one too: a
		// claim read from it would be refused by the leader and the turn
		// wait out its ack wait. The channels bucket reads from the leader.
		scfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, scfg); err != nil {
			return fmt.Errorf("bucket %s: turn off direct get: %w", want.Bucket, err)
		}
	}
	return nil
}

func ensureObjects(ctx context.Context, js jetstream.JetStream, want jetstream.ObjectStoreConfig) error {
	os, err := js.ObjectStore(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		os, err = js.CreateObjectStore(ctx, want)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			os, err = js.ObjectStore(ctx, want.Bucket)
		}
	}
	if err != nil {
		return fmt.Errorf("object store %s: %w", want.Bucket, err)
	}
	st, err := os.Status(ctx)
	if err != nil {
		return fmt.Errorf("object store %s: %w", want.Bucket, err)
	}
	if r := st.Replicas(); r != want.Replicas {
		return fmt.Errorf("object store %s has %d replicas, fleet.replicas is %d: %w", want.Bucket, r, want.Replicas, ErrMismatch)
	}
	// As for the channels bucket: a direct get may be answered by a replica
	// that has not applied the snapshot just committed, and the next turn
	// would fail to restore it ("not found", seen under the race detector).
	s, err := js.Stream(ctx, "OBJ_"+want.Bucket)
	if err != nil {
		return fmt.Errorf("object store %s: %w", want.Bucket, err)
	}
	if scfg := s.CachedInfo().Config; scfg.AllowDirect {
		scfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, scfg); err != nil {
			return fmt.Errorf("object store %s: turn off direct get: %w", want.Bucket, err)
		}
	}
	return nil
}

// ensureGroup makes the turns group: one member per partition, member pN
// mapped to partition N, so each partition has its own consumer and pin.
func ensureGroup(ctx context.Context, js jetstream.JetStream, partitions int) error {
	mappings := make([]pcgroups.MemberMapping, partitions)
	for p := range mappings {
		mappings[p] = pcgroups.MemberMapping{Member: memberName(p), Partitions: []int{p}}
	}
	_, err := pcgroups.CreateStatic(ctx, js, TurnsStream, TurnsGroup, uint(partitions), nil, nil, mappings)
	if err == nil {
		return nil
	}
	if cfg, gerr := pcgroups.GetStaticConsumerGroupConfig(ctx, js, TurnsStream, TurnsGroup); gerr == nil && int(cfg.MaxMembers) != partitions {
		return fmt.Errorf("the turns consumer group has %d partitions, fleet.partitions is %s: %w", cfg.MaxMembers, strconv.Itoa(partitions), ErrMismatch)
	}
	return fmt.Errorf("turns consumer group: %w", err)
}
