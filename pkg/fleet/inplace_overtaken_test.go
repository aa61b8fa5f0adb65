package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// bigWorkspace answers with a snapshot too large to commit inline: it is
// uploaded, and the commit names it.
type bigWorkspace struct{}

func (bigWorkspace) Execute(ctx context.Context, in Input) (Output, error) {
	return Output{OK: true, Text: "done", Workspace: bytes.Repeat([]byte("w"), InlineWorkspaceBytes+1)}, nil
}

// TestLandedCommitOvertakenKeepsItsSnapshot: a commit that landed, its
// answer lost, and the key moved on (the next turn's claim on top of it)
// before the box's next round: the box cannot tell its commit from none,
// so it must not delete the snapshot the committed state names (found in
// review; the box deleted it, as if refused by the fence).
func TestLandedCommitOvertakenKeepsItsSnapshot(t *testing.T) {
	r := newRig(t, 1, 1)
	var mu sync.Mutex
	var committedWS string
	landedThenClaimed := func(kv jetstream.KeyValue, key string, value []byte, rev uint64) error {
		newRev, err := kv.Update(context.Background(), key, value, rev)
		if err != nil {
			return err
		}
		var st ChannelState
		if err := json.Unmarshal(value, &st); err != nil {
			return err
		}
		mu.Lock()
		committedWS = st.Workspace
		mu.Unlock()
		next := claimOf(st, Turn{ID: "next-turn", Channel: st.Channel}, st.LastSeq+1, "c")
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		_, err = kv.Update(context.Background(), key, data, newRev)
		return err
	}
	startLoneBoxWith(t, r, bigWorkspace{}, func(f *Fleet) {
		f.channels = &lostAnswerKV{KeyValue: f.channels, lose: aCommit, land: landedThenClaimed}
	})
	client, _ := r.fleet("client")
	tn := newTurn("chan-moved-on", "x")
	if _, err := client.Submit(r.ctx(), tn); err != nil {
		t.Fatal(err)
	}
	e := r.waitEvent("settled", func(e Event) bool {
		return e.TurnID == tn.ID && (e.Kind == EventRefused || e.Kind == EventReturned || e.Kind == EventCommitted)
	})
	st, _, err := client.Channel(r.ctx(), tn.Channel)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ws := committedWS
	mu.Unlock()
	if ws == "" || st.Workspace != ws {
		t.Fatalf("setup: stored state names %q, the landed commit %q", st.Workspace, ws)
	}
	if _, err := client.ws.Get(r.ctx(), ws); err != nil {
		t.Fatalf("the channel's committed snapshot %q is gone after the box's %s event: %v", ws, e.Kind, err)
	}
}
