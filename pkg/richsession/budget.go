package richsession

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// DefaultReplyBudget bounds the reply packets the host holds at once: two
// packets at their bound. A packet reserves its length before its body is
// read (control.go), keeps its files' bytes until its answer is written
// (Outcome.Release), and waits, within its turn's deadline, while other
// packets hold the budget.
const DefaultReplyBudget = 2 * richproto.MaxPacketBytes

// replyBudget is a counting bound on reply packet bytes in flight.
type replyBudget struct {
	max int64
	log *slog.Logger

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced at each release
	waiting func(n int64) // test hook: a packet of n bytes waits
}

func newReplyBudget(max int64, log *slog.Logger, waiting func(int64)) *replyBudget {
	return &replyBudget{max: max, log: log, changed: make(chan struct{}), waiting: waiting}
}

// acquire takes n bytes, waiting while they do not fit, until ctx ends.
func (b *replyBudget) acquire(ctx context.Context, n int64) error {
	n = min(n, b.max)
	logged := false
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		used, changed, hook := b.used, b.changed, b.waiting
		b.mu.Unlock()
		if !logged {
			logged = true
			b.log.Info("reply packet waits for the host's reply budget", "bytes", n, "held", used, "budget", b.max)
			if hook != nil {
				hook(n)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("reply packet of %d bytes waited for the host's reply budget (%d of %d bytes held by other packets) until the turn ended: %w",
				n, used, b.max, context.Cause(ctx))
		}
	}
}

// release gives n bytes back.
func (b *replyBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= min(n, b.max)
	close(b.changed)
	b.changed = make(chan struct{})
}

// held is what the budget's packets hold now.
func (b *replyBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// ReplyBytesHeld is how much of the reply budget packets hold now.
func (k *Kind) ReplyBytesHeld() int64 { return k.replies.held() }
