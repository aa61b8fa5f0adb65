package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/roundtable-sandbox/sandbox/bench/internal/promtext"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
)

// Inputs are the parsed results files; nil means not measured.
type Inputs struct {
	Env        *Env
	EnvEnd     *Env
	FixedCost  *FixedCost
	Broker     *Broker
	Load       *Load
	BackToBack *BackToBack
	Ready      *Ready
	Sizes      *Sizes
	Phases     *Phases
	Variants   *Variants
	StandbyMem *StandbyMem
	Runtimes   *Runtimes
	CodeRuns   *CodeRuns
	// Issue 25's series.
	Burst            *Burst
	BackToBackPaused *BackToBack
	RunsStandby      *CodeRuns
	Units            *Units
	UnitsPhases      *Phases
	UnitVariants     *UnitVariants
	// Issue 36's series.
	Sessions *Sessions
	// Issue 37's: interception against a plain tunnel, the guard.
	Intercept GoBench
	Notes     string
	// Figures are the SVG figures drawn beside the tables (package
	// figures), with Href relative to the report; FigureNotes says what
	// was not drawn and why.
	Figures     []Figure
	FigureNotes []string
	// ResultsPath is where the raw files are kept, for the report's pointer.
	ResultsPath string
}

// ReadDir loads every results file present in dir.
func ReadDir(dir string) (*Inputs, error) {
	in := &Inputs{ResultsPath: dir}
	load := func(name string, v any) (bool, error) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(data, v); err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		return true, nil
	}
	var (
		env, envEnd Env
		fc          FixedCost
		br          Broker
		ld          Load
		bb          BackToBack
		rd          Ready
		sz          Sizes
		ph          Phases
		va          Variants
		sm          StandbyMem
		rt          Runtimes
		cr          CodeRuns
		bu          Burst
		bp          BackToBack
		rs          CodeRuns
		un          Units
		up          Phases
		uv          UnitVariants
		ss          Sessions
	)
	for _, f := range []struct {
		name string
		v    any
		set  func()
	}{
		{FileEnv, &env, func() { in.Env = &env }},
		{FileEnvEnd, &envEnd, func() { in.EnvEnd = &envEnd }},
		{FileFixedCost, &fc, func() { in.FixedCost = &fc }},
		{FileBroker, &br, func() { in.Broker = &br }},
		{FileLoad, &ld, func() { in.Load = &ld }},
		{FileBackToBack, &bb, func() { in.BackToBack = &bb }},
		{FileReady, &rd, func() { in.Ready = &rd }},
		{FileSizes, &sz, func() { in.Sizes = &sz }},
		{FilePhases, &ph, func() { in.Phases = &ph }},
		{FileVariants, &va, func() { in.Variants = &va }},
		{FileStandbyMem, &sm, func() { in.StandbyMem = &sm }},
		{FileRuntimes, &rt, func() { in.Runtimes = &rt }},
		{FileRuns, &cr, func() { in.CodeRuns = &cr }},
		{FileBurst, &bu, func() { in.Burst = &bu }},
		{FileBackToBackPaused, &bp, func() { in.BackToBackPaused = &bp }},
		{FileRunsStandby, &rs, func() { in.RunsStandby = &rs }},
		{FileUnits, &un, func() { in.Units = &un }},
		{FileUnitsPhases, &up, func() { in.UnitsPhases = &up }},
		{FileUnitVariants, &uv, func() { in.UnitVariants = &uv }},
		{FileSessions, &ss, func() { in.Sessions = &ss }},
	} {
		ok, err := load(f.name, f.v)
		if err != nil {
			return nil, err
		}
		if ok {
			f.set()
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, FileNotes)); err == nil {
		in.Notes = string(data)
	}
	if data, err := os.ReadFile(filepath.Join(dir, FileIntercept)); err == nil {
		in.Intercept = ParseGoBench(string(data))
	}
	return in, nil
}

