package report

import (
	"strings"
	"testing"
)

func TestSessionsTargets(t *testing.T) {
	fast := &Sessions{FileBytes: 1 << 20, ExecMs: []float64{2, 3, 4}, DockerExecMs: []float64{100, 120, 140},
		PutMs: []float64{10, 12}, GetMs: []float64{9, 11}, ResumeFirstOutputMs: []float64{40, 60}, PausedWindowMs: 3000, PausedMemoryBytes: 8 << 20}
	slow := &Sessions{FileBytes: 1 << 20, ExecMs: []float64{20, 30, 40}, DockerExecMs: []float64{100, 120, 140},
		PutMs: []float64{30}, GetMs: []float64{9}, ResumeFirstOutputMs: []float64{140}, PausedCPUUsec: 250, PausedWindowMs: 3000}
	for _, tc := range []struct {
		name string
		in   *Sessions
		want []string
	}{
		{"all met", fast, []string{"met", "met", "met", "met", "met"}},
		{"all missed", slow, []string{"**missed**", "**missed**", "**missed**", "**missed**", "**missed**"}},
		{"a failure misses the exec goal", &Sessions{FileBytes: 1 << 20, ExecMs: fast.ExecMs, DockerExecMs: fast.DockerExecMs, PutMs: fast.PutMs, GetMs: fast.GetMs,
			ResumeFirstOutputMs: fast.ResumeFirstOutputMs, PausedWindowMs: 3000, Failures: []string{"exec: boom"}}, []string{"**missed**", "met", "met", "met", "met"}},
		{"paused cost unreadable", &Sessions{FileBytes: 1 << 20, ExecMs: fast.ExecMs, DockerExecMs: fast.DockerExecMs, PutMs: fast.PutMs, GetMs: fast.GetMs,
			ResumeFirstOutputMs: fast.ResumeFirstOutputMs, PausedNote: "not measured: no cgroup\nsecond line"}, []string{"met", "met", "met", "met", "not measured"}},
		{"skipped", &Sessions{Skipped: "no toolbox"}, []string{"not measured", "not measured", "not measured", "not measured", "not measured"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := targetsSessions(&Inputs{Sessions: tc.in})
			if len(got) != len(tc.want) {
				t.Fatalf("got %d rows, want %d", len(got), len(tc.want))
			}
			for i, row := range got {
				if row.Verdict != tc.want[i] {
					t.Errorf("row %q: verdict %q, want %q (measured %q)", row.What, row.Verdict, tc.want[i], row.Measured)
				}
			}
		})
	}
	for _, row := range targetsSessions(&Inputs{Sessions: &Sessions{PausedNote: "a\nb"}}) {
		if strings.Contains(row.Measured, "\n") {
			t.Errorf("row %q spans lines: %q", row.What, row.Measured)
		}
	}
	if got := targetsSessions(&Inputs{}); got[0].Verdict != "not measured" || !strings.Contains(got[0].Measured, "no sessions.json") {
		t.Errorf("no results: %+v", got[0])
	}
}

func TestSessionsSection(t *testing.T) {
	var b strings.Builder
	writeSessions(&b, &Sessions{Rounds: 2, FileBytes: 1 << 20, ExecMs: []float64{2, 4}, DockerExecMs: []float64{100, 120},
		PausedCPUUsec: 0, PausedWindowMs: 3000, PausedMemoryBytes: 6 << 20, Failures: []string{"put: refused\nsecond line"}})
	got := b.String()
	for _, want := range []string{"## 1c. Sessions", "| exec of `true` (API, NDJSON to its result) | 2 | 3.00 |", "| put 1024 KiB (API, `files/raw`: the bytes as the body) | 0 | - |", "put 1024 KiB", "used 0 µs of CPU over 3000 ms", "- failure: `put: refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("section lacks %q:\n%s", want, got)
		}
	}
	b.Reset()
	writeSessions(&b, nil)
	if !strings.Contains(b.String(), "Not measured in this run.") {
		t.Errorf("nil: %s", b.String())
	}
}
