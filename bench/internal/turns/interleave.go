package turns

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// Series is one runner's measured results, samples in run order.
type Series struct {
	Name      string        `json:"name"`
	SamplesMs []float64     `json:"samplesMs"`
	WarmupMs  []float64     `json:"warmupMs"`
	Failures  int           `json:"failures"`
	Errors    []string      `json:"errors,omitempty"` // first few, for the report
	Summary   stats.Summary `json:"summary"`
}

// maxErrors keeps a failure storm from bloating the results file.
const maxErrors = 10

// Interleave runs every runner once per round, in the given order, for
// warmup+rounds rounds; warm-up rounds are recorded apart and not summarised.
// A failed run is counted and its duration discarded.
func Interleave(ctx context.Context, runners []Runner, warmup, rounds int, pause time.Duration) []Series {
	out := make([]Series, len(runners))
	for i, r := range runners {
		out[i].Name = r.Name()
	}
	seq := 0
	for round := 0; round < warmup+rounds; round++ {
		for i, r := range runners {
			if ctx.Err() != nil {
				break
			}
			seq++
			d, err := r.Run(ctx, seq)
			s := &out[i]
			if err != nil {
				s.Failures++
				if len(s.Errors) < maxErrors {
					s.Errors = append(s.Errors, err.Error())
				}
				slog.Warn("run failed", "series", s.Name, "round", round, "err", err)
			} else if round < warmup {
				s.WarmupMs = append(s.WarmupMs, stats.Ms(d))
			} else {
				s.SamplesMs = append(s.SamplesMs, stats.Ms(d))
			}
			if pause > 0 {
				time.Sleep(pause)
			}
		}
		if (round+1)%10 == 0 {
			slog.Info("rounds done", "n", round+1, "of", warmup+rounds)
		}
	}
	for i := range out {
		out[i].Summary = stats.Summarize(out[i].SamplesMs)
	}
	return out
}

// String is a one-line summary for logs.
func (s Series) String() string {
	return fmt.Sprintf("%s: n=%d median=%.1fms p95=%.1fms failures=%d", s.Name, s.Summary.N, s.Summary.Median, s.Summary.P95, s.Failures)
}
