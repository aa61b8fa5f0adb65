package fleet

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lostAnswerKV loses the answer of the first write lose picks (a leader
// behind a cut, the route still looking alive): land says what the
// cluster does with that write (ours: it lands; nil: nothing), then the
// call waits out its context as an unanswered request does.
type lostAnswerKV struct {
	jetstream.KeyValue
	mu   sync.Mutex
	done bool
	lose func(value []byte) bool
	land func(kv jetstream.KeyValue, key string, value []byte, rev uint64) error
}

func (kv *lostAnswerKV) pick(value []byte) bool {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.done || !kv.lose(value) {
		return false
	}
	kv.done = true
	return true
}

func (kv *lostAnswerKV) lost(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if err := kv.land(kv.KeyValue, key, value, rev); err != nil {
		return 0, err
	}
	<-ctx.Done()
	return 0, ctx.Err()
}

func (kv *lostAnswerKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if kv.pick(value) {
		return kv.lost(ctx, key, value, rev)
	}
	return kv.KeyValue.Update(ctx, key, value, rev)
}

func (kv *lostAnswerKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if kv.pick(value) {
		return kv.lost(ctx, key, value, 0)
	}
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

// landed: the write reaches the leader; only its answer is lost.
func landed(kv jetstream.KeyValue, key string, value []byte, rev uint64) error {
	var err error
	if rev == 0 {
		_, err = kv.Create(context.Background(), key, value)
	} else {
		_, err = kv.Update(context.Background(), key, value, rev)
	}
	return err
}

// aCommit: the state written is a commit (it carries the turn's reply).
func aCommit(value []byte) bool {
	var st ChannelState
	return json.Unmarshal(value, &st) == nil && st.LastReply != nil
}

// aClaim: the state written is a claim.
func aClaim(value []byte) bool { return !aCommit(value) }

func anyValue([]byte) bool { return true }

// startLoneBox starts box a alone on a one-server rig, its fleet's
// buckets changed by wrap first.
func startLoneBox(t *testing.T, r *rig, wrap func(*Fleet)) {
	t.Helper()
	startLoneBoxWith(t, r, newRecorder(), wrap)
}

// startLoneBoxWith is startLoneBox with the box's executor ex.
func startLoneBoxWith(t *testing.T, r *rig, ex Executor, wrap func(*Fleet)) {
	t.Helper()
	fa, _ := r.fleet("a")
	wrap(fa)
	b, err := NewBox(fa, BoxOptions{Name: "a", Executor: ex, AckWait: testAckWait, OnEvent: r.record, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(r.ctx()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
}

// TestLostAnswerOfALandedWriteIsCheckedInPlace: a claim, commit or reply
// that landed but whose answer was lost is found landed in place (the
// claim and the commit by reading the key after the same compare-and-swap
// is refused, the reply by its create being refused), and the turn is
// committed on its first delivery. Before, the box waited out the write's
// 10 s timeout and handed the turn back (a redelivery, answered from the
// state).
func TestLostAnswerOfALandedWriteIsCheckedInPlace(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*Fleet, func([]byte) bool)
		lose func([]byte) bool
	}{
		{"claim", func(f *Fleet, lose func([]byte) bool) {
			f.channels = &lostAnswerKV{KeyValue: f.channels, lose: lose, land: landed}
		}, aClaim},
		{"commit", func(f *Fleet, lose func([]byte) bool) {
			f.channels = &lostAnswerKV{KeyValue: f.channels, lose: lose, land: landed}
		}, aCommit},
		{"reply", func(f *Fleet, lose func([]byte) bool) {
			f.replies = &lostAnswerKV{KeyValue: f.replies, lose: lose, land: landed}
		}, anyValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1, 1)
			startLoneBox(t, r, func(f *Fleet) { tc.wrap(f, tc.lose) })
			client, _ := r.fleet("client")
			tn := newTurn("chan-lost-"+tc.name, "x")
			rep, _, err := client.Ask(r.ctx(), tn)
			if err != nil || !rep.OK {
				t.Fatalf("reply %+v, %v: want an answer", rep, err)
			}
			e := r.waitEvent("commit", func(e Event) bool { return e.Kind == EventCommitted && e.TurnID == tn.ID })
			if e.Attempt != 1 || r.count(EventReturned, tn.ID) != 0 {
				t.Errorf("committed on attempt %d after %d hand-backs, want attempt 1 and none: events %+v", e.Attempt, r.count(EventReturned, tn.ID), r.snapshot())
			}
			if n := replyCount(t, client, tn.ID); n != 1 {
				t.Errorf("%d replies stored, want 1", n)
			}
		})
	}
}

// TestLostCommitKeepsTheFence: a commit whose answer was lost while
// another box took the channel (its claim at the commit's revision) is
// not taken for landed: the same compare-and-swap is refused, the key
// holds another box's claim, and the box drops its work (refused by the
// fence) instead of handing the turn back. The turn is then committed
// once, on a later delivery.
func TestLostCommitKeepsTheFence(t *testing.T) {
	r := newRig(t, 1, 1)
	takenBy := func(kv jetstream.KeyValue, key string, value []byte, rev uint64) error {
		// Another box's take of the same turn, at the revision the
		// commit expected (the claim the key holds, taken over): the
		// commit itself never reaches the leader.
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			return err
		}
		var claim ChannelState
		if err := json.Unmarshal(e.Value(), &claim); err != nil {
			return err
		}
		other := claimOf(claim, Turn{ID: claim.ClaimTurn, Channel: claim.Channel}, claim.ClaimSeq, "b")
		data, err := json.Marshal(other)
		if err != nil {
			return err
		}
		_, err = kv.Update(context.Background(), key, data, rev)
		return err
	}
	startLoneBox(t, r, func(f *Fleet) {
		f.channels = &lostAnswerKV{KeyValue: f.channels, lose: aCommit, land: takenBy}
	})
	client, _ := r.fleet("client")
	tn := newTurn("chan-lost-fenced", "x")
	rep, _, err := client.Ask(r.ctx(), tn)
	if err != nil || !rep.OK {
		t.Fatalf("reply %+v, %v: want an answer", rep, err)
	}
	refused := r.waitEvent("refusal", func(e Event) bool { return e.Kind == EventRefused && e.TurnID == tn.ID })
	if refused.Attempt != 1 {
		t.Errorf("refused on attempt %d, want 1", refused.Attempt)
	}
	if n := r.count(EventReturned, tn.ID); n != 0 {
		t.Errorf("%d hand-backs, want none (the refusal is the fence's): events %+v", n, r.snapshot())
	}
	e := r.waitEvent("commit", func(e Event) bool { return e.Kind == EventCommitted && e.TurnID == tn.ID })
	if e.Attempt < 2 {
		t.Errorf("committed on attempt %d, want a later delivery than the refused one", e.Attempt)
	}
	if n := replyCount(t, client, tn.ID); n != 1 {
		t.Errorf("%d replies stored, want 1", n)
	}
}

