package report

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// Results files of the series issue 25 added.
const (
	FileBurst            = "burst.json"
	FileBackToBackPaused = "backtoback-paused.json"
	FileRunsStandby      = "runs-standby.json"
	FileUnits            = "units.json"
	// FileUnitsPhases: the journal over units.json's measured window.
	FileUnitsPhases = "units-phases.json"
	// FileUnitVariants: the units' start with one drop-in at a time.
	FileUnitVariants = "unit-variants.json"
)

// UnitVariants is unit-variants.json.
type UnitVariants struct {
	Rounds    int           `json:"rounds"`
	PerRound  int           `json:"perRound"`
	Skipped   string        `json:"skipped,omitempty"`
	Start     time.Time     `json:"start"`
	End       time.Time     `json:"end"`
	LoadStart string        `json:"loadStart"`
	LoadEnd   string        `json:"loadEnd"`
	Variants  []UnitVariant `json:"variants"`
	Errors    []string      `json:"errors,omitempty"`
}

// UnitVariant is one drop-in's starts.
type UnitVariant struct {
	Name     string               `json:"name"`
	Unit     string               `json:"unit,omitempty"`
	DropIn   string               `json:"dropIn,omitempty"`
	ReadyMs  []float64            `json:"readyMs"`
	Ready    stats.Summary        `json:"ready"`
	JobsMs   map[string][]float64 `json:"jobsMs"`
	Failures int                  `json:"failures"`
}

// Goals of issue 25 (measured, never asserted in tests).
const (
	TargetBurstFailures   = 0
	TargetB2BHitsOf20     = 18
	TargetRunStandbyRatio = 0.1 // issue 25 asked for 0.3
	TargetLoadTurnsPerSec = 5.0 // issue 25 asked for 4
)

// BurstShipped names the burst variant on the config as installed.
const BurstShipped = "shipped config"

// RunSeriesHostStandby is the host's run series with a run standby.
const RunSeriesHostStandby = "sandbox-host run on a run standby (API: POST /v1/runs, events)"

// Names of the unit-start flows of units.json.
const (
	UnitsColdBefore    = "cold, before: subscribed; socket start waited, service start queued"
	UnitsColdAfter     = "cold, now: not subscribed; service start waited (socket and credential set pulled in)"
	UnitsStandbyBefore = "standby, before: subscribed; socket start waited, service start queued, service start waited"
	UnitsStandbyAfter  = "standby, now: not subscribed; service start waited, then StartBrokerService's check"
)

// Burst is burst.json: one first turn on each of Channels fresh channels,
// all posted at once, per admission variant, interleaved by rounds.
type Burst struct {
	Channels     int            `json:"channels"`
	Rounds       int            `json:"rounds"`
	ShippedQueue string         `json:"shippedQueue"`
	Skipped      string         `json:"skipped,omitempty"`
	Start        time.Time      `json:"start"`
	End          time.Time      `json:"end"`
	LoadStart    string         `json:"loadStart"`
	LoadEnd      string         `json:"loadEnd"`
	Variants     []BurstVariant `json:"variants"`
}

// BurstVariant is one admission setting: the shipped config (Cap -1) or a
// fixed queue.globalConcurrency (and, when Starts > 0, startConcurrency;
// Tuning marks one whose startConcurrency is not its cap: no baseline).
type BurstVariant struct {
	Name     string        `json:"name"`
	Cap      int           `json:"cap"`
	Starts   int           `json:"starts,omitempty"`
	Tuning   bool          `json:"tuning,omitempty"`
	Runs     []BurstRun    `json:"runs"`
	Failures int           `json:"failures"`
	Latency  stats.Summary `json:"latencyMs"` // every answered turn of every round
	Wall     stats.Summary `json:"wallMs"`    // one sample a round
}

// BurstRun is one burst.
type BurstRun struct {
	WallMs       float64        `json:"wallMs"`
	LatenciesMs  []float64      `json:"latenciesMs"`
	Failures     int            `json:"failures"`
	FailureKinds map[string]int `json:"failureKinds,omitempty"`
	Errors       []string       `json:"errors,omitempty"`
	LoadEnd      string         `json:"loadEnd"`
}

