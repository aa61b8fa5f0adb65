package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Audit is what a run of turns left committed: the fault harness and the
// tests count lost, duplicated and reordered commits with it.
type Audit struct {
	Turns int
	// Lost: submitted turns without a reply.
	Lost []string
	// Overwritten: turns whose reply key holds more than one value.
	Overwritten []string
	// Reordered: turns committed at a generation not above their channel's
	// previous turn's (in submission order).
	Reordered []string
	// ExtraCommits counts commits beyond one per replied turn, from each
	// channel's final generation (the audited turns must be the only ones
	// on their channels).
	ExtraCommits int
	// Failed counts replies carrying an error kind.
	Failed int
	// DoubleRuns counts runs beyond one per committed turn, as the
	// claims recorded them (Reply.Runs): execution is at least once, and
	// this says how often it was more.
	DoubleRuns int
}

// Clean reports an audit with nothing lost, duplicated or reordered.
func (a Audit) Clean() bool {
	return len(a.Lost) == 0 && len(a.Overwritten) == 0 && len(a.Reordered) == 0 && a.ExtraCommits == 0
}

func (a Audit) String() string {
	return fmt.Sprintf("%d turns: %d lost, %d overwritten, %d reordered, %d extra commits, %d failed, %d double runs",
		a.Turns, len(a.Lost), len(a.Overwritten), len(a.Reordered), a.ExtraCommits, a.Failed, a.DoubleRuns)
}

// Audit checks submitted (each channel's turns in submission order)
// against the replies and channel states.
func (f *Fleet) Audit(ctx context.Context, submitted []Turn) (Audit, error) {
	a := Audit{Turns: len(submitted)}
	lastGen := map[string]uint64{}
	replied := map[string]uint64{}
	var order []string
	for _, t := range submitted {
		if _, seen := lastGen[t.Channel]; !seen {
			order = append(order, t.Channel)
			lastGen[t.Channel] = 0
		}
		hist, err := f.replies.History(ctx, t.ID)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			a.Lost = append(a.Lost, t.ID)
			continue
		}
		if err != nil {
			return a, fmt.Errorf("audit: reply of %s: %w", t.ID, err)
		}
		if len(hist) > 1 {
			a.Overwritten = append(a.Overwritten, t.ID)
		}
		r, err := decodeReply(hist[len(hist)-1].Value())
		if err != nil {
			return a, fmt.Errorf("audit: reply of %s: %w", t.ID, err)
		}
		if r.Runs > 1 {
			a.DoubleRuns += int(r.Runs - 1)
		}
		if r.Error != "" {
			a.Failed++
			if r.Generation == 0 {
				// Given up without a commit (EventGivenUp): no place in
				// the channel's order.
				continue
			}
		}
		if r.Generation <= lastGen[t.Channel] {
			a.Reordered = append(a.Reordered, t.ID)
		}
		lastGen[t.Channel] = max(lastGen[t.Channel], r.Generation)
		replied[t.Channel]++
	}
	for _, ch := range order {
		st, _, err := f.Channel(ctx, ch)
		if err != nil {
			return a, fmt.Errorf("audit: channel state: %w", err)
		}
		if st.Generation > replied[ch] {
			a.ExtraCommits += int(st.Generation - replied[ch])
		}
	}
	return a, nil
}
