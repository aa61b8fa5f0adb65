package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// StubTurn is the stub turn's fixed duration (docs/fleet.md).
const StubTurn = 200 * time.Millisecond

// StubExecutor stands in for a container so that a benchmark measures the
// engine, not Docker: it waits Duration (StubTurn when zero), answers with
// the turn id and appends the turn id to the channel's workspace, so a test
// reading a workspace sees every committed turn of the channel in order.
// The host can select it only in a binary built with the fleetstub tag.
// Like a real box it keeps each channel's workspace locally and restores
// the committed one only when its copy is older (another box committed
// since).
type StubExecutor struct {
	Duration time.Duration

	mu    sync.Mutex
	local map[string]stubCopy // by channel
}

type stubCopy struct {
	name string // the snapshot it is
	data []byte
}

// Execute waits and answers.
func (s *StubExecutor) Execute(ctx context.Context, in Input) (Output, error) {
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
	s.mu.Lock()
	c, ok := s.local[in.Turn.Channel]
	s.mu.Unlock()
	if !ok || c.name != in.Snapshot {
		ws, err := in.Restore(ctx)
		if err != nil {
			return Output{}, err
		}
		c = stubCopy{name: in.Snapshot, data: ws}
	}
	next := append(append([]byte(nil), c.data...), in.Turn.ID+"\n"...)
	s.mu.Lock()
	if s.local == nil {
		s.local = map[string]stubCopy{}
	}
	// Valid if this commit lands; if not, the next turn's Snapshot names
	// another box's commit and the copy is restored.
	s.local[in.Turn.Channel] = stubCopy{name: in.NextSnapshot, data: next}
	s.mu.Unlock()
	return Output{OK: true, Text: fmt.Sprintf("stub reply to %s", in.Turn.ID), Workspace: next}, nil
}