// Units is units.json: the broker units' start over D-Bus, the host's
// flows before and after issue 25, interleaved.
type Units struct {
	Rounds        int          `json:"rounds"`
	Warmup        int          `json:"warmup"`
	UID           int          `json:"uid"`
	Skipped       string       `json:"skipped,omitempty"`
	Start         time.Time    `json:"start"`
	MeasuredStart time.Time    `json:"measuredStart"`
	End           time.Time    `json:"end"`
	LoadStart     string       `json:"loadStart"`
	LoadEnd       string       `json:"loadEnd"`
	Series        []UnitSeries `json:"series"`
}

// UnitSeries is one flow's samples.
type UnitSeries struct {
	Name     string        `json:"name"`
	Calls    int           `json:"calls"`
	ReturnMs []float64     `json:"returnMs"` // until the host would go on
	ReadyMs  []float64     `json:"readyMs"`  // until the broker service was READY
	Return   stats.Summary `json:"return"`
	Ready    stats.Summary `json:"ready"`
	Failures int           `json:"failures"`
	Errors   []string      `json:"errors,omitempty"`
}

func (b *Burst) variant(name string) *BurstVariant {
	for i := range b.Variants {
		if b.Variants[i].Name == name {
			return &b.Variants[i]
		}
	}
	return nil
}

// bestCap is the fixed cap with the lowest median wall time (tuning
// variants are no baseline).
func (b *Burst) bestCap() *BurstVariant {
	var best *BurstVariant
	for i := range b.Variants {
		v := &b.Variants[i]
		if v.Cap <= 0 || v.Tuning || v.Wall.N == 0 {
			continue
		}
		if best == nil || v.Wall.Median < best.Wall.Median {
			best = v
		}
	}
	return best
}

func notMeasured(what, target, why string) Target {
	return Target{What: what, Target: target, Measured: "not measured: " + why, Verdict: verdict(false, false)}
}

func secs(msv float64) string { return fmt.Sprintf("%.1f s", msv/1000) }

