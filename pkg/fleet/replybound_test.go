package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// samePartition returns a channel other than ch in ch's partition.
func samePartition(ch string, partitions int) string {
	for i := 0; ; i++ {
		other := fmt.Sprintf("%s-peer-%d", ch, i)
		if Partition(other, partitions) == Partition(ch, partitions) {
			return other
		}
	}
}

// maxReplyChars is the worker's bound on a final reply (100,000
// characters, pkg/protocol.MaxReplyChars): what a guest can make a turn
// answer.
const maxReplyChars = 100_000

// TestUnstorableReplyEndsTheTurn: a reply whose text passes the raw bound
// but whose stored JSON would not fit the replies bucket ends its turn
// with a failed reply, and the partition goes on: the channel's next turn
// and another channel of the same partition are answered. A reply of
// HTML characters is stored as it is (no HTML escaping inflates it).
func TestUnstorableReplyEndsTheTurn(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		wantOK  bool
		wantErr string
	}{
		// 100,000 '<' was 600,000 bytes stored (encoding/json's \u003c).
		{"html characters stored as they are", strings.Repeat("<", maxReplyChars), true, ""},
		// A control character is stored as \u0001: six bytes each.
		{"control characters over the stored bound", strings.Repeat("\x01", maxReplyChars), false, ErrorFailed},
	}
	const partitions = 2
	r := newRig(t, 3, partitions)
	var mu sync.Mutex
	long := map[string]string{} // turn id -> its reply text
	stub := &StubExecutor{Duration: time.Millisecond}
	r.box("a", ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		mu.Lock()
		text, ok := long[in.Turn.ID]
		mu.Unlock()
		if ok {
			return Output{OK: true, Text: text}, nil
		}
		return stub.Execute(ctx, in)
	}))
	client, _ := r.fleet("client")
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ch := fmt.Sprintf("chan-long-%d", i)
			tn := newTurn(ch, "answer long")
			mu.Lock()
			long[tn.ID] = tc.text
			mu.Unlock()
			rep, _, err := client.Ask(ctx, tn)
			if err != nil {
				t.Fatalf("long reply: %v", err)
			}
			if rep.OK != tc.wantOK || rep.Error != tc.wantErr {
				t.Fatalf("long reply: ok %v error %q, want ok %v error %q", rep.OK, rep.Error, tc.wantOK, tc.wantErr)
			}
			if tc.wantOK && rep.Text != tc.text {
				t.Fatalf("long reply text: %d bytes, want the %d sent", len(rep.Text), len(tc.text))
			}
			if n := replyCount(t, client, tn.ID); n != 1 {
				t.Errorf("long turn has %d replies, want 1", n)
			}
			for _, next := range []Turn{newTurn(ch, "next"), newTurn(samePartition(ch, partitions), "neighbour")} {
				rep, _, err := client.Ask(ctx, next)
				if err != nil || !rep.OK {
					t.Fatalf("turn on %s after the long one: reply %+v, %v", next.Channel, rep, err)
				}
			}
		})
	}
}

// refusingReplies refuses every write of one reply key (a reply the
// replies bucket keeps refusing).
type refusingReplies struct {
	jetstream.KeyValue
	key string
}

func (r refusingReplies) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if key == r.key {
		return 0, errors.New("refused by the test")
	}
	return r.KeyValue.Create(ctx, key, value, opts...)
}

// TestMaxAttemptsHoldsOnEveryPath: a turn that cannot get past the
// cluster (a committed turn whose reply the bucket refuses on every
// redelivery; a channel state no box can read) is given up after
// MaxAttempts deliveries without running, answered as failed when a
// reply can be stored, and its partition takes its next turns.
func TestMaxAttemptsHoldsOnEveryPath(t *testing.T) {
	const partitions, maxAttempts = 2, 2
	tests := []struct {
		name string
		// prepare breaks the turn's way through the cluster.
		prepare func(t *testing.T, client *Fleet, tn Turn)
		refuse  bool   // the replies bucket refuses the turn's key
		wantErr string // the turn's reply ("": none can be stored)
		// sameChannel: the channel's next turn is answered too.
		sameChannel bool
		// atOnce: given up on its first delivery (no redelivery can
		// help: a state that does not decode needs the repair command).
		atOnce bool
	}{
		{"reply refused after the commit", func(t *testing.T, client *Fleet, tn Turn) {
			st := ChannelState{Channel: tn.Channel, Generation: 1, LastTurn: tn.ID,
				LastReply: &Reply{TurnID: tn.ID, OK: true, Text: "from the state", Box: "gone", Generation: 1}}
			data, _ := json.Marshal(st)
			if _, err := client.channels.Create(context.Background(), channelKey(tn.Channel), data); err != nil {
				t.Fatal(err)
			}
		}, true, "", true, false},
		{"channel state unreadable", func(t *testing.T, client *Fleet, tn Turn) {
			if _, err := client.channels.Put(context.Background(), channelKey(tn.Channel), []byte("not a state")); err != nil {
				t.Fatal(err)
			}
		}, false, ErrorFailed, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 1, partitions)
			client, _ := r.fleet("client")
			ctx := r.ctx()
			tn := newTurn("chan-stuck", "x")
			tc.prepare(t, client, tn)
			var mu sync.Mutex
			runs := map[string]int{}
			stub := &StubExecutor{Duration: time.Millisecond}
			f, _ := r.fleet("a")
			if tc.refuse {
				f.replies = refusingReplies{KeyValue: f.replies, key: tn.ID}
			}
			b, err := NewBox(f, BoxOptions{Name: "a", AckWait: testAckWait, OnEvent: r.record, Logger: quiet, MaxAttempts: maxAttempts,
				Executor: ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
					mu.Lock()
					runs[in.Turn.ID]++
					mu.Unlock()
					return stub.Execute(ctx, in)
				})})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Stop)
			if _, err := client.Submit(ctx, tn); err != nil {
				t.Fatal(err)
			}
			given := r.waitEvent("the stuck turn given up", func(e Event) bool { return e.TurnID == tn.ID && e.Kind == EventGivenUp })
			want := uint64(maxAttempts + 1)
			if tc.atOnce {
				want = 1
			}
			if given.Attempt != want {
				t.Errorf("given up at attempt %d, want %d", given.Attempt, want)
			}
			if tc.wantErr != "" {
				rep, err := client.AwaitReply(ctx, tn.ID)
				if err != nil || rep.Error != tc.wantErr || rep.OK {
					t.Errorf("stuck turn's reply %+v, %v; want a %q reply", rep, err, tc.wantErr)
				}
			}
			next := []Turn{newTurn(samePartition(tn.Channel, partitions), "neighbour")}
			if tc.sameChannel {
				next = append(next, newTurn(tn.Channel, "next"))
			}
			for _, nt := range next {
				rep, _, err := client.Ask(ctx, nt)
				if err != nil || !rep.OK {
					t.Fatalf("turn on %s after the stuck one: reply %+v, %v", nt.Channel, rep, err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if runs[tn.ID] != 0 {
				t.Errorf("the stuck turn ran %d times, want 0", runs[tn.ID])
			}
		})
	}
}

