package richsession

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestReplyBudget: a packet that fits takes its bytes at once; one that
// does not waits until bytes are given back, or fails when its turn ends,
// saying what held the budget; a packet over the whole budget takes all.
func TestReplyBudget(t *testing.T) {
	waited := make(chan int64, 1)
	b := newReplyBudget(100, slog.New(slog.DiscardHandler), func(n int64) { waited <- n })
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx, 50) }()
	if n := <-waited; n != 50 {
		t.Fatalf("a packet of %d bytes waited, want 50", n)
	}
	b.release(60)
	if err := <-got; err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if h := b.held(); h != 50 {
		t.Errorf("held %d, want 50", h)
	}

	cctx, cancel := context.WithCancelCause(ctx)
	go func() { got <- b.acquire(cctx, 60) }()
	<-waited
	cause := errors.New("turn over")
	cancel(cause)
	err := <-got
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "(50 of 100 bytes held by other packets)") {
		t.Errorf("err = %v, want the turn's cause and what held the budget", err)
	}
	b.release(50)

	if err := b.acquire(ctx, 1000); err != nil { // clamped to the whole budget
		t.Fatal(err)
	}
	if h := b.held(); h != 100 {
		t.Errorf("held %d after a packet over the budget, want 100", h)
	}
	b.release(1000)
	if h := b.held(); h != 0 {
		t.Errorf("held %d after every release, want 0", h)
	}
}
