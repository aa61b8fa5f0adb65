package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
)

// TestReportLinksFigures: `report --figures` draws into the figures
// directory and the report links what it drew, relative to itself, and
// says what it did not draw.
func TestReportLinksFigures(t *testing.T) {
	root := t.TempDir()
	results := filepath.Join(root, "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	fc := report.FixedCost{Series: []turns.Series{{Name: report.SeriesHost, SamplesMs: []float64{1, 2, 3}}}}
	data, err := json.Marshal(fc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(results, report.FileFixedCost), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "docs", "BENCHMARKS.md")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	fleet := filepath.Join(root, "fleet.json")
	if err := os.WriteFile(fleet, []byte(`{"faults":[{"kind":"kill","failoverMs":[4000,6000]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	figs := filepath.Join(root, "docs", "figures")
	if err := cmdReport([]string{"--results", results, "--out", out, "--figures", figs, "--fleet", fleet}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Figures", "](figures/turn-latency.svg)", "](figures/fleet-failover.svg)", "cold-turn-phases.svg: not drawn"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(figs, "turn-latency.svg")); err != nil {
		t.Error(err)
	}
}
