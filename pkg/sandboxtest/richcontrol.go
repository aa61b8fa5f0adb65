package sandboxtest

import (
	"context"
	"strings"
	"sync"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// RichControl stands in for a rich session's broker and worker (the
// control a rich session kind's tests hand it): the worker is ready
// unless NotReady (then Status fails with BrokerErr), and it answers each
// turn with the conversation it has seen on that socket (a session's
// memory).
type RichControl struct {
	mu        sync.Mutex
	NotReady  bool
	BrokerErr error
	binds     []policy.Bind
	seen      map[string][]string
	TurnFn    func(ctx context.Context, b policy.Bind) (*richproto.Result, error)
	// Reserve, when set, is the packet length each turn reserves from the
	// host's reply budget before TurnFn runs (as the HTTP control does
	// before it reads a packet).
	Reserve int64
}

func (f *RichControl) Status(ctx context.Context, socket string) (policy.ControlStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.NotReady {
		return policy.ControlStatus{}, f.BrokerErr
	}
	return policy.ControlStatus{Ready: true, Polling: true}, nil
}

func (f *RichControl) Turn(ctx context.Context, socket string, b policy.Bind, reserve func(ctx context.Context, n int64) error) (*richproto.Result, error) {
	f.mu.Lock()
	f.binds = append(f.binds, b)
	if f.seen == nil {
		f.seen = map[string][]string{}
	}
	f.seen[socket] = append(f.seen[socket], b.Turn.Text)
	history := strings.Join(f.seen[socket], "|")
	fn, n := f.TurnFn, f.Reserve
	f.mu.Unlock()
	if n > 0 {
		if err := reserve(ctx, n); err != nil {
			return nil, err
		}
	}
	if fn != nil {
		return fn(ctx, b)
	}
	return &richproto.Result{TurnID: b.Turn.ID, OK: true, Text: history}, nil
}

// BindList is every bind the turns carried, in order.
func (f *RichControl) BindList() []policy.Bind {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]policy.Bind(nil), f.binds...)
}