// TestCommittedTurnsReplyIsPublishedInPlace: a turn delivered again after
// its commit (the committing box cut from the replies bucket's leader
// before its reply) has its reply published from the state by the next
// box; refused for want of a leader (no responders: the replies' leader
// being elected), the reply is tried again in place, not handed back for
// another redelivery.
func TestCommittedTurnsReplyIsPublishedInPlace(t *testing.T) {
	r := newRig(t, 1, 1)
	electing := func(jetstream.KeyValue, string, []byte, uint64) error { return nats.ErrNoResponders }
	startLoneBox(t, r, func(f *Fleet) {
		f.replies = &lostAnswerKV{KeyValue: f.replies, lose: anyValue, land: electing}
	})
	client, _ := r.fleet("client")
	tn := newTurn("chan-committed-unreplied", "x")
	committed := ChannelState{Channel: tn.Channel, Generation: 1, LastTurn: tn.ID,
		LastReply: &Reply{TurnID: tn.ID, OK: true, Text: "committed before", Box: "gone", Generation: 1}}
	if _, err := client.putState(r.ctx(), channelKey(tn.Channel), committed, 0); err != nil {
		t.Fatal(err)
	}
	rep, _, err := client.Ask(r.ctx(), tn)
	if err != nil || rep.Text != "committed before" {
		t.Fatalf("reply %+v, %v: want the committed one", rep, err)
	}
	e := r.waitEvent("answer", func(e Event) bool { return e.Kind == EventAnswered && e.TurnID == tn.ID })
	if e.Attempt != 1 || r.count(EventReturned, tn.ID) != 0 {
		t.Errorf("answered on attempt %d after %d hand-backs, want attempt 1 and none: events %+v", e.Attempt, r.count(EventReturned, tn.ID), r.snapshot())
	}
}

// silentCommits never answers a commit (its leader behind a cut for good)
// and passes every other call.
type silentCommits struct{ jetstream.KeyValue }

func (kv silentCommits) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if aCommit(value) {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return kv.KeyValue.Update(ctx, key, value, rev)
}

// TestUnansweredCommitIsHandedBackWithinItsBound: the rounds of a commit
// that is never answered stop at writeBudget (plus its last round) and
// the turn is handed back for its redelivery, rather than held.
func TestUnansweredCommitIsHandedBackWithinItsBound(t *testing.T) {
	r := newRig(t, 1, 1)
	startLoneBox(t, r, func(f *Fleet) { f.channels = silentCommits{f.channels} })
	client, _ := r.fleet("client")
	tn := newTurn("chan-silent-commit", "x")
	if _, err := client.Submit(r.ctx(), tn); err != nil {
		t.Fatal(err)
	}
	taken := r.waitEvent("take", func(e Event) bool { return e.Kind == EventTaken && e.TurnID == tn.ID })
	returned := r.waitEvent("hand-back", func(e Event) bool { return e.Kind == EventReturned && e.TurnID == tn.ID })
	if returned.Attempt != taken.Attempt {
		t.Errorf("handed back on attempt %d, want the taken one, %d", returned.Attempt, taken.Attempt)
	}
	if n := r.count(EventCommitted, tn.ID); n != 0 {
		t.Errorf("%d commits of a turn whose commit was never answered", n)
	}
}
