package fleet

import (
	"context"
	"testing"
	"time"
)

// TestDeadlineIgnoresClockSkew: a box whose clock is two minutes ahead of
// the frontend's runs a turn with a minute to go (the deadline travels as
// a duration, aged on the engine's clock), and a box two minutes behind
// still bounds the run by that minute, not by three.
func TestDeadlineIgnoresClockSkew(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Minute, -2 * time.Minute} {
		t.Run(skew.String(), func(t *testing.T) {
			r := newRig(t, 1, 1)
			bound := make(chan time.Duration, 1)
			r.boxWith(BoxOptions{Name: "a", Now: func() time.Time { return time.Now().Add(skew) },
				Executor: ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
					d, _ := ctx.Deadline()
					bound <- time.Until(d)
					return Output{OK: true, Text: "ran"}, nil
				})})
			client, _ := r.fleet("client")
			tn := newTurn("chan-skew", "x") // a minute to go on the frontend's clock
			rep, _, err := client.Ask(r.ctx(), tn)
			if err != nil || !rep.OK {
				t.Fatalf("reply %+v, %v: want the turn run", rep, err)
			}
			if got := <-bound; got > time.Minute {
				t.Errorf("the run was bounded by %s, want at most the turn's minute", got)
			}
		})
	}
}
