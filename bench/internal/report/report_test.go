package report

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/bench/internal/coderuns"
	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/procmem"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
)

func verdictOf(t *testing.T, in *Inputs, prefix string) string {
	t.Helper()
	for _, tg := range Targets(in) {
		if strings.HasPrefix(tg.What, prefix) {
			return tg.Verdict
		}
	}
	t.Fatalf("no target %q", prefix)
	return ""
}

func fixed(host, docker float64) *FixedCost {
	return &FixedCost{Series: []turns.Series{
		{Name: SeriesHost, Summary: stats.Summary{N: 30, Median: host}},
		{Name: SeriesDocker, Summary: stats.Summary{N: 30, Median: docker}},
	}}
}

func burst(failures int, shipped, cap16, cap4 float64) *Burst {
	v := func(name string, c, f int, wall float64) BurstVariant {
		return BurstVariant{Name: name, Cap: c, Failures: f, Runs: []BurstRun{{WallMs: wall}}, Wall: stats.Summary{N: 1, Median: wall}}
	}
	return &Burst{Channels: 64, Variants: []BurstVariant{v(BurstShipped, -1, failures, shipped), v("4", 4, 0, cap4), v("16", 16, 0, cap16)}}
}

func withStandby(standby, docker float64) *FixedCost {
	return &FixedCost{Series: []turns.Series{
		{Name: SeriesHostStandby, Summary: stats.Summary{N: 30, Median: standby}},
		{Name: SeriesDocker, Summary: stats.Summary{N: 30, Median: docker}},
	}}
}

func withPrestart(standby, prestart float64) *FixedCost {
	return &FixedCost{Series: []turns.Series{
		{Name: SeriesHostStandby, Summary: stats.Summary{N: 30, Median: standby}},
		{Name: SeriesPrestart, Summary: stats.Summary{N: 30, Median: prestart}},
	}}
}

func runsStandby(host, docker float64) *CodeRuns {
	return &CodeRuns{Series: []coderuns.Series{
		{Name: RunSeriesHostStandby, First: stats.Summary{N: 20, Median: host}},
		{Name: RunSeriesDocker, First: stats.Summary{N: 20, Median: docker}},
	}}
}

