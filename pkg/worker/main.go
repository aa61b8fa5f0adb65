package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Main is the whole worker process: it reads one turn (at most
// protocol.MaxTurnBytes) from stdin, runs it and writes exactly one reply
// object to stdout. It returns the exit code: 0 when the turn produced its
// reply (including the model-call limit reply), 1 with the generic failure
// reply otherwise; that reply names the failure's cause (a protocol.Cause
// constant) for the host's log.
func Main(ctx context.Context, stdin io.Reader, stdout io.Writer, opts Options) int {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		opts.Logger = log
	}
	reply, err := func() (protocol.Reply, error) {
		turn, err := protocol.DecodeTurn(stdin)
		if err != nil {
			reason := "invalid turn"
			if errors.Is(err, protocol.ErrTooLarge) {
				reason = "turn too large"
			}
			log.Error("turn refused", "reason", reason)
			return protocol.Reply{}, err
		}
		return Run(ctx, turn, opts)
	}()
	code := 0
	if err != nil {
		reply, code = protocol.Reply{OK: false, Text: FailedReplyText, Cause: failureCause(err)}, 1
	}
	out, merr := marshal(reply)
	if merr != nil {
		out, code = []byte(`{"ok":false,"text":"`+FailedReplyText+`","cause":"`+protocol.CauseInternal+`"}`), 1
	}
	if _, werr := stdout.Write(append(out, '\n')); werr != nil {
		log.Error("write reply failed", "category", failureCause(werr))
		return 1
	}
	return code
}
