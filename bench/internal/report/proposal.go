package report

import (
	"fmt"
	"strings"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/promtext"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// writePhaseRow writes one before/after row.
func writePhaseRow(b *strings.Builder, name string, before, after string) {
	fmt.Fprintf(b, "| %s | %s | %s |\n", name, before, after)
}

func commitOf(in *Inputs) string {
	if in == nil || in.Env == nil || in.Env.Facts["commit"] == "" {
		return "?"
	}
	return in.Env.Facts["commit"]
}

// writeCompare renders section 6: the comparison run (another commit's
// package, measured by the same bench right after this run) against this
// run, each ratio taken against the docker run series of its own run.
func writeCompare(b *strings.Builder, in *Inputs) {
	// Columns: the comparison commit first (before), this run second (after).
	pr := in
	in = in.Compare
	if in == nil || in.FixedCost == nil {
		return
	}
	fmt.Fprintf(b, "## 6. Before and after: commit %s against this run (commit %s)\n\n", commitOf(in), commitOf(pr))
	b.WriteString("The turn fast path landed between the two (85456b6 unitctl: the broker service start is queued as soon as its socket listens, no reset-failed after clean stops; d3a87bd container: `RunGated` holds stdin until a ready check passes; 6ec2f04 host: the container is created, attached and started while the broker units start, stdin waits for the unit job, and a successful turn is answered before its cleanup while the channel's queue slot stays held until cleanup ends). The comparison run builds the package of the older commit from a clone and measures it with this bench, in its own namespace, right after this run; every ratio is against the docker run series interleaved in the same run.\n\n")
	fmt.Fprintf(b, "| | before (commit %s) | after (commit %s, this run) |\n| --- | --- | --- |\n", commitOf(in), commitOf(pr))
	med := func(i *Inputs, name string) (string, float64) {
		s := series(i.FixedCost, name)
		if s == nil {
			return "-", 0
		}
		return fmt.Sprintf("%s / %s", ms(s.Summary.Median), ms(s.Summary.P95)), s.Summary.Median
	}
	hb, hbm := med(in, SeriesHost)
	ha, ham := med(pr, SeriesHost)
	writePhaseRow(b, "host turn median / p95 ms", hb, ha)
	db, dbm := med(in, SeriesDocker)
	da, dam := med(pr, SeriesDocker)
	writePhaseRow(b, "docker run --rm -i median / p95 ms (same run)", db, da)
	eb, ebm := med(in, SeriesEngine)
	ea, eam := med(pr, SeriesEngine)
	writePhaseRow(b, "Engine API median / p95 ms (same run)", eb, ea)
	ratio := func(a, c float64) string {
		if a == 0 || c == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/c)
	}
	rb, ra := ratio(hbm, dbm), ratio(ham, dam)
	writePhaseRow(b, fmt.Sprintf("**host / docker run (target <= %.1f)**", TargetRatio), "**"+rb+"**", "**"+ra+"**")
	writePhaseRow(b, "host / Engine API", ratio(hbm, ebm), ratio(ham, eam))
	jm := func(i *Inputs, k string) string {
		if i.Phases == nil || len(i.Phases.SamplesMs[k]) == 0 {
			return "-"
		}
		return ms(stats.Quantile(i.Phases.SamplesMs[k], 0.5))
	}
	for _, k := range []struct{ label, key string }{
		{"D-Bus unit start (host side) median ms", "unit_start"},
		{"started container waiting for the unit job (stdin_gate) median ms", "stdin_gate"},
		{"broker activation median ms", journal.PhaseBrokerActivation},
		{"attach + start + worker run + wait median ms", "run"},
		{"unit stop median ms", "unit_stop"},
		{"host total (admission to cleanup) median ms", journal.PhaseHostTotal},
	} {
		writePhaseRow(b, k.label, jm(in, k.key), jm(pr, k.key))
	}
	mean := func(i *Inputs, phase string) string {
		if i.FixedCost == nil || i.FixedCost.MetricsAfter == "" {
			return "-"
		}
		bf, _ := promtext.Parse(i.FixedCost.MetricsBefore)
		af, _ := promtext.Parse(i.FixedCost.MetricsAfter)
		for _, h := range promtext.Delta(bf, af) {
			if h.Name == phaseFamily && h.Labels["phase"] == phase {
				return ms(h.Mean() * 1000)
			}
		}
		return "-"
	}
	writePhaseRow(b, "worker run (stdin to stdout EOF) mean ms", mean(in, "worker_run"), mean(pr, "worker_run"))
	if in.Load != nil && pr.Load != nil {
		writePhaseRow(b, fmt.Sprintf("load %dx%d: turns/s, latency p95 ms, failures", in.Load.Channels, in.Load.TurnsPerChannel),
			fmt.Sprintf("%.2f, %s, %d", in.Load.TurnsPerSecond, ms(in.Load.Latency.P95), in.Load.Failures),
			fmt.Sprintf("%.2f, %s, %d", pr.Load.TurnsPerSecond, ms(pr.Load.Latency.P95), pr.Load.Failures))
		writePhaseRow(b, "host RSS idle / peak under load", mib(in.Load.HostRSSIdleKiB)+" / "+mib(in.Load.HostRSSPeakKiB),
			mib(pr.Load.HostRSSIdleKiB)+" / "+mib(pr.Load.HostRSSPeakKiB))
	}
	var fails []string
	for _, s := range pr.FixedCost.Series {
		if s.Failures > 0 {
			fails = append(fails, fmt.Sprintf("%s: %d", s.Name, s.Failures))
		}
	}
	if len(fails) > 0 {
		fmt.Fprintf(b, "\nFailures in this run: %s.\n", strings.Join(fails, ", "))
	}
	if in.Env != nil {
		fmt.Fprintf(b, "\nComparison run at %s UTC, load average %s at start.\n", in.Env.Date.Format("15:04"), in.Env.LoadAvg)
	}
	b.WriteString("\n")
}