func TestTargets(t *testing.T) {
	tests := []struct {
		name   string
		in     *Inputs
		prefix string
		want   string
	}{
		{"ratio met", &Inputs{FixedCost: fixed(160, 200)}, "fixed turn cost", "met"},
		{"ratio missed", &Inputs{FixedCost: fixed(170, 200)}, "fixed turn cost", "**missed**"},
		{"ratio absent", &Inputs{}, "fixed turn cost", "not measured"},
		{"broker worst mode counts", &Inputs{Broker: &Broker{Modes: []BrokerMode{{Diff: stats.Summary{Median: 0.5}}, {Diff: stats.Summary{Median: 1.2}}}}}, "broker overhead", "**missed**"},
		{"broker calls failed", &Inputs{Broker: &Broker{Modes: []BrokerMode{{Failures: 200}}}}, "broker overhead", "**missed**"},
		{"load failure", &Inputs{Load: &Load{Channels: 16, TurnsPerChannel: 4, Failures: 1}}, "failed turns", "**missed**"},
		{"load clean", &Inputs{Load: &Load{Channels: 16, TurnsPerChannel: 4}}, "failed turns", "met"},
		{"host idle over", &Inputs{Load: &Load{HostRSSIdleKiB: 41 * 1024}}, "host idle RSS", "**missed**"},
		{"image small", &Inputs{Sizes: &Sizes{ImageBytes: 7 << 20}}, "worker image", "met"},
		{"ready slow", &Inputs{Ready: &Ready{Summary: stats.Summary{N: 3, Median: 301}}}, "sandbox-host start", "**missed**"},
		{"burst absent", &Inputs{}, "64 simultaneous", "not measured"},
		{"burst skipped", &Inputs{Burst: &Burst{Skipped: "no"}}, "64 simultaneous", "not measured"},
		{"burst clean and no slower than the best cap", &Inputs{Burst: burst(0, 20000, 21000, 25000)}, "64 simultaneous", "met"},
		{"burst slower than the best cap", &Inputs{Burst: burst(0, 22000, 21000, 25000)}, "64 simultaneous", "**missed**"},
		{"burst failures", &Inputs{Burst: burst(3, 20000, 21000, 25000)}, "64 simultaneous", "**missed**"},
		{"b2b 18 of 20", &Inputs{BackToBack: &BackToBack{Turns: 20, Hits: 18, ModelDelayMs: 1500}}, "20 back-to-back", "met"},
		{"b2b 17 of 20", &Inputs{BackToBack: &BackToBack{Turns: 20, Hits: 17, ModelDelayMs: 1500}}, "20 back-to-back", "**missed**"},
		{"b2b without the slow model", &Inputs{BackToBack: &BackToBack{Turns: 20, Hits: 20}}, "20 back-to-back", "not measured"},
		{"standby 0.05", &Inputs{FixedCost: withStandby(25, 500)}, "turn on a standby vs docker", "met"},
		{"standby 0.1", &Inputs{FixedCost: withStandby(50, 500)}, "turn on a standby vs docker", "**missed**"},
		{"standby as fast as the pre-started floor", &Inputs{FixedCost: withPrestart(40, 40)}, "turn on a standby vs the pre-started", "met"},
		{"standby slower than the pre-started floor", &Inputs{FixedCost: withPrestart(77, 47)}, "turn on a standby vs the pre-started", "**missed**"},
		{"pre-started floor absent", &Inputs{FixedCost: withStandby(25, 500)}, "turn on a standby vs the pre-started", "not measured"},
		{"cold 0.35", &Inputs{FixedCost: fixed(140, 400)}, "cold turn vs", "met"},
		{"cold 0.6", &Inputs{FixedCost: fixed(240, 400)}, "cold turn vs", "**missed**"},
		{"run standby refused", &Inputs{RunsStandby: &CodeRuns{Skipped: "the installed host refuses runs.standby"}}, "code run's first output", "not measured"},
		{"run standby 0.1", &Inputs{RunsStandby: runsStandby(24, 240)}, "code run's first output", "met"},
		{"run standby 0.3", &Inputs{RunsStandby: runsStandby(72, 240)}, "code run's first output", "**missed**"},
		{"throughput 5", &Inputs{Load: &Load{TurnsPerSecond: 5.1}}, "16 channels x 4", "met"},
		{"throughput 4.1", &Inputs{Load: &Load{TurnsPerSecond: 4.1}}, "16 channels x 4", "**missed**"},
		{"throughput 2", &Inputs{Load: &Load{TurnsPerSecond: 2}}, "16 channels x 4", "**missed**"},
	}
	for _, tt := range tests {
		if got := verdictOf(t, tt.in, tt.prefix); got != tt.want {
			t.Errorf("%s: verdict %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestMarkdownSaysWhatWasNotMeasured(t *testing.T) {
	md, err := Markdown(&Inputs{ResultsPath: "bench/results/latest"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## 1. Fixed turn cost\n\nNot measured", "## 4. Concurrency\n\nNot measured", "No host trace points"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestMarkdownPhases(t *testing.T) {
	in := &Inputs{
		FixedCost: fixed(150, 250),
		Phases: &Phases{SamplesMs: map[string][]float64{
			"prepare": {1, 2, 3}, journal.PhaseHostTotal: {100, 110, 120}, "surprise": {5},
		}},
	}
	md, err := Markdown(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| policy and directory | 2.00 / 2.90 (3) |",
		"| other: `surprise` | 5.00 / 5.00 (1) |",
		"| API overhead: client-observed median minus host-total median | 40.0 |",
		"Not covered by any trace point in this run: D-Bus socket-unit start",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
}

func TestKeepHandRun(t *testing.T) {
	hand := HandRunHeading + "\n\nrunsc cold 400 ms\n"
	tests := []struct {
		name, md, old, want string
	}{
		{"no old report", "# B\n\nnew\n", "", "# B\n\nnew\n"},
		{"old report without the section", "# B\n\nnew\n", "# B\n\nold\n", "# B\n\nnew\n"},
		{"section carried over", "# B\n\nnew\n", "# B\n\nold\n\n" + hand, "# B\n\nnew\n\n" + hand},
		{"heading text elsewhere is not the section", "# B\n", "# B\nsee " + HandRunHeading + " later\n", "# B\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KeepHandRun(tt.md, []byte(tt.old)); got != tt.want {
				t.Errorf("KeepHandRun = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMarkdownStandbyMemAndRuntimes(t *testing.T) {
	in := &Inputs{
		StandbyMem: &StandbyMem{Channels: 64, StandbyMax: 64, Ready: 64,
			Before: []procmem.Kind{{Comm: "sandbox-host", Count: 1, RSSKiB: 20 * 1024, PSSKiB: 18 * 1024}},
			With: []procmem.Kind{
				{Comm: "sandbox-host", Count: 1, RSSKiB: 30 * 1024, PSSKiB: 18*1024 + 64*512},
				{Comm: "containerd-shim", Count: 64, RSSKiB: 64 * 8 * 1024, PSSKiB: 64 * 4 * 1024},
			}},
		Runtimes: &Runtimes{Rounds: 7, Runtimes: []string{"runc", "runsc"}, Series: []turns.Series{
			{Name: "runc cold", Summary: stats.Summary{N: 7, Median: 300, P95: 400}},
			{Name: "runc standby", Summary: stats.Summary{N: 7, Median: 60, P95: 80}},
			{Name: "runsc cold", Summary: stats.Summary{N: 7, Median: 600, P95: 1000}},
			{Name: "runsc standby", Summary: stats.Summary{N: 7, Median: 120, P95: 100}},
		}},
	}
	md, err := Markdown(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"### Idle cost of 64 channels' standbys",
		"| `sandbox-host` | 1 / 1 | 20.0 MiB / 30.0 MiB | 18.0 MiB / 50.0 MiB | 0.50 MiB |",
		"| `containerd-shim` | 0 / 64 | 0.0 MiB / 512.0 MiB | 0.0 MiB / 256.0 MiB | 4.00 MiB |",
		"| all of the above | | | | 4.50 MiB (x 64 = 288.0 MiB) |",
		"## 6. runsc beside runc",
		"| runsc cold | 7 | 600.0 | 1000.0 |",
		"- runsc / runc, cold: 2.00 (medians), 2.50 (p95s)",
		"- runsc / runc, standby: 2.00 (medians), 1.25 (p95s)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
	md, _ = Markdown(&Inputs{Runtimes: &Runtimes{Skipped: "runsc is not registered"}})
	if !strings.Contains(md, "## 6. runsc beside runc\n\nSkipped: runsc is not registered") {
		t.Errorf("a skipped comparison is not said:\n%s", md)
	}
	if md, _ = Markdown(&Inputs{}); !strings.Contains(md, "## 6. runsc beside runc\n\nNot measured") || strings.Contains(md, "Idle cost of") {
		t.Errorf("absent results are not said as such:\n%s", md)
	}
}