// TestStoredSize: values are measured as stored: JSON without HTML
// escaping, a control character six bytes.
func TestStoredSize(t *testing.T) {
	tests := []struct {
		text string
		want int // encoded, quotes included
	}{
		{"abc", 5},
		{"<>&", 5},
		{"\x01", 8},
		{"é", 4},
		{"\u2028", 8},
	}
	for _, tc := range tests {
		got, err := encodeJSON(tc.text)
		if err != nil || len(got) != tc.want {
			t.Errorf("encodeJSON(%q) = %q (%d bytes), %v; want %d bytes", tc.text, got, len(got), err, tc.want)
		}
	}
}

// padded returns s with its text padded (control characters, then
// letters) so that it encodes to exactly n bytes.
func padded[T any](t *testing.T, v T, n int, set func(*T, string)) T {
	t.Helper()
	set(&v, "")
	base, err := encodeJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	pad := n - len(base)
	set(&v, strings.Repeat("\x01", pad/6)+strings.Repeat("a", pad%6))
	if got, _ := encodeJSON(v); len(got) != n {
		t.Fatalf("padded value is %d bytes, want %d", len(got), n)
	}
	return v
}

// TestStoredBoundRefusesOneByteOver: a reply and a channel state exactly
// at their stored bound are stored by the cluster (the bound leaves room
// for the write's headers); one byte over is refused before the cluster.
func TestStoredBoundRefusesOneByteOver(t *testing.T) {
	r := newRig(t, 1, 1)
	f, nc := r.fleet("a")
	ctx := r.ctx()
	replyLimit := valueLimit(MaxReplyBytes, nc.MaxPayload())
	stateLimit := valueLimit(MaxStateBytes, nc.MaxPayload())
	setReply := func(r *Reply, s string) { r.Text = s }
	setState := func(st *ChannelState, s string) { st.LastReply.Text = s }
	tests := []struct {
		name   string
		over   int // bytes over the bound
		reply  bool
		stored bool
	}{
		{"reply at the bound", 0, true, true},
		{"reply one byte over", 1, true, false},
		{"state at the bound", 0, false, true},
		{"state one byte over", 1, false, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("%032x", i+1)
			var err error
			if tc.reply {
				rep := padded(t, Reply{TurnID: id, OK: true, Box: "a", Generation: 1, Seq: 1}, replyLimit+tc.over, setReply)
				err = f.putReply(ctx, rep)
				got, gerr := f.Reply(ctx, id)
				if stored := gerr == nil; stored != tc.stored || (stored && got.Text != rep.Text) {
					t.Errorf("reply stored %v (%v), want %v", stored, gerr, tc.stored)
				}
			} else {
				ch := "chan-bound-" + id
				st := padded(t, ChannelState{Channel: ch, Generation: 1, LastTurn: id, LastReply: &Reply{TurnID: id, OK: true}}, stateLimit+tc.over, setState)
				_, err = f.putState(ctx, channelKey(ch), st, 0)
				got, rev, gerr := f.Channel(ctx, ch)
				if stored := gerr == nil && rev != 0; stored != tc.stored || (stored && got.LastReply.Text != st.LastReply.Text) {
					t.Errorf("state stored %v (%v), want %v", stored, gerr, tc.stored)
				}
			}
			if tc.stored && err != nil {
				t.Errorf("at the bound: %v", err)
			}
			if !tc.stored && !errors.Is(err, ErrInvalid) {
				t.Errorf("over the bound: %v, want ErrInvalid", err)
			}
		})
	}
}
