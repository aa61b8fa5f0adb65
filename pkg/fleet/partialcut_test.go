package fleet

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// unreachableKV is a bucket whose leader this box cannot reach (a partial
// cut: its server still routes to the meta leader, not to this stream's
// leader): every call waits out its context.
type unreachableKV struct{ jetstream.KeyValue }

func (unreachableKV) Get(ctx context.Context, _ string) (jetstream.KeyValueEntry, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (unreachableKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (unreachableKV) Update(ctx context.Context, _ string, _ []byte, _ uint64) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (unreachableKV) Create(ctx context.Context, _ string, _ []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestBoxStepsBackFromLeadersItCannotReach: box a reaches the meta leader
// but not the channels bucket's leader, or not the replies bucket's (the
// partial cut); it steps back
// from its partitions on its health probe, before its turns' failures
// add up to maxClusterFailures, and box b commits the turn.
func TestBoxStepsBackFromLeadersItCannotReach(t *testing.T) {
	for _, tc := range []struct {
		bucket string
		cut    func(*Fleet)
		box    string // the box whose reply the client gets ("": any)
	}{
		{"channels", func(f *Fleet) { f.channels = unreachableKV{f.channels} }, "b"},
		// A take reads the turn's reply first and a commit writes it:
		// without the replies bucket's leader box a's turn is never
		// answered unless its probe asks that leader too and it steps
		// back (then its committed reply is published by b, or b runs
		// the turn).
		{"replies", func(f *Fleet) { f.replies = unreachableKV{f.replies} }, ""},
	} {
		t.Run(tc.bucket, func(t *testing.T) { stepsBackFrom(t, tc.cut, tc.box) })
	}
}

func stepsBackFrom(t *testing.T, cut func(*Fleet), box string) {
	r := newRig(t, 1, 2)
	fa, _ := r.fleet("a")
	cut(fa)
	start := func(name string, f *Fleet) {
		b, err := NewBox(f, BoxOptions{Name: name, Executor: newRecorder(), AckWait: testAckWait, OnEvent: r.record, Logger: quiet, Peers: []string{"a", "b"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(r.ctx()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Stop)
	}
	start("a", fa)
	fb, _ := r.fleet("b")
	start("b", fb)
	client, _ := r.fleet("client")
	ctx := r.ctx()
	tn := newTurn(homeChannel(t, "a", []string{"a", "b"}, 2), "x")
	rep, _, err := client.Ask(ctx, tn)
	if err != nil || !rep.OK || box != "" && rep.Box != box {
		t.Fatalf("reply %+v, %v: want an answer (from box %q)", rep, err, box)
	}
	if n := r.countBox(EventReturned, "a"); n >= maxClusterFailures {
		t.Errorf("box a returned %d turns before stepping back, want fewer than %d (its probe should have stepped it back)", n, maxClusterFailures)
	}
}

// homeChannel is a channel whose partition's home box is box.
func homeChannel(t *testing.T, box string, peers []string, partitions int) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		ch := "chan-home-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if peers[Partition(ch, partitions)%len(peers)] == box {
			return ch
		}
	}
	t.Fatal("no channel homed on " + box)
	return ""
}

func (r *rig) countBox(kind EventKind, box string) int {
	n := 0
	for _, e := range r.snapshot() {
		if e.Kind == kind && e.Box == box {
			n++
		}
	}
	return n
}
