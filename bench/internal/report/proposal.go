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

// writeProposal renders section 6: the same measurements before (this run)
// and after (HEAD with bench/proposals/host-fastpath.diff), each ratio taken
// against the docker run series interleaved in its own run.
func writeProposal(b *strings.Builder, in *Inputs) {
	pr := in.Proposal
	if pr == nil || pr.FixedCost == nil {
		return
	}
	b.WriteString("## 6. Proposed host fast path (measured, not applied)\n\n")
	b.WriteString("`bench/proposals/host-fastpath.diff` (see `bench/proposals/README.md`): the broker service started with its socket, the container started while the units start (stdin waits for the unit job), the reply sent before cleanup (the channel's queue slot is held until cleanup ends), no reset-failed calls after a clean unit stop. Same commit plus the diff, its own package, its own namespace, run right after the run above; every ratio is against the docker run series interleaved in the same run.\n\n")
	b.WriteString("| | before (HEAD) | after (HEAD + diff) |\n| --- | --- | --- |\n")
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
		fmt.Fprintf(b, "\nFailures in the proposal run: %s.\n", strings.Join(fails, ", "))
	}
	if pr.Env != nil {
		fmt.Fprintf(b, "\nProposal run at %s UTC, load average %s at start.\n", pr.Env.Date.Format("15:04"), pr.Env.LoadAvg)
	}
	b.WriteString("\n")
}
