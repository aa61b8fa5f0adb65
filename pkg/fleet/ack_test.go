package fleet

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// heldAck is a delivered turn whose acknowledgement's confirmation the
// server never gives: DoubleAck blocks until the test ends. Ack (sent,
// not confirmed) records whether the turn's reply was stored by then.
type heldAck struct {
	jetstream.Msg
	f       *Fleet
	release chan struct{}
	waited  chan struct{} // closed when DoubleAck is called

	mu         sync.Mutex
	acks       int
	replyFirst bool
	once       sync.Once
}

func (h *heldAck) DoubleAck(ctx context.Context) error {
	h.once.Do(func() { close(h.waited) })
	<-h.release
	return h.Msg.DoubleAck(ctx)
}

func (h *heldAck) Ack() error {
	_, err := h.f.replies.Get(context.Background(), turnIDOf(h.Msg))
	h.mu.Lock()
	h.acks++
	h.replyFirst = err == nil
	h.mu.Unlock()
	return h.Msg.Ack()
}

func turnIDOf(m jetstream.Msg) string {
	var t Turn
	_ = json.Unmarshal(m.Data(), &t)
	return t.ID
}

// TestCommittedTurnDoesNotWaitForItsAck: a committed turn's ack is sent
// after its reply is stored and the turn is done at once: the box does not
// wait for the server's confirmation of the ack (a round trip of 1.5-2.8
// ms per turn at p50, docs/fleet.md, *Engine overhead*). Before, the box
// waited for it (DoubleAck) before the turn counted as committed.
func TestCommittedTurnDoesNotWaitForItsAck(t *testing.T) {
	r := newRig(t, 1, 1)
	client, _ := r.fleet("client")
	f, _ := r.fleet("a")
	b, err := NewBox(f, BoxOptions{Name: "a", Executor: newRecorder(), AckWait: testAckWait, OnEvent: r.record, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h := &heldAck{f: client, release: make(chan struct{}), waited: make(chan struct{})}
	defer close(h.release)
	var first sync.Once
	b.delivered = func(m jetstream.Msg) jetstream.Msg {
		var held jetstream.Msg = m
		first.Do(func() { h.Msg, held = m, h })
		return held
	}
	ctx := r.ctx()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	turn := newTurn("chan-ack", "1")
	committed := make(chan Event, 1)
	go func() {
		committed <- r.waitEvent("commit", func(e Event) bool { return e.Kind == EventCommitted && e.TurnID == turn.ID })
	}()
	if _, err := client.Submit(ctx, turn); err != nil {
		t.Fatal(err)
	}
	select {
	case <-committed:
	case <-h.waited:
		t.Fatal("the committed turn waited for its ack's confirmation")
	}
	h.mu.Lock()
	acks, replyFirst := h.acks, h.replyFirst
	h.mu.Unlock()
	if acks != 1 || !replyFirst {
		t.Fatalf("acks sent %d, reply stored before the ack %v; want 1 and true", acks, replyFirst)
	}
	// The ack reached the server: the partition's next turn is delivered
	// (one unacknowledged turn per partition) and commits on the first.
	rep, _, err := client.Ask(ctx, newTurn("chan-ack", "2"))
	if err != nil || rep.Generation != 2 {
		t.Fatalf("next turn: %+v, %v; want generation 2", rep, err)
	}
	if n := r.count(EventAnswered, turn.ID); n != 0 {
		t.Fatalf("the first turn was delivered again %d time(s): its ack was lost", n)
	}
}