// targetsUnderLoad are the rows of issue 25's goals.
func targetsUnderLoad(in *Inputs) []Target {
	var out []Target

	what, target := "64 simultaneous first turns on the shipped config: failures; wall vs the best fixed cap (4, 16) of the same run", "0 failed; wall <= best cap's (medians)"
	switch b := in.Burst; {
	case b == nil:
		out = append(out, notMeasured(what, target, "no burst.json in this run"))
	case b.Skipped != "":
		out = append(out, notMeasured(what, target, b.Skipped))
	default:
		sh, best := b.variant(BurstShipped), b.bestCap()
		if sh == nil || sh.Wall.N == 0 || best == nil {
			out = append(out, notMeasured(what, target, "a variant has no completed burst"))
			break
		}
		total := b.Channels * len(sh.Runs)
		t := Target{What: what, Target: target}
		t.Measured = fmt.Sprintf("shipped: %d of %d failed, wall %s (%d rounds), turn p50 %s / p95 %s ms; best cap (%s): %d failed, wall %s, p50 %s / p95 %s ms",
			sh.Failures, total, secs(sh.Wall.Median), sh.Wall.N, ms(sh.Latency.Median), ms(sh.Latency.P95),
			best.Name, best.Failures, secs(best.Wall.Median), ms(best.Latency.Median), ms(best.Latency.P95))
		t.Verdict = verdict(true, sh.Failures == TargetBurstFailures && sh.Wall.Median <= best.Wall.Median)
		out = append(out, t)
	}

	what, target = "20 back-to-back turns, 1.5 s model: turns on a standby", fmt.Sprintf(">= %d of 20", TargetB2BHitsOf20)
	if bb := in.BackToBack; bb == nil || bb.ModelDelayMs == 0 {
		why := "no backtoback.json in this run"
		if bb != nil {
			why = "the back-to-back series ran without a delayed model"
		}
		out = append(out, notMeasured(what, target, why))
	} else {
		need := math.Ceil(float64(TargetB2BHitsOf20) * float64(bb.Turns) / 20)
		t := Target{What: what, Target: target}
		t.Measured = fmt.Sprintf("%.0f of %d, p50 %s / p95 %s ms, %d failed", bb.Hits, bb.Turns, ms(bb.Latency.Median), ms(bb.Latency.P95), bb.Failures)
		if pb := in.BackToBackPaused; pb != nil {
			t.Measured += fmt.Sprintf("; baseline with a %s pause: %.0f of %d, p50 %s / p95 %s ms", secs(float64(pb.PauseMs)), pb.Hits, pb.Turns, ms(pb.Latency.Median), ms(pb.Latency.P95))
		}
		t.Verdict = verdict(true, bb.Failures == 0 && bb.Hits >= need)
		out = append(out, t)
	}

	what, target = "cold turn vs docker run --rm -i (ratio of medians)", fmt.Sprintf("<= %.2f", TargetColdRatio)
	if host, dock := series(in.FixedCost, SeriesHost), series(in.FixedCost, SeriesDocker); host == nil || dock == nil {
		out = append(out, notMeasured(what, target, "the fixed-cost series did not run"))
	} else {
		r := stats.Ratio(host.Summary.Median, dock.Summary.Median)
		t := Target{What: what, Target: target}
		t.Measured = fmt.Sprintf("%.2f (p50 %s / %s ms)", r, ms(host.Summary.Median), ms(dock.Summary.Median))
		t.Verdict = verdict(true, r <= TargetColdRatio)
		out = append(out, t)
	}

	what, target = "turn on a standby vs the pre-started container through the Engine API (ratio of medians)", fmt.Sprintf("<= %.1f", TargetStandbyPrestartRatio)
	if sb, pre := series(in.FixedCost, SeriesHostStandby), series(in.FixedCost, SeriesPrestart); sb == nil || pre == nil {
		out = append(out, notMeasured(what, target, "the standby or pre-started series did not run"))
	} else {
		r := stats.Ratio(sb.Summary.Median, pre.Summary.Median)
		t := Target{What: what, Target: target}
		t.Measured = fmt.Sprintf("%.2f (p50 %s / %s ms)", r, ms(sb.Summary.Median), ms(pre.Summary.Median))
		t.Verdict = verdict(true, r <= TargetStandbyPrestartRatio)
		out = append(out, t)
	}

	what, target = "turn on a standby vs docker run --rm -i (ratio of medians)", fmt.Sprintf("<= %.2f", TargetStandbyRatio)
	sb, dock := series(in.FixedCost, SeriesHostStandby), series(in.FixedCost, SeriesDocker)
	if sb == nil || dock == nil {
		out = append(out, notMeasured(what, target, "the fixed-cost series did not run"))
	} else {
		r := stats.Ratio(sb.Summary.Median, dock.Summary.Median)
		t := Target{What: what, Target: target}
		t.Measured = fmt.Sprintf("%.2f (p50 %s / %s ms); p95 %.2f (%s / %s ms)", r, ms(sb.Summary.Median), ms(dock.Summary.Median),
			stats.Ratio(sb.Summary.P95, dock.Summary.P95), ms(sb.Summary.P95), ms(dock.Summary.P95))
		t.Verdict = verdict(true, r <= TargetStandbyRatio)
		out = append(out, t)
	}

	what, target = "code run's first output on a run standby vs docker run --rm of the same image (ratio of medians)", fmt.Sprintf("<= %.1f", TargetRunStandbyRatio)
	switch cr := in.RunsStandby; {
	case cr == nil:
		out = append(out, notMeasured(what, target, "no runs-standby.json in this run"))
	case cr.Skipped != "":
		out = append(out, notMeasured(what, target, cr.Skipped))
	default:
		h, d := runSeries(cr, RunSeriesHostStandby), runSeries(cr, RunSeriesDocker)
		if h == nil || d == nil {
			out = append(out, notMeasured(what, target, "a series has no successful run"))
			break
		}
		r := stats.Ratio(h.First.Median, d.First.Median)
		t := Target{What: what, Target: target}
		t.Measured = fmt.Sprintf("%.2f (p50 %s / %s ms); p95 %.2f (%s / %s ms)", r, ms(h.First.Median), ms(d.First.Median),
			stats.Ratio(h.First.P95, d.First.P95), ms(h.First.P95), ms(d.First.P95))
		t.Verdict = verdict(true, r <= TargetRunStandbyRatio && h.Failures == 0)
		out = append(out, t)
	}

	what, target = "16 channels x 4 turns posted at once: throughput", fmt.Sprintf(">= %.0f turns/s", TargetLoadTurnsPerSec)
	if ld := in.Load; ld == nil {
		out = append(out, notMeasured(what, target, "no load.json in this run"))
	} else {
		t := Target{What: what, Target: target}
		t.Measured = fmt.Sprintf("%.2f turns/s (%s wall, %d failed), turn p50 %s / p95 %s ms", ld.TurnsPerSecond, secs(ld.WallMs), ld.Failures, ms(ld.Latency.Median), ms(ld.Latency.P95))
		t.Verdict = verdict(true, ld.TurnsPerSecond >= TargetLoadTurnsPerSec && ld.Failures == 0)
		out = append(out, t)
	}
	return out
}

