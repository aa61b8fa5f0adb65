package runner

import (
	"context"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"io"
	"log/slog"
	"runtime/debug"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Main is `sandbox-worker precheck`: one job on stdin, one result line on
// stdout. It answers 0 with a result (an error result included), 2 when it
// could not read a valid job or write its answer.
func Main(ctx context.Context, stdin io.Reader, stdout io.Writer, broker Broker, log *slog.Logger) int {
	data, err := protocol.ReadBounded(stdin, precheck.MaxJobBytes)
	if err != nil {
		log.Error("precheck job unreadable", "reason", err.Error())
		return 2
	}
	var job precheck.Job
	if err := protocol.DecodeStrict(data, &job); err != nil {
		log.Error("precheck job refused", "reason", err.Error())
		return 2
	}
	if err := job.Validate(); err != nil {
		log.Error("precheck job refused", "reason", err.Error())
		return 2
	}
	// The collector works harder near the heap bound, so the watchdog
	// sees live memory, not garbage; the container's limit stays above.
	debug.SetMemoryLimit(job.MaxHeapBytes)
	res := Run(ctx, job, broker, log)
	out, err := precheck.Encode(res)
	if err != nil {
		log.Error("precheck result not encodable", "reason", err.Error())
		return 2
	}
	if _, err := stdout.Write(out); err != nil {
		log.Error("precheck result not written", "reason", err.Error())
		return 2
	}
	attrs := []any{"wake", res.Wake}
	if res.Kind != "" {
		attrs = []any{"error_kind", res.Kind}
	}
	log.Info("precheck done", attrs...)
	return 0
}
