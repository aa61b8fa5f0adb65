package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// FileIntercept is the interception series' raw results: the output of
// go test -bench for pkg/broker's BenchmarkInterceptPaired and
// BenchmarkIntercept and pkg/credential's BenchmarkGuard and
// BenchmarkGuardPercent (bench/run.sh, section 3c; docs/credentialed-egress.md).
const FileIntercept = "intercept.txt"

// TargetInterceptRatio is issue 37's goal: an intercepted small request on
// a reused connection costs at most this times the same request through a
// plain CONNECT tunnel (the code holding the token).
const TargetInterceptRatio = 1.3

// GoBench is go test -bench output: each benchmark's (name without the
// -GOMAXPROCS suffix) values of each unit, one per -count run.
type GoBench map[string]map[string][]float64

// ParseGoBench reads go test -bench lines ("BenchmarkX/y-2 N v unit v
// unit ..."); other lines are skipped.
func ParseGoBench(text string) GoBench {
	out := GoBench{}
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if out[name] == nil {
				out[name] = map[string][]float64{}
			}
			out[name][f[i+1]] = append(out[name][f[i+1]], v)
		}
	}
	return out
}

// median of a benchmark's unit over its runs (NaN when absent).
func (g GoBench) median(name, unit string) (float64, int) {
	xs := g[name][unit]
	if len(xs) == 0 {
		return math.NaN(), 0
	}
	return stats.Summarize(xs).Median, len(xs)
}

// targetsIntercept are the interception series' rows: the goal on a
// reused connection, the other cases reported beside it, the guard's
// throughput.
func targetsIntercept(in *Inputs) []Target {
	const goal = "no goal (reported)"
	ratioWhat := "intercepted / plain tunnel, small answer, reused connection (paired, median of ratios)"
	if in.Intercept == nil {
		why := "no " + FileIntercept + " in this run (BENCH_EGRESS=0?)"
		return []Target{notMeasured(ratioWhat, fmt.Sprintf("<= %.1fx", TargetInterceptRatio), why)}
	}
	g := in.Intercept
	var out []Target
	paired := func(what, size, target string, ok func(float64) bool) {
		name := "BenchmarkInterceptPaired/reused/" + size
		r, n := g.median(name, "ratio")
		tu, _ := g.median(name, "tunnel-ns/op")
		ic, _ := g.median(name, "intercept-ns/op")
		t := Target{What: what, Target: target}
		if n == 0 {
			t.Measured, t.Verdict = "not measured: "+name+" missing", verdict(false, false)
		} else {
			t.Measured = fmt.Sprintf("%.2fx (%s / %s us, n %d)", r, us(ic), us(tu), n)
			t.Verdict = verdict(true, ok(r))
		}
		out = append(out, t)
	}
	paired(ratioWhat, "small", fmt.Sprintf("<= %.1fx", TargetInterceptRatio), func(r float64) bool { return r <= TargetInterceptRatio })
	paired("intercepted / plain tunnel, 1 MiB answer, reused connection (paired)", "1MiB", goal, func(float64) bool { return true })
	for _, size := range []string{"small", "1MiB"} {
		tu, n1 := g.median("BenchmarkIntercept/tunnel/fresh/"+size, "ns/op")
		ic, n2 := g.median("BenchmarkIntercept/intercept/fresh/"+size, "ns/op")
		t := Target{What: "intercepted / plain tunnel, " + strings.Replace(size, "1MiB", "1 MiB", 1) + " answer, fresh connection (medians)", Target: goal}
		if n1 == 0 || n2 == 0 {
			t.Measured, t.Verdict = "not measured: BenchmarkIntercept missing", verdict(false, false)
		} else {
			t.Measured = fmt.Sprintf("%.2fx (%s / %s us)", ic/tu, us(ic), us(tu))
			t.Verdict = verdict(true, true)
		}
		out = append(out, t)
	}
	plain, n := g.median("BenchmarkGuard", "MB/s")
	pct, _ := g.median("BenchmarkGuardPercent", "MB/s")
	t := Target{What: "reflection guard throughput, 1 MiB text (plain / dense with %XX)", Target: "no goal (60-96 MB/s plain before issue 37)"}
	if n == 0 {
		t.Measured, t.Verdict = "not measured: BenchmarkGuard missing", verdict(false, false)
	} else {
		t.Measured = fmt.Sprintf("%.0f / %.0f MB/s (median of %d)", plain, pct, n)
		t.Verdict = verdict(true, true)
	}
	return append(out, t)
}

func us(ns float64) string {
	if math.IsNaN(ns) {
		return "-"
	}
	return fmt.Sprintf("%.0f", ns/1000)
}
