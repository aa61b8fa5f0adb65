package fleet

import (
	"context"
	"fmt"
	"time"
)

// StubTurn is the stub turn's fixed duration (DESIGN.md section 17).
const StubTurn = 200 * time.Millisecond

// StubExecutor stands in for a container so that a benchmark measures the
// engine, not Docker: it waits Duration (StubTurn when zero), answers with
// the turn id and appends the turn id to the channel's workspace, so a test
// reading a workspace sees every committed turn of the channel in order.
// The host can select it only in a binary built with the fleetstub tag.
type StubExecutor struct {
	Duration time.Duration
}

// Execute waits and answers.
func (s StubExecutor) Execute(ctx context.Context, in Input) (Output, error) {
	d := s.Duration
	if d == 0 {
		d = StubTurn
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return Output{}, context.Cause(ctx)
	}
	ws, err := in.Restore(ctx)
	if err != nil {
		return Output{}, err
	}
	return Output{OK: true, Text: fmt.Sprintf("stub reply to %s", in.Turn.ID), Workspace: append(ws, in.Turn.ID+"\n"...)}, nil
}