// writeUnderLoad renders the burst, the back-to-back pair, the run standby
// comparison and the unit-start flows.
func writeUnderLoad(b *strings.Builder, in *Inputs) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 4b. A burst of first turns: the shipped admission beside fixed caps\n\n")
	switch bu := in.Burst; {
	case bu == nil:
		p("Not measured in this run.\n\n")
	case bu.Skipped != "":
		p("Not measured: %s\n\n", bu.Skipped)
	default:
		p("%d fresh channels, one first (cold) turn each, all posted at once; per variant the config's `queue.globalConcurrency` (and `queue.startConcurrency`, when the variant names it) rewritten and the host restarted (off the clock), the variants interleaved by rounds (%d rounds), each burst on new channels switched off after it. Shipped `queue:` block: `%s`. Load average %s at start, %s at end (%s to %s UTC).\n\n",
			bu.Channels, bu.Rounds, bu.ShippedQueue, bu.LoadStart, bu.LoadEnd, bu.Start.Format("15:04:05"), bu.End.Format("15:04:05"))
		p("| variant | bursts | wall median s | wall max s | failed | turn p50 ms | turn p95 ms | turn max ms | failures by kind |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, v := range bu.Variants {
			kinds := map[string]int{}
			for _, r := range v.Runs {
				for k, n := range r.FailureKinds {
					kinds[k] += n
				}
			}
			p("| %s | %d | %.1f | %.1f | %d of %d | %s | %s | %s | %v |\n", v.Name, v.Wall.N, v.Wall.Median/1000, v.Wall.Max/1000,
				v.Failures, bu.Channels*len(v.Runs), ms(v.Latency.Median), ms(v.Latency.P95), ms(v.Latency.Max), kinds)
		}
		p("\n")
		for _, v := range bu.Variants {
			// The same error a few dozen times says no more than once.
			count := map[string]int{}
			var order []string
			for _, r := range v.Runs {
				for _, e := range r.Errors {
					e = oneLine(e)
					if count[e] == 0 {
						order = append(order, e)
					}
					count[e]++
				}
			}
			for _, e := range order {
				p("- %s (%d of the errors kept): `%s`\n", v.Name, count[e], e)
			}
		}
		p("\n")
	}

	p("## 4c. A conversation: back-to-back turns with a model that answers in %s\n\n", func() string {
		if in.BackToBack != nil && in.BackToBack.ModelDelayMs > 0 {
			return secs(float64(in.BackToBack.ModelDelayMs))
		}
		return "no time"
	}())
	if bb := in.BackToBack; bb != nil {
		p("| series | channel | turns | on a standby | not | failed | p50 ms | p95 ms | max ms |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, s := range []*BackToBack{in.BackToBack, in.BackToBackPaused} {
			if s == nil {
				continue
			}
			name := "back to back (next turn posted as the reply arrives)"
			if s.PauseMs > 0 {
				name = fmt.Sprintf("baseline: %s pause between turns", secs(float64(s.PauseMs)))
			}
			p("| %s | `%s` | %d | %.0f | %.0f | %d | %s | %s | %s |\n", name, s.Channel, s.Turns, s.Hits, s.Misses, s.Failures, ms(s.Latency.Median), ms(s.Latency.P95), ms(s.Latency.Max))
		}
		p("\nStandby hits and misses are the host's `sandbox_standby_turns_total` deltas over each series; before each series' first turn the bench waited, off the clock, for the channel's standby (a conversation already under way).\n\n")
		for _, s := range []*BackToBack{in.BackToBack, in.BackToBackPaused} {
			if s != nil {
				for _, e := range s.Errors {
					p("- `%s`\n", oneLine(e))
				}
			}
		}
	} else {
		p("Not measured in this run.\n\n")
	}

	p("## 4d. Code runs on a run standby\n\n")
	switch cr := in.RunsStandby; {
	case cr == nil:
		p("Not measured in this run.\n\n")
	case cr.Skipped != "":
		p("Not measured: %s\n\n", cr.Skipped)
	default:
		p("`echo ready` as in section 1b, with `runs.standby` declaring the shape (no project, no setup) and the host restarted on it; interleaved with `docker run --rm` of the same image, %d rounds after %d warm-up. Load average %s at start, %s at end.\n\n", cr.Rounds, cr.Warmup, cr.LoadStart, cr.LoadEnd)
		p("| series | n | first output p50 ms | p95 ms | result p50 ms | p95 ms | failures |\n| --- | --- | --- | --- | --- | --- | --- |\n")
		for _, s := range cr.Series {
			p("| %s | %d | %s | %s | %s | %s | %d |\n", s.Name, s.First.N, ms(s.First.Median), ms(s.First.P95), ms(s.Result.Median), ms(s.Result.P95), s.Failures)
		}
		p("\n")
		if cr.SettleMs > 0 {
			p("Before each host run the bench paused %s off the clock, for the host to prepare the replacement standby.\n\n", secs(float64(cr.SettleMs)))
		}
		if len(cr.StandbyMetrics) > 0 {
			p("The host's run-standby metrics over the series (growth of each sample):\n\n")
			keys := make([]string, 0, len(cr.StandbyMetrics))
			for k := range cr.StandbyMetrics {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				p("- `%s` +%g\n", k, cr.StandbyMetrics[k])
			}
			p("\n")
		} else {
			p("No host metric naming run standbys grew over the series: the runs may all have taken the cold path.\n\n")
		}
		for _, s := range cr.Series {
			for _, e := range s.Errors {
				p("- failure (%s): `%s`\n", s.Name, oneLine(e))
			}
		}
	}

	p("## 4e. Starting a turn's broker units: D-Bus round trips\n\n")
	switch u := in.Units; {
	case u == nil:
		p("Not measured in this run.\n\n")
	case u.Skipped != "":
		p("Not measured: %s\n\n", u.Skipped)
	default:
		p("The host's ways of starting `sandbox-broker@<turn>` (socket, `sandbox-credset@<turn>`, service) over the system bus, as uid %d (the host's user, so every call takes systemd's polkit check as the host's do), on a standby's placeholder policy listing one credential; interleaved, %d rounds after %d warm-up, each start followed off the clock by the host's stop. \"returns\" is when the host goes on (writes stdin, or binds), \"ready\" when the broker service reported READY. Load average %s at start, %s at end.\n\n",
			u.UID, u.Rounds, u.Warmup, u.LoadStart, u.LoadEnd)
		p("| flow | D-Bus calls | returns p50 / p95 ms | broker ready p50 / p95 ms | failures |\n| --- | --- | --- | --- | --- |\n")
		for _, s := range u.Series {
			p("| %s | %d | %s / %s | %s / %s | %d |\n", s.Name, s.Calls, ms(s.Return.Median), ms(s.Return.P95), ms(s.Ready.Median), ms(s.Ready.P95), s.Failures)
		}
		p("\n")
		if up := in.UnitsPhases; up != nil && len(up.SamplesMs) > 0 {
			p("systemd's own job times over the same window (its job messages in the journal), every flow together:\n\n| job | p50 ms | p95 ms | n |\n| --- | --- | --- | --- |\n")
			for _, k := range sortedKeys(up.SamplesMs) {
				s := stats.Summarize(up.SamplesMs[k])
				p("| %s | %s | %s | %d |\n", k, ms(s.Median), ms(s.P95), s.N)
			}
			p("\n")
		}
		for _, s := range u.Series {
			for _, e := range s.Errors {
				p("- failure (%s): `%s`\n", s.Name, oneLine(e))
			}
		}
	}
	if uv := in.UnitVariants; uv != nil && len(uv.Variants) > 0 {
		p("### What the units' own sandbox costs\n\n")
		p("The same start (one service start waited for, as root: the variable is systemd's work, not polkit) with the installed units and with one drop-in at a time (`daemon-reload` between, off the clock), interleaved, %d rounds x %d starts per variant; systemd's job times per turn from the journal. Load average %s at start, %s at end.\n\n", uv.Rounds, uv.PerRound, uv.LoadStart, uv.LoadEnd)
		p("| variant | starts | broker ready p50 / p95 ms | credential-set job p50 / p95 ms | broker activation p50 ms | socket start to READY p50 / p95 ms | chain p50 / installed's | failures |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
		base := stats.Quantile(uv.Variants[0].JobsMs[journal.PhaseSocketToReady], 0.5)
		for _, v := range uv.Variants {
			cj, act, ch := stats.Summarize(v.JobsMs[journal.PhaseCredsetJob]), stats.Summarize(v.JobsMs[journal.PhaseBrokerActivation]), stats.Summarize(v.JobsMs[journal.PhaseSocketToReady])
			ratio := "-"
			if base > 0 && ch.N > 0 {
				ratio = fmt.Sprintf("%.2f", ch.Median/base)
			}
			p("| %s | %d | %s / %s | %s / %s | %s | %s / %s | %s | %d |\n", v.Name, v.Ready.N, ms(v.Ready.Median), ms(v.Ready.P95), ms(cj.Median), ms(cj.P95), ms(act.Median), ms(ch.Median), ms(ch.P95), ratio, v.Failures)
		}
		p("\n")
		for _, e := range uv.Errors {
			p("- failure: `%s`\n", oneLine(e))
		}
	}
}

