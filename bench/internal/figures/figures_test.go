package figures

import (
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
)

// sample is small hand-made results: test data, not measurements.
func sample() (*report.Inputs, *Fleet) {
	in := &report.Inputs{
		FixedCost: &report.FixedCost{Series: []turns.Series{
			{Name: report.SeriesHost, SamplesMs: []float64{900, 950, 1000, 1100, 1400}},
			{Name: report.SeriesHostStandby, SamplesMs: []float64{60, 70, 75, 80, 120}},
			{Name: report.SeriesDocker, SamplesMs: []float64{500, 520, 540, 600, 700}},
		}},
		Phases: &report.Phases{SamplesMs: map[string][]float64{
			"prepare": {2, 3}, "create": {40, 50}, "unit_start": {30, 35}, "run": {600, 650},
			"remove": {60, 70}, "unit_stop": {20, 25}, "files": {1, 2},
			journal.PhaseHostTotal: {800, 850},
		}},
		Burst: &report.Burst{Channels: 4, Variants: []report.BurstVariant{
			{Name: "shipped config", Cap: -1, Runs: []report.BurstRun{{WallMs: 2000, LatenciesMs: []float64{1, 2, 3, 4}}}},
			{Name: "globalConcurrency: 4", Cap: 4, Runs: []report.BurstRun{{WallMs: 1000, LatenciesMs: []float64{1, 2, 3, 4}}}},
		}},
	}
	fl := &Fleet{Faults: []FleetFault{
		{Kind: "kill box", FailoverMs: []float64{5000, 8000, 9000}},
		{Kind: "partition box", FailoverMs: []float64{7000, 7500}},
	}}
	return in, fl
}

// wellFormed fails t unless path is well-formed XML with an <svg> root, and
// returns its text.
func wellFormed(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(data)))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", filepath.Base(path), err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", filepath.Base(path), root)
	}
	return string(data)
}

func TestWriteDrawsEveryFigureWithItsSeries(t *testing.T) {
	in, fl := sample()
	dir := t.TempDir()
	res, err := Write(in, fl, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 0 {
		t.Errorf("notes = %q, want none", res.Notes)
	}
	want := map[string][]string{
		FileLatency:    {"cold turn", "standby turn", "docker run --rm -i"},
		FilePhases:     {"prepare", "create", "run", "remove", "unit_stop", "files", "other (host total minus the above)"},
		FileThroughput: {"shipped config", "globalConcurrency: 4"},
		FileFailover:   {"kill box", "partition box"},
	}
	var got []string
	for _, f := range res.Figures {
		got = append(got, f.File)
		if f.Caption == "" {
			t.Errorf("%s: no caption", f.File)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("figures = %q, want %d", got, len(want))
	}
	for file, names := range want {
		svg := wellFormed(t, filepath.Join(dir, file))
		for _, n := range names {
			if !strings.Contains(svg, ">"+n+"<") {
				t.Errorf("%s: series %q not in the SVG", file, n)
			}
		}
	}
	// unit_start runs alongside create: stacking it would count it twice.
	if svg := wellFormed(t, filepath.Join(dir, FilePhases)); strings.Contains(svg, ">unit_start<") {
		t.Errorf("%s stacks unit_start", FilePhases)
	}
}

func TestWriteSkipsMissingWithNotes(t *testing.T) {
	in, _ := sample()
	in.FixedCost.Series = in.FixedCost.Series[:1] // no standby, no docker run
	in.Phases = nil
	in.Burst.Variants[1].Runs = nil
	dir := t.TempDir()
	// A figure left from an earlier run must not survive this one.
	stale := filepath.Join(dir, FileFailover)
	if err := os.WriteFile(stale, []byte("<svg/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Write(in, nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Figures {
		got = append(got, f.File)
	}
	if strings.Join(got, ",") != FileLatency+","+FileThroughput {
		t.Errorf("figures = %q, want latency and throughput only", got)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, w := range []string{report.SeriesHostStandby, report.SeriesDocker, FilePhases + ": not drawn", "globalConcurrency: 4", FileFailover + ": not drawn"} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes %q do not mention %q", res.Notes, w)
		}
	}
	svg := wellFormed(t, filepath.Join(dir, FileLatency))
	if strings.Contains(svg, ">standby turn<") {
		t.Error("latency figure labels a series that was not measured")
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale %s: %v, want removed", FileFailover, err)
	}
}

func TestWriteNothingMeasured(t *testing.T) {
	res, err := Write(&report.Inputs{}, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Figures) != 0 || len(res.Notes) != 4 {
		t.Errorf("figures %v, notes %q: want none and 4 notes", res.Figures, res.Notes)
	}
}

func TestReadFleet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.json")
	if f, err := ReadFleet(path); f != nil || err != nil {
		t.Fatalf("absent: %v, %v; want nil, nil", f, err)
	}
	if err := os.WriteFile(path, []byte(`{"faults":[{"kind":"kill box","failoverMs":[1,2]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFleet(path)
	if err != nil || len(f.Faults) != 1 || f.Faults[0].Kind != "kill box" || len(f.Faults[0].FailoverMs) != 2 {
		t.Fatalf("got %+v, %v", f, err)
	}
}
