package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// blindReplies is the replies bucket as a frontend sees it while the meta
// leader is away: a watch is refused (503), or made but never delivers
// (its consumer lost); reads of a replica still answer.
type blindReplies struct {
	jetstream.KeyValue
	refuse bool

	mu      sync.Mutex
	watches int
}

func (b *blindReplies) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	b.mu.Lock()
	b.watches++
	b.mu.Unlock()
	if b.refuse {
		return nil, &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}
	}
	return deafWatcher{make(chan jetstream.KeyValueEntry)}, nil
}

type deafWatcher struct{ updates chan jetstream.KeyValueEntry }

func (w deafWatcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }
func (w deafWatcher) Stop() error                             { return nil }

// TestReplyReadBesideItsWatch: a committed reply reaches Ask and AwaitReply
// when the watch of its key never delivers or cannot be made (a partial
// cut's meta election, docs/fleet.md), read from a replica; on main before
// this, Ask failed at once on the refused watch and waited out its context
// on the deaf one.
func TestReplyReadBesideItsWatch(t *testing.T) {
	r := newRig(t, 3, 1)
	r.box("a", newRecorder())
	tests := []struct {
		name   string
		refuse bool
	}{
		{"watch never delivers", false},
		{"watch refused", true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client, _ := r.fleet(fmt.Sprintf("client-%d", i))
			blind := &blindReplies{KeyValue: client.replies, refuse: tc.refuse}
			client.replies = blind
			tn := newTurn(fmt.Sprintf("chan-blind-%d", i), "x")
			rep, _, err := client.Ask(ctx, tn)
			if err != nil || !rep.OK || rep.TurnID != tn.ID || rep.Box != "a" {
				t.Fatalf("Ask = %+v, %v; want a's committed reply", rep, err)
			}
			again, err := client.AwaitReply(ctx, tn.ID)
			if err != nil || again != rep {
				t.Fatalf("AwaitReply = %+v, %v; want %+v", again, err, rep)
			}
			if n := replyCount(t, client, tn.ID); n != 1 {
				t.Errorf("turn has %d replies, want 1", n)
			}
			blind.mu.Lock()
			defer blind.mu.Unlock()
			if blind.watches < 2 {
				t.Errorf("%d watches, want the one for Ask and the one for AwaitReply at least", blind.watches)
			}
		})
	}
}

// TestAwaitReplyRefusesAWildcard: a turn id is a key, never a pattern of
// other turns' replies.
func TestAwaitReplyRefusesAWildcard(t *testing.T) {
	r := newRig(t, 1, 1)
	client, _ := r.fleet("client")
	for _, id := range []string{"*", ">", "ab.*", ""} {
		if _, err := client.AwaitReply(r.ctx(), id); !errors.Is(err, ErrInvalid) {
			t.Errorf("AwaitReply(%q) = %v, want ErrInvalid", id, err)
		}
	}
}
