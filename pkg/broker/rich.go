package broker

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/hosttool"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
)

// A rich channel broker's routes are pkg/broker/richroute's; what its
// credential routes (host tools, MCP) ask of the bound turn, and what the
// rich routes borrow of the broker (richHost), is here.

// callIdentity is the identity host tools get: a rich broker's bound turn,
// else the policy's.
func (b *Broker) callIdentity() hosttool.Identity {
	if b.rich != nil {
		if bd, ok := b.rich.Bound(); ok {
			return hosttool.Identity{TurnID: bd.Bind.Turn.ID, Identity: bd.Bind.Identity}
		}
	}
	return b.identity
}

// richCallContext ties a rich call to its bound turn: it ends at revoke.
func (b *Broker) richCallContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if b.rich == nil {
		return ctx, func() {}
	}
	return b.rich.CallContext(ctx)
}

// toolResult splits an exec or http tool's output. Only a rich broker
// knows private exchanges: a sealed turn has one reader and no history, so
// its output stays as it always was.
func (b *Broker) toolResult(out []byte) (json.RawMessage, string, error) {
	if b.rich == nil {
		return hosttool.Result(out), "", nil
	}
	return hosttool.SplitPrivate(out, b.callIdentity().PrincipalID)
}

// richHost lends the broker's error table, budgets and credentials to its
// rich routes (richroute.Host).
type richHost struct{ b *Broker }

func (h richHost) Status(err error) (int, string)               { return status(err) }
func (h richHost) Interrupted(r *http.Request, err error) error { return h.b.interrupted(r, err) }
func (h richHost) RefusalsSpent() bool                          { return h.b.refusals.Load() >= MaxRefusals }
func (h richHost) Refusal()                                     { h.b.refusal() }
func (h richHost) Unread()                                      { h.b.unread.Add(1) }
func (h richHost) LoadCredential(name string) (credential.Secret, error) {
	return h.b.loadCredential(name)
}
func (h richHost) Secrets(call []credential.Secret) []credential.Secret { return h.b.allSecrets(call) }

func (h richHost) CallsLeft(max int) int {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	return max - h.b.calls
}

func (h richHost) TakeCall(max int) bool {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if h.b.calls >= max {
		return false
	}
	h.b.calls++
	return true
}

func (h richHost) NewTurn() {
	h.b.mu.Lock()
	h.b.calls = 0
	h.b.mu.Unlock()
	h.b.refusals.Store(0)
}