// Target is one line of the targets table.
type Target struct {
	What, Target, Measured, Verdict string
}

func verdict(measured bool, ok bool) string {
	switch {
	case !measured:
		return "not measured"
	case ok:
		return "met"
	}
	return "**missed**"
}

func ms(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

func series(fc *FixedCost, name string) *turns.Series {
	if fc == nil {
		return nil
	}
	for i := range fc.Series {
		if fc.Series[i].Name == name && fc.Series[i].Summary.N > 0 {
			return &fc.Series[i]
		}
	}
	return nil
}

// Targets evaluates the targets against the inputs.
func Targets(in *Inputs) []Target {
	var out []Target
	host, dock := series(in.FixedCost, SeriesHost), series(in.FixedCost, SeriesDocker)
	t := Target{What: "fixed turn cost vs docker run --rm -i (ratio of medians)", Target: fmt.Sprintf("<= %.1f", TargetRatio)}
	if host != nil && dock != nil {
		r := stats.Ratio(host.Summary.Median, dock.Summary.Median)
		t.Measured = fmt.Sprintf("%.2f (%s / %s ms)", r, ms(host.Summary.Median), ms(dock.Summary.Median))
		t.Verdict = verdict(true, r <= TargetRatio)
	} else {
		t.Measured, t.Verdict = "-", verdict(false, false)
	}
	out = append(out, t)

	t = Target{What: "broker overhead per model call (median of per-call difference)", Target: fmt.Sprintf("<= %.0f ms", TargetBrokerMs)}
	if in.Broker != nil && len(in.Broker.Modes) > 0 {
		worst, failed := 0.0, false
		var parts []string
		for _, m := range in.Broker.Modes {
			if m.Diff.N == 0 || m.Failures > 0 {
				failed = true
				parts = append(parts, fmt.Sprintf("%d of %d calls failed (%s)", m.Failures, m.Failures+m.Diff.N, m.Mode))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s ms (%s)", ms(m.Diff.Median), m.Mode))
			worst = math.Max(worst, m.Diff.Median)
		}
		t.Measured = strings.Join(parts, ", ")
		t.Verdict = verdict(true, !failed && worst <= TargetBrokerMs)
	} else {
		t.Measured, t.Verdict = "-", verdict(false, false)
	}
	out = append(out, t)

	t = Target{What: "failed turns under load", Target: "0"}
	if in.Load != nil {
		t.Measured = fmt.Sprintf("%d of %d", in.Load.Failures, in.Load.Channels*in.Load.TurnsPerChannel)
		t.Verdict = verdict(true, in.Load.Failures == 0)
	} else {
		t.Measured, t.Verdict = "-", verdict(false, false)
	}
	out = append(out, t)

	t = Target{What: "host idle RSS", Target: fmt.Sprintf("<= %d MiB", TargetHostIdleMiB)}
	if in.Load != nil && in.Load.HostRSSIdleKiB > 0 {
		t.Measured = mib(in.Load.HostRSSIdleKiB)
		t.Verdict = verdict(true, in.Load.HostRSSIdleKiB <= TargetHostIdleMiB*1024)
	} else {
		t.Measured, t.Verdict = "-", verdict(false, false)
	}
	out = append(out, t)

	t = Target{What: "broker RSS (peak)", Target: fmt.Sprintf("<= %d MiB", TargetBrokerMiB)}
	var brokerPeak int64
	if in.Broker != nil {
		brokerPeak = max(in.Broker.HWMKiB, in.Broker.RSSAfterKiB)
	}
	if in.Load != nil {
		brokerPeak = max(brokerPeak, in.Load.BrokerRSSPeakKiB)
	}
	if brokerPeak > 0 {
		t.Measured = mib(brokerPeak)
		t.Verdict = verdict(true, brokerPeak <= TargetBrokerMiB*1024)
	} else {
		t.Measured, t.Verdict = "-", verdict(false, false)
	}
	out = append(out, t)

	t = Target{What: "worker image size", Target: fmt.Sprintf("<= %d MiB", TargetImageMiB)}
	if in.Sizes != nil && in.Sizes.ImageBytes > 0 {
		t.Measured = fmt.Sprintf("%.2f MiB", float64(in.Sizes.ImageBytes)/(1<<20))
		t.Verdict = verdict(true, in.Sizes.ImageBytes <= TargetImageMiB<<20)
	} else {
		t.Measured, t.Verdict = "-", verdict(false, false)
	}
	out = append(out, t)

	t = Target{What: "sandbox-host start to READY (median)", Target: fmt.Sprintf("<= %d ms", TargetReadyMs)}
	if in.Ready != nil && in.Ready.Summary.N > 0 {
		t.Measured = ms(in.Ready.Summary.Median) + " ms"
		t.Verdict = verdict(true, in.Ready.Summary.Median <= TargetReadyMs)
	} else {
		t.Measured, t.Verdict = "-", verdict(false, false)
	}
	out = append(out, t)
	out = append(out, targetsUnderLoad(in)...)
	out = append(out, targetsSessions(in)...)
	return append(out, targetsIntercept(in)...)
}

// Phase is one row of the per-phase breakdown.
type Phase struct {
	Name                 string
	Count                float64
	MeanMs, P50Ms, P95Ms float64
}

// HistPhases turns a before/after /metrics pair into per-series rows: histograms
// whose count grew, in seconds converted to milliseconds when the family is
// named *_seconds. Rows keep the order the host declared them in.
func HistPhases(before, after string) ([]Phase, error) {
	if after == "" {
		return nil, nil
	}
	b, err := promtext.Parse(before)
	if err != nil {
		return nil, err
	}
	a, err := promtext.Parse(after)
	if err != nil {
		return nil, err
	}
	d := promtext.Delta(b, a)
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	order := func(k string) int {
		if i := strings.Index(after, strings.SplitN(k, "{", 2)[0]); i >= 0 {
			return i
		}
		return len(after)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		oi, oj := order(keys[i]), order(keys[j])
		if oi != oj {
			return oi < oj
		}
		return keys[i] < keys[j]
	})
	var out []Phase
	for _, k := range keys {
		h := d[k]
		scale := 1.0
		if strings.HasSuffix(h.Name, "_seconds") {
			scale = 1000
		}
		out = append(out, Phase{Name: k, Count: h.Count, MeanMs: h.Mean() * scale, P50Ms: h.Quantile(0.5) * scale, P95Ms: h.Quantile(0.95) * scale})
	}
	return out, nil
}

// HandRunHeading starts the one section of the report that make bench does
// not write: numbers measured by hand (each says its command and the load).
const HandRunHeading = "## Hand-run measurements"

// KeepHandRun returns md followed by the hand-run section of the report
// being replaced (old), so a rerun of make bench does not lose it.
func KeepHandRun(md string, old []byte) string {
	i := strings.Index(string(old), "\n"+HandRunHeading+"\n")
	if i < 0 {
		return md
	}
	return strings.TrimRight(md, "\n") + "\n\n" + strings.TrimLeft(string(old[i:]), "\n")
}

// Markdown renders the report.
func Markdown(in *Inputs) (string, error) {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# Benchmarks\n\n")
	p("Written by `make bench` (`bench/run.sh`, driver `bench/cmd/sandbox-bench`); do not edit by hand, except below \"%s\" at the end, which it keeps.\n", HandRunHeading[3:])
	if in.Env != nil {
		p("Run on %s UTC.", in.Env.Date.Format("2006-01-02 15:04"))
		p(" Load average (1/5/15 min) at start: %s", in.Env.LoadAvg)
		if in.EnvEnd != nil {
			p("; at end (%s UTC): %s", in.EnvEnd.Date.Format("15:04"), in.EnvEnd.LoadAvg)
		}
		p(".\n")
	}
	p("Raw results: `%s`.\n\n", in.ResultsPath)

	p("## Targets\n\n| what | target | measured | verdict |\n| --- | --- | --- | --- |\n")
	for _, t := range Targets(in) {
		p("| %s | %s | %s | %s |\n", t.What, t.Target, t.Measured, t.Verdict)
	}
	p("\n")

	writeAnalysis(&b, in)
	writeUnderLoadAnalysis(&b, in)
	writeFigures(&b, in)

	if in.Env != nil {
		p("## Machine\n\n| | |\n| --- | --- |\n")
		for _, k := range in.Env.FactKeys {
			p("| %s | %s |\n", k, strings.ReplaceAll(in.Env.Facts[k], "|", "/"))
		}
		p("\n")
	}

	p("## 1. Fixed turn cost\n\n")
	if fc := in.FixedCost; fc != nil {
		p("Interleaved: each round runs every series once in the order below; %d measured rounds after %d warm-up rounds (warm-up runs are kept in the raw file, not summarised). Wall time from request (or process start) to reply (or process exit). Load average %s at start, %s at end (%s to %s UTC).\n\n",
			fc.Rounds, fc.Warmup, fc.LoadStart, fc.LoadEnd, fc.Start.Format("15:04:05"), fc.End.Format("15:04:05"))
		p("| series | n | median ms | p95 ms | min ms | max ms | failures |\n| --- | --- | --- | --- | --- | --- | --- |\n")
		for _, s := range fc.Series {
			p("| %s | %d | %s | %s | %s | %s | %d |\n", s.Name, s.Summary.N, ms(s.Summary.Median), ms(s.Summary.P95), ms(s.Summary.Min), ms(s.Summary.Max), s.Failures)
		}
		p("\nRatios of medians:\n\n")
		for _, pair := range [][2]string{{SeriesHost, SeriesDocker}, {SeriesHostStandby, SeriesDocker}, {SeriesHostStandby, SeriesHost}, {SeriesHost, SeriesEngine}, {SeriesEngine, SeriesDocker}, {SeriesPrestart, SeriesDocker}, {SeriesHost, SeriesRuncWorker}, {SeriesHost, SeriesRuncFloor}, {SeriesDocker, SeriesRuncWorker}, {SeriesDocker, SeriesRuncFloor}, {SeriesRuncWorker, SeriesRuncFloor}} {
			a, c := series(fc, pair[0]), series(fc, pair[1])
			if a != nil && c != nil {
				p("- %s / %s = %.2f (difference %s ms)\n", pair[0], pair[1], stats.Ratio(a.Summary.Median, c.Summary.Median), ms(a.Summary.Median-c.Summary.Median))
			}
		}
		if a, c := series(fc, SeriesHostStandby), series(fc, SeriesDocker); a != nil && c != nil {
			p("- p95: %s / %s = %.2f\n", SeriesHostStandby, SeriesDocker, stats.Ratio(a.Summary.P95, c.Summary.P95))
		}
		for _, s := range fc.Series {
			for _, e := range s.Errors {
				p("- failure (%s): `%s`\n", s.Name, oneLine(e))
			}
		}
		p("\n")
	} else {
		p("Not measured in this run.\n\n")
	}

	writeCodeRuns(&b, in.CodeRuns, in.FixedCost)
	writeSessions(&b, in.Sessions)

	p("## 2. Per-phase breakdown of a turn (host trace points)\n\n")
	if err := writePhases(&b, in); err != nil {
		return "", err
	}

	if va := in.Variants; va != nil && len(va.Series) > 0 {
		p("### What docker run's own cost is made of\n\n")
		p("`docker run --rm -i` of the trivial payload image (`%s`, no broker needed) with one group of the host's flags left out at a time, interleaved, %d rounds after %d warm-up; load average %s at start, %s at end. A difference to the first row is what that group costs.\n\n", va.Image, va.Rounds, va.Warmup, va.LoadStart, va.LoadEnd)
		p("| variant | median ms | p95 ms | median minus all flags ms | failures |\n| --- | --- | --- | --- | --- |\n")
		base := va.Series[0].Summary.Median
		for _, s := range va.Series {
			p("| %s | %s | %s | %s | %d |\n", s.Name, ms(s.Summary.Median), ms(s.Summary.P95), ms(s.Summary.Median-base), s.Failures)
		}
		p("\n")
	}

	p("## 3. Broker overhead\n\n")
	if br := in.Broker; br != nil {
		p("The same worker-shaped Chat Completions request (system + user message, the three memory tools) sent %d times per mode straight to a local fake upstream and through `%s`, interleaved pair by pair (alternating which goes first); a fresh broker every %d calls (%d brokers). The upstream checked that every brokered call carried the real key (%d did not). Load average %s at start, %s at end.\n\n",
			br.Iterations, br.BrokerCommand, br.CallsPerBroker, br.Brokers, br.UpstreamBadAuth, br.LoadStart, br.LoadEnd)
		p("| mode | direct median / p95 ms | via broker median / p95 ms | difference median / p95 ms | failures |\n| --- | --- | --- | --- | --- |\n")
		for _, m := range br.Modes {
			p("| %s | %s / %s | %s / %s | %s / %s | %d |\n", m.Mode, ms(m.Direct.Median), ms(m.Direct.P95), ms(m.Broker.Median), ms(m.Broker.P95), ms(m.Diff.Median), ms(m.Diff.P95), m.Failures)
			for _, e := range m.Errors {
				p("| | failure: `%s` | | | |\n", oneLine(e))
			}
		}
		p("\nBroker memory: RSS %s right after it listened, %s after its calls, peak (VmHWM) %s.\n\n", mib(br.RSSIdleKiB), mib(br.RSSAfterKiB), mib(br.HWMKiB))
	} else {
		p("Not measured in this run.\n\n")
	}

	p("## 4. Concurrency\n\n")
	if ld := in.Load; ld != nil {
		total := ld.Channels * ld.TurnsPerChannel
		p("%d channels x %d turns, all %d posted at once (each channel's queue holds its %d; the host serialises a channel and runs channels in parallel). Load average %s at start, %s at end.\n\n",
			ld.Channels, ld.TurnsPerChannel, total, ld.TurnsPerChannel, ld.LoadStart, ld.LoadEnd)
		p("| wall s | turns/s | succeeded | failed | latency median ms | p95 ms | max ms |\n| --- | --- | --- | --- | --- | --- | --- |\n")
		p("| %.2f | %.2f | %d | %d | %s | %s | %s |\n\n", ld.WallMs/1000, ld.TurnsPerSecond, ld.Succeeded, ld.Failures, ms(ld.Latency.Median), ms(ld.Latency.P95), ms(ld.Latency.Max))
		if len(ld.FailureKinds) > 0 {
			p("Failures by kind: %v\n\n", ld.FailureKinds)
			for _, e := range ld.Errors {
				p("- `%s`\n", oneLine(e))
			}
			p("\n")
		}
		if ld.MetricsAfter != "" {
			phases, err := HistPhases(ld.MetricsBefore, ld.MetricsAfter)
			if err == nil && len(phases) > 0 {
				p("Host phases under this load:\n\n| series | count | mean ms | ~median ms | ~p95 ms |\n| --- | --- | --- | --- | --- |\n")
				for _, ph := range phases {
					p("| `%s` | %.0f | %s | %s | %s |\n", ph.Name, ph.Count, ms(ph.MeanMs), ms(ph.P50Ms), ms(ph.P95Ms))
				}
				p("\n")
			}
		}
	} else {
		p("Not measured in this run.\n\n")
	}

	writeUnderLoad(&b, in)

	p("## 5. Memory, size, start-up\n\n| what | value |\n| --- | --- |\n")
	if ld := in.Load; ld != nil {
		p("| sandbox-host RSS idle (VmRSS, pid %d) | %s |\n", ld.HostPID, mib(ld.HostRSSIdleKiB))
		p("| sandbox-host RSS peak under load (sampled every 20 ms) | %s |\n", mib(ld.HostRSSPeakKiB))
		p("| sandbox-host RSS after load | %s |\n", mib(ld.HostRSSAfterKiB))
		if ld.HostMemCurIdle > 0 {
			p("| sandbox-host.service MemoryCurrent idle / after load | %s / %s |\n", mib(ld.HostMemCurIdle/1024), mib(ld.HostMemCurAfter/1024))
		}
		if ld.BrokersSeen > 0 {
			p("| sandbox-broker peak RSS under load (%d broker processes seen) | %s |\n", ld.BrokersSeen, mib(ld.BrokerRSSPeakKiB))
		}
	}
	if br := in.Broker; br != nil {
		p("| sandbox-broker RSS (bench broker: idle / after calls / VmHWM) | %s / %s / %s |\n", mib(br.RSSIdleKiB), mib(br.RSSAfterKiB), mib(br.HWMKiB))
	}
	if sz := in.Sizes; sz != nil {
		p("| worker image `%s` (docker image inspect Size) | %.2f MiB (%d bytes) |\n", sz.Image, float64(sz.ImageBytes)/(1<<20), sz.ImageBytes)
		if sz.ArchiveBytes > 0 {
			p("| worker image archive (dist/worker-image.tar) | %.2f MiB |\n", float64(sz.ArchiveBytes)/(1<<20))
		}
		for _, f := range []struct {
			n string
			v int64
		}{{"sandbox-worker binary", sz.WorkerBytes}, {"sandbox-host binary", sz.HostBytes}, {"sandbox-broker binary", sz.BrokerBytes}} {
			if f.v > 0 {
				p("| %s | %.2f MiB |\n", f.n, float64(f.v)/(1<<20))
			}
		}
	}
	if rd := in.Ready; rd != nil && rd.Summary.N > 0 {
		p("| sandbox-host start to READY (%s; n=%d) | median %s ms, p95 %s ms, max %s ms |\n", rd.Method, rd.Summary.N, ms(rd.Summary.Median), ms(rd.Summary.P95), ms(rd.Summary.Max))
	}
	if rd := in.Ready; rd != nil && len(rd.Errors) > 0 {
		p("| sandbox-host restarts that failed | %d: %s |\n", len(rd.Errors), oneLine(strings.Join(rd.Errors, "; ")))
	}
	p("\n")
	if in.StandbyMem != nil {
		writeStandbyMem(&b, in.StandbyMem)
	}
	writeRuntimes(&b, in.Runtimes)
	if in.Notes != "" {
		p("## Notes from this run\n\n%s\n", strings.TrimSpace(in.Notes))
	}
	return b.String(), nil
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "`", "'")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// Figure is one SVG figure the report links.
type Figure struct {
	File    string // name inside the figures directory
	Href    string // link from the report
	Caption string
}

// writeFigures links the figures drawn from this run's results; it says
// nothing at all when figures were not asked for.
func writeFigures(b *strings.Builder, in *Inputs) {
	if len(in.Figures) == 0 && len(in.FigureNotes) == 0 {
		return
	}
	b.WriteString("## Figures\n\nDrawn from this run's raw results (gonum plot, `bench/internal/figures`).\n\n")
	for _, f := range in.Figures {
		fmt.Fprintf(b, "![%s](%s)\n\n*%s.*\n\n", f.Caption, f.Href, f.Caption)
	}
	for _, n := range in.FigureNotes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	if len(in.FigureNotes) > 0 {
		b.WriteString("\n")
	}
}