func sortedKeys(m map[string][]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func unitSeries(u *Units, name string) *UnitSeries {
	if u == nil {
		return nil
	}
	for i := range u.Series {
		if u.Series[i].Name == name && u.Series[i].Return.N > 0 {
			return &u.Series[i]
		}
	}
	return nil
}

// writeUnderLoadAnalysis states, from this run's numbers, what the series
// of issue 25 say. Every number in it is computed here.
func writeUnderLoadAnalysis(b *strings.Builder, in *Inputs) {
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	if bu := in.Burst; bu != nil && bu.Skipped == "" {
		if sh, best := bu.variant(BurstShipped), bu.bestCap(); sh != nil && best != nil && sh.Wall.N > 0 {
			add("A burst of %d first turns on the shipped admission (`%s`): %d of %d failed, wall %s (median of %d); the best fixed cap (%s) took %s with %d failed. Shipped / best cap wall: %.2f.",
				bu.Channels, bu.ShippedQueue, sh.Failures, bu.Channels*len(sh.Runs), secs(sh.Wall.Median), sh.Wall.N, best.Name, secs(best.Wall.Median), best.Failures, stats.Ratio(sh.Wall.Median, best.Wall.Median))
		}
	}
	if bb := in.BackToBack; bb != nil && bb.ModelDelayMs > 0 {
		s := fmt.Sprintf("A conversation (%d turns, model %s, each posted as the reply arrives): %.0f on a standby", bb.Turns, secs(float64(bb.ModelDelayMs)), bb.Hits)
		if pb := in.BackToBackPaused; pb != nil {
			s += fmt.Sprintf(", against %.0f with a %s pause", pb.Hits, secs(float64(pb.PauseMs)))
		}
		add("%s; p50 %s ms (p95 %s).", s, ms(bb.Latency.Median), ms(bb.Latency.P95))
	}
	u := in.Units
	cb, ca := unitSeries(u, UnitsColdBefore), unitSeries(u, UnitsColdAfter)
	if cb != nil && ca != nil {
		add("Starting a turn's broker units (section 4e, as the host's user): %d D-Bus call(s) before, %d now. Broker READY at p50 %s ms before and %s ms now (p95 %s and %s); %s ms saved at the median, which is the round trip and polkit check of the call no longer made, on every cold turn, precheck, rich session and network run (and the one the host's user no longer asks polkitd for).",
			cb.Calls, ca.Calls, ms(cb.Ready.Median), ms(ca.Ready.Median), ms(cb.Ready.P95), ms(ca.Ready.P95), ms(cb.Ready.Median-ca.Ready.Median))
	}
	if sb, sa := unitSeries(u, UnitsStandbyBefore), unitSeries(u, UnitsStandbyAfter); sb != nil && sa != nil {
		add("A standby's preparation: %d calls before, %d now, until the host goes on p50 %s ms before and %s ms now.", sb.Calls, sa.Calls, ms(sb.Return.Median), ms(sa.Return.Median))
	}
	if up := in.UnitsPhases; up != nil {
		cj, ok1 := up.SamplesMs[journal.PhaseCredsetJob]
		ch, ok2 := up.SamplesMs[journal.PhaseSocketToReady]
		act, ok3 := up.SamplesMs[journal.PhaseBrokerActivation]
		if ok1 && ok2 && len(cj) > 0 && len(ch) > 0 {
			c, w := stats.Quantile(cj, 0.5), stats.Quantile(ch, 0.5)
			s := fmt.Sprintf("Inside systemd the chain socket start to broker READY takes p50 %s ms, of which the credential set (`sandbox-credset@`, a oneshot with its own sandbox) %s ms (%.0f%%)", ms(w), ms(c), 100*c/w)
			if ok3 && len(act) > 0 {
				s += fmt.Sprintf(" and the broker service's start to READY %s ms", ms(stats.Quantile(act, 0.5)))
			}
			add("%s.", s)
		}
	}
	if uv := in.UnitVariants; uv != nil && len(uv.Variants) > 1 {
		base := uv.Variants[0]
		bc := stats.Quantile(base.JobsMs[journal.PhaseCredsetJob], 0.5)
		bch := stats.Quantile(base.JobsMs[journal.PhaseSocketToReady], 0.5)
		for _, v := range uv.Variants[1:] {
			c := stats.Quantile(v.JobsMs[journal.PhaseCredsetJob], 0.5)
			ch := stats.Quantile(v.JobsMs[journal.PhaseSocketToReady], 0.5)
			add("Units' sandbox (section 4e): with %s the broker is READY at p50 %s ms against %s ms as installed (credential-set job %s against %s ms; the chain in systemd %s against %s ms).",
				"`"+v.Name+"`", ms(v.Ready.Median), ms(base.Ready.Median), ms(c), ms(bc), ms(ch), ms(bch))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "## Under load, and the per-turn cost of the broker units\n\n")
	for _, l := range lines {
		fmt.Fprintf(b, "- %s\n", l)
	}
	fmt.Fprintf(b, "\n")
}
