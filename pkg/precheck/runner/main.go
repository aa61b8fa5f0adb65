package runner

import (
	"context"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

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
	// The collector's soft limit sits a third above the watchdog's bound
	// (the host puts that bound at 3/5 of the container's memory, so the
	// limit stays below the container's): the heap grows past the bound at
	// the collector's ordinary pace and is stopped there. A limit at the
	// bound itself made the collector run without pause once the live heap
	// neared it, and a CPU-starved container then crawled to its deadline.
	debug.SetMemoryLimit(job.MaxHeapBytes / 3 * 4)
	start := time.Now()
	res := Run(ctx, job, broker, log)
	out, err := precheck.Encode(res)
	if err != nil {
		log.Error("precheck result not encodable", "reason", err.Error())
		return 2
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	attrs := []any{"wake", res.Wake}
	if res.Kind != "" {
		attrs = []any{"error_kind", res.Kind}
	}
	// What the script cost: time, peak-ish heap and collections (numbers
	// only, never a payload). Logged before the result line: that line is
	// the runner's last act, and the host cleans up as soon as it has it
	// (docs/prechecks.md).
	attrs = append(attrs, "duration_ms", time.Since(start).Milliseconds(), "heap_sys_mb", ms.HeapSys>>20, "gc_cycles", ms.NumGC)
	log.Info("precheck done", attrs...)
	if _, err := stdout.Write(out); err != nil {
		log.Error("precheck result not written", "reason", err.Error())
		return 2
	}
	return 0
}
