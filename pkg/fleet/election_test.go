package fleet

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// electingKV answers its first refusals reads the way a server does while
// the stream's leader is being elected (503 at once), then reads through.
type electingKV struct {
	jetstream.KeyValue
	refusals, writeRefusals atomic.Int32
}

func (k *electingKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.writeRefusals.Add(-1) >= 0 {
		return 0, jetstream.ErrNoStreamResponse
	}
	return k.KeyValue.Create(ctx, key, value, opts...)
}

// Create and Update are refused as a publish is while the stream has no leader: no
// responders, nothing applied.
func (k *electingKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if k.writeRefusals.Add(-1) >= 0 {
		return 0, jetstream.ErrNoStreamResponse
	}
	return k.KeyValue.Update(ctx, key, value, rev)
}

func (k *electingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.refusals.Add(-1) >= 0 {
		return nil, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	}
	return k.KeyValue.Get(ctx, key)
}

// TestElectionIsWaitedOutInPlace: a take whose reads the cluster refuses
// for a moment (a leader election) is tried again in place and commits on
// its first delivery: not handed back, so it waits out no redelivery delay,
// spends none of its attempts and counts no failure towards a step back
// (docs/fleet.md, *Failure model*).
func TestElectionIsWaitedOutInPlace(t *testing.T) {
	for _, c := range []struct {
		name          string
		reads, writes int32
	}{{"reads", 4, 0}, {"claim and commit", 0, 3}} {
		t.Run(c.name, func(t *testing.T) { testElection(t, c.reads, c.writes) })
	}
}

func testElection(t *testing.T, reads, writes int32) {
	r := newRig(t, 1, 1)
	var kv *electingKV
	startLoneBox(t, r, func(f *Fleet) {
		kv = &electingKV{KeyValue: f.channels}
		kv.refusals.Store(reads)
		kv.writeRefusals.Store(writes)
		f.channels = kv
	})
	client, _ := r.fleet("client")
	tn := newTurn("chan-election", "x")
	rep, _, err := client.Ask(r.ctx(), tn)
	if err != nil || !rep.OK {
		t.Fatalf("reply %+v, %v: want OK", rep, err)
	}
	if kv.refusals.Load() >= 0 || kv.writeRefusals.Load() >= 0 {
		t.Fatalf("fewer refusals than set up: the test did not exercise the election")
	}
	if got := r.count(EventReturned, tn.ID); got != 0 {
		t.Errorf("turn handed back %d times during the election, want 0 (retried in place)", got)
	}
	if e := r.waitEvent("commit", func(e Event) bool { return e.Kind == EventCommitted && e.TurnID == tn.ID }); e.Attempt != 1 {
		t.Errorf("committed on delivery %d, want 1", e.Attempt)
	}
}
