package report

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/bench/internal/coderuns"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

func TestCodeRunsSection(t *testing.T) {
	s := func(name string, first, result float64) coderuns.Series {
		return coderuns.Series{Name: name, First: stats.Summary{N: 20, Median: first, P95: 2 * first}, Result: stats.Summary{N: 20, Median: result, P95: 2 * result}}
	}
	cr := &CodeRuns{Rounds: 20, Warmup: 3, Image: "tb:latest", ImageText: "the small test toolbox", Argv: []string{"echo", "ready"},
		Series: []coderuns.Series{s(RunSeriesHost, 600, 900), s(RunSeriesDocker, 400, 600), s(RunSeriesEngine, 500, 800)}}
	cr.Series[1].Errors = []string{"boom\nline"}
	var b strings.Builder
	writeCodeRuns(&b, cr, fixed(700, 500))
	got := b.String()
	for _, want := range []string{
		"## 1b. Code runs",
		"`tb:latest` (the small test toolbox)",
		"No warm standby",
		"| " + RunSeriesHost + " | 20 | 600.0 | 1200.0 | 900.0 | 1800.0 | - | 0 |",
		"- sandbox-host run / docker run --rm: first output 1.50; 1.50 (difference 200.0 ms), result 1.50; 1.50 (difference 300.0 ms)",
		"- sandbox-host run / Engine API: first output 1.20",
		SeriesHost + " 700.0 ms",
		"- failure (docker run --rm): `boom line`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}

	b.Reset()
	writeCodeRuns(&b, &CodeRuns{Skipped: "no toolbox here"}, nil)
	if got := b.String(); !strings.Contains(got, "Skipped: no toolbox here") || strings.Contains(got, "| series") {
		t.Errorf("skipped section:\n%s", got)
	}
	b.Reset()
	writeCodeRuns(&b, nil, nil)
	if got := b.String(); !strings.Contains(got, "Not measured in this run.") {
		t.Errorf("absent section:\n%s", got)
	}
}
