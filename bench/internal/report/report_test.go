package report

import (
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
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
