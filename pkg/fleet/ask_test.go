package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lossyPublisher loses the first drop publishes before the cluster, then
// the acks of the next lose ones (the turn is stored, its publisher never
// hears so).
type lossyPublisher struct {
	publisher
	drop, lose int
	// retried is closed at the second publish.
	retried chan struct{}

	mu    sync.Mutex
	calls int
}

func (p *lossyPublisher) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.mu.Unlock()
	if n == 2 {
		close(p.retried)
	}
	if n <= p.drop {
		return nil, nats.ErrTimeout
	}
	ack, err := p.publisher.PublishMsg(ctx, msg, opts...)
	if err == nil && n <= p.drop+p.lose {
		return nil, nats.ErrTimeout
	}
	return ack, err
}

// refusingPublisher: the stream refuses every turn (not retried).
type refusingPublisher struct{}

func (refusingPublisher) PublishMsg(context.Context, *nats.Msg, ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return nil, &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}
}

// TestAskSurvivesALostPublishAck: a publish whose ack is lost (or that
// never reached the cluster) is retried under the same turn id, one stream
// message whatever the retries, and Ask answers with the committed reply
// rather than failing a turn that committed.
func TestAskSurvivesALostPublishAck(t *testing.T) {
	tests := []struct {
		name       string
		drop, lose int
	}{
		{"ack lost once", 0, 1},
		{"every ack lost", 0, 1 << 20},
		{"two publishes lost before the cluster", 2, 0},
	}
	r := newRig(t, 3, 1)
	var mu sync.Mutex
	gates := map[string]chan struct{}{} // channel -> its publisher's retried
	rec := newRecorder()
	// A turn runs only once its publisher retried: the retry is made
	// whatever the machine's speed, and the reply comes after it.
	r.box("a", ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		mu.Lock()
		gate := gates[in.Turn.Channel]
		mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
			return Output{}, ctx.Err()
		}
		return rec.Execute(ctx, in)
	}))
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client, _ := r.fleet(fmt.Sprintf("client-%d", i))
			lossy := &lossyPublisher{publisher: client.pub, drop: tc.drop, lose: tc.lose, retried: make(chan struct{})}
			client.pub = lossy
			tn := newTurn(fmt.Sprintf("chan-ask-%d", i), "x")
			mu.Lock()
			gates[tn.Channel] = lossy.retried
			mu.Unlock()
			rep, sub, err := client.Ask(ctx, tn)
			if err != nil || !rep.OK || rep.TurnID != tn.ID {
				t.Fatalf("Ask = %+v, %v; want the committed reply", rep, err)
			}
			// A retry after a lost ack finds the turn stored.
			if wantDup := tc.lose == 1; sub.Duplicate != wantDup {
				t.Errorf("submitted %+v, want duplicate %v", sub, wantDup)
			}
			r.waitCommitted([]Turn{tn})
			if n := r.count(EventCommitted, tn.ID); n != 1 {
				t.Errorf("turn committed %d times, want 1", n)
			}
			if n := replyCount(t, client, tn.ID); n != 1 {
				t.Errorf("turn has %d replies, want 1", n)
			}
			lossy.mu.Lock()
			defer lossy.mu.Unlock()
			if lossy.calls < 2 {
				t.Errorf("published %d times, want a retry", lossy.calls)
			}
		})
	}
	t.Run("refused by the stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		client, _ := r.fleet("client-refused")
		client.pub = refusingPublisher{}
		_, _, err := client.Ask(ctx, newTurn("chan-refused", "x"))
		if apiErr := (*jetstream.APIError)(nil); !errors.As(err, &apiErr) {
			t.Fatalf("Ask = %v, want the stream's refusal", err)
		}
	})
	// One stream message per turn, however often each was published.
	s, err := r.c.Connect("observer").JetStream()
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.StreamInfo(TurnsStream)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(tests)) {
		t.Errorf("turns stream holds %d messages, want %d", info.State.Msgs, len(tests))
	}
}
