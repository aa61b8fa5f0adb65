package fleet

import (
	"context"
	"errors"
)

// Executor runs one taken turn on this box: the host plugs its sealed-turn
// kind in; StubExecutor measures the engine alone.
type Executor interface {
	Execute(ctx context.Context, in Input) (Output, error)
}

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, in Input) (Output, error)

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, in Input) (Output, error) { return f(ctx, in) }

// Input is a taken turn and its channel's committed workspace.
type Input struct {
	Turn Turn
	Seq  uint64 // the turn's sequence in TurnsStream
	// Generation is the channel's committed generation (0: no turn yet).
	Generation uint64
	// Snapshot names the committed workspace snapshot ("" before the
	// first) and NextSnapshot the name this turn's snapshot is committed
	// under if its commit lands. Names are unique per commit, so an
	// executor whose local copy is not Snapshot calls Restore.
	Snapshot, NextSnapshot string
	// Restore reads the committed snapshot (nil before the first).
	Restore func(ctx context.Context) ([]byte, error)
	// Attempt counts deliveries of this turn (1 on the first).
	Attempt uint64
	// Mode is the channel's mode as the fleet knew it when the turn was
	// taken (Mode "" when no box ever set one): the executor runs the
	// turn under it, not under its own box's idea of the channel.
	Mode ChannelMode
}

// Output is what a turn commits: its reply and, unless nil, the channel's
// new workspace snapshot (nil keeps the committed one).
type Output struct {
	OK        bool
	Text      string
	Workspace []byte
}

// ErrElsewhere: this box cannot run the turn now (it is stopping); the
// turn is handed back to the stream uncommitted, for this box's successor
// on the partition.
var ErrElsewhere = errors.New("run the turn on another box")

// TurnError is an executor's failure with the generic kind its reply
// carries (Error*); any other error commits ErrorFailed.
type TurnError struct {
	Kind string
	Err  error
}

func (e *TurnError) Error() string { return e.Kind + ": " + e.Err.Error() }
func (e *TurnError) Unwrap() error { return e.Err }

func errorKind(err error) string {
	var te *TurnError
	if errors.As(err, &te) && te.Kind != "" {
		return te.Kind
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrorDeadline
	}
	return ErrorFailed
}
