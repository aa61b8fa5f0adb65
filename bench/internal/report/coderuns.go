package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/coderuns"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// FileRuns is the code-run series' results file.
const FileRuns = "runs.json"

// Series names of the code-run comparison.
const (
	RunSeriesHost   = "sandbox-host run (API: POST /v1/runs, events)"
	RunSeriesDocker = "docker run --rm (run container's flags, echo as entrypoint)"
	RunSeriesEngine = "Engine API (pkg/container: the run's container and supervisor, no host)"
)

// CodeRuns is runs.json: `echo ready` as a code run, interleaved.
type CodeRuns struct {
	Rounds    int               `json:"rounds"`
	Warmup    int               `json:"warmup"`
	Image     string            `json:"image"`
	ImageText string            `json:"imageText,omitempty"`
	Argv      []string          `json:"argv"`
	Skipped   string            `json:"skipped,omitempty"`
	Start     time.Time         `json:"start"`
	End       time.Time         `json:"end"`
	LoadStart string            `json:"loadStart"`
	LoadEnd   string            `json:"loadEnd"`
	Series    []coderuns.Series `json:"series"`
	// StandbyMetrics: how much the host's run-standby metric samples grew
	// over the series (names as the host exports them).
	StandbyMetrics map[string]float64 `json:"standbyMetrics,omitempty"`
	// SettleMs: the pause off the clock before each host run.
	SettleMs int64 `json:"settleMs,omitempty"`
}

func runSeries(cr *CodeRuns, name string) *coderuns.Series {
	for i := range cr.Series {
		if cr.Series[i].Name == name && cr.Series[i].First.N > 0 {
			return &cr.Series[i]
		}
	}
	return nil
}

// writeCodeRuns renders the code-run comparison (section 1b), with the
// turn figures of section 1 beside it.
func writeCodeRuns(b *strings.Builder, cr *CodeRuns, fc *FixedCost) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 1b. Code runs (`sandbox_run`): `echo ready`\n\n")
	if cr == nil {
		p("Not measured in this run.\n\n")
		return
	}
	if cr.Skipped != "" {
		p("Skipped: %s\n\n", cr.Skipped)
		return
	}
	img := "`" + cr.Image + "`"
	if cr.ImageText != "" {
		img += " (" + cr.ImageText + ")"
	}
	p("`%s` (argv mode, no project, no network) in the toolbox image %s, interleaved: each round runs every series once in the order below; %d measured rounds after %d warm-up rounds. Load average %s at start, %s at end (%s to %s UTC). Times are the client's: from the request (or process start) to the first output carrying \"%s\", and to the result.\n\n",
		strings.Join(cr.Argv, " "), img, cr.Rounds, cr.Warmup, cr.LoadStart, cr.LoadEnd, cr.Start.Format("15:04:05"), cr.End.Format("15:04:05"), coderuns.Marker)
	p("- **%s**: `POST /v1/runs` (`{\"executable\":\"echo\",\"args\":[\"ready\"]}`) to the host's socket, then `GET /v1/runs/{id}/events` (NDJSON): first output = the stdout `output` event that completes \"ready\"; result = the `result` event, which the host sends after the container is removed. The host's own `durationMs` (container create to cleanup) is the last column.\n", RunSeriesHost)
	p("- **%s**: `docker run --rm` of the same image with the run container's flags (network none, `--cap-drop ALL`, no-new-privileges, read-only root, /tmp and /output tmpfs as the host sizes them, memory/cpus/pids and the nofile/nproc ulimits, IPC none, no init, the empty workspace read-only at /workspace, a non-root uid, journald logging) and `--entrypoint echo`: first output = the first stdout read holding \"ready\"; result = the CLI's exit (container removed).\n", RunSeriesDocker)
	if runSeries(cr, RunSeriesEngine) != nil || len(cr.Series) > 2 {
		p("- **%s**: the container the host makes for this run (pkg/container `Spec.Run`, `sandbox-worker run-supervise` as PID 1, the host's `wire.Job` on stdin, frames read with `wire.Decoder`): create, attach, start, stream, remove; no API, registry, queue or journal sink. First output = the decoded stdout frame; result = after removal.\n", RunSeriesEngine)
	}
	p("- **No warm standby**: runs never reuse a container and no standby of toolbox containers was built, so every run above creates, starts and removes its own container (a turn can find a ready standby, a run cannot).\n\n")
	p("| series | n | first output median ms | p95 ms | result median ms | p95 ms | host durationMs median | failures |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, s := range cr.Series {
		host := "-"
		if s.Host.N > 0 {
			host = ms(s.Host.Median)
		}
		if s.First.N == 0 {
			p("| %s | 0 | - | - | - | - | - | %d |\n", s.Name, s.Failures)
			continue
		}
		p("| %s | %d | %s | %s | %s | %s | %s | %d |\n", s.Name, s.First.N, ms(s.First.Median), ms(s.First.P95), ms(s.Result.Median), ms(s.Result.P95), host, s.Failures)
	}
	p("\nRatios (medians; p95s):\n\n")
	for _, pair := range [][2]string{{RunSeriesHost, RunSeriesDocker}, {RunSeriesEngine, RunSeriesDocker}, {RunSeriesHost, RunSeriesEngine}} {
		a, c := runSeries(cr, pair[0]), runSeries(cr, pair[1])
		if a == nil || c == nil {
			continue
		}
		p("- %s / %s: first output %.2f; %.2f (difference %s ms), result %.2f; %.2f (difference %s ms)\n", shortRun(pair[0]), shortRun(pair[1]),
			stats.Ratio(a.First.Median, c.First.Median), stats.Ratio(a.First.P95, c.First.P95), ms(a.First.Median-c.First.Median),
			stats.Ratio(a.Result.Median, c.Result.Median), stats.Ratio(a.Result.P95, c.Result.P95), ms(a.Result.Median-c.Result.Median))
	}
	if fc != nil {
		var parts []string
		for _, n := range []string{SeriesHost, SeriesHostStandby, SeriesDocker} {
			if s := series(fc, n); s != nil {
				parts = append(parts, fmt.Sprintf("%s %s ms (p95 %s)", n, ms(s.Summary.Median), ms(s.Summary.P95)))
			}
		}
		if len(parts) > 0 {
			p("\nThe turn figures beside them (section 1, the same make bench run, before this series and not interleaved with it; a turn's time is to its reply): %s.\n", strings.Join(parts, "; "))
		}
	}
	for _, s := range cr.Series {
		for _, e := range s.Errors {
			p("- failure (%s): `%s`\n", shortRun(s.Name), oneLine(e))
		}
	}
	p("\n")
}

// shortRun is a series name without its parenthesis.
func shortRun(name string) string {
	if i := strings.Index(name, " ("); i > 0 {
		return name[:i]
	}
	return name
}
