// Package figures draws the benchmark's SVG figures from a results
// directory's parsed files (report.Inputs) with gonum's plot. It draws only
// what was measured: a figure whose series are all absent is skipped and a
// series that is absent is left out, each with a note saying so, never drawn
// from made-up numbers.
package figures

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// File names of the figures inside the output directory.
const (
	FileLatency    = "turn-latency.svg"
	FilePhases     = "cold-turn-phases.svg"
	FileThroughput = "burst-throughput.svg"
	FileFailover   = "fleet-failover.svg"
)

// Fleet is make fleet-bench's fleet.json (test/fleet/fleetbench writes the
// same shape): failover times per fault kind.
type Fleet struct {
	Faults []FleetFault `json:"faults"`
}

// FleetFault is one fault kind's failover samples (fault to the first
// committed turn of each affected channel).
type FleetFault struct {
	Kind       string    `json:"kind"`
	FailoverMs []float64 `json:"failoverMs"`
}

// ReadFleet reads the fleet bench's failover samples (make fleet-bench
// writes them to bench/results/fleet.json); nil without error when the file
// is absent.
func ReadFleet(path string) (*Fleet, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f Fleet
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

// Latency series: the report's series name and the figure's short label.
var latencySeries = []struct{ name, label string }{
	{report.SeriesHost, "cold turn"},
	{report.SeriesHostStandby, "standby turn"},
	{report.SeriesDocker, "docker run --rm -i"},
}

// coldPhases are the journal phases of a cold turn that run one after the
// other, in order (report.Path); unit_start runs alongside create and
// stdin_gate inside run, so stacking them would count time twice.
var coldPhases = []string{"prepare", "create", "run", "remove", "unit_stop", "files"}

// Result is what Write drew and what it left out.
type Result struct {
	Figures []report.Figure
	Notes   []string
}

// Write draws every figure it has data for into dir (created if needed).
func Write(in *report.Inputs, fleet *Fleet, dir string) (Result, error) {
	var res Result
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	// A figure of an earlier run must not sit beside this run's tables.
	for _, f := range []string{FileLatency, FilePhases, FileThroughput, FileFailover} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, err
		}
	}
	for _, d := range []func(*report.Inputs, *Fleet) (*plot.Plot, report.Figure, []string){
		latency, phases, throughput, failover,
	} {
		p, fig, notes := d(in, fleet)
		res.Notes = append(res.Notes, notes...)
		if p == nil {
			continue
		}
		if err := save(p, filepath.Join(dir, fig.File)); err != nil {
			return res, fmt.Errorf("%s: %w", fig.File, err)
		}
		res.Figures = append(res.Figures, fig)
	}
	return res, nil
}

func save(p *plot.Plot, path string) error {
	w, err := p.WriterTo(16*vg.Centimeter, 10*vg.Centimeter, "svg")
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func latency(in *report.Inputs, _ *Fleet) (*plot.Plot, report.Figure, []string) {
	fig := report.Figure{File: FileLatency, Caption: "Latency of a cold turn, a turn on a standby and docker run --rm -i (box: quartiles, whiskers: 1.5 IQR, points: outliers), fixed-cost run"}
	if in.FixedCost == nil {
		return nil, fig, []string{FileLatency + ": not drawn, no fixed-cost results"}
	}
	p := plot.New()
	p.Title.Text = "Turn latency (fixed-cost run)"
	p.Y.Label.Text = "ms"
	var names, notes []string
	for _, s := range latencySeries {
		xs := samples(in.FixedCost, s.name)
		if len(xs) == 0 {
			notes = append(notes, fmt.Sprintf("%s: %q not measured, left out", FileLatency, s.name))
			continue
		}
		b, err := plotter.NewBoxPlot(vg.Points(30), float64(len(names)), plotter.Values(xs))
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %q: %v", FileLatency, s.name, err))
			continue
		}
		p.Add(b)
		names = append(names, s.label)
	}
	if len(names) == 0 {
		return nil, fig, append(notes, FileLatency+": not drawn, none of its series measured")
	}
	p.NominalX(names...)
	p.Y.Min = 0 // a box floating high must not look small
	return p, fig, notes
}

func samples(fc *report.FixedCost, name string) []float64 {
	for _, s := range fc.Series {
		if s.Name == name {
			return s.SamplesMs
		}
	}
	return nil
}

func phases(in *report.Inputs, _ *Fleet) (*plot.Plot, report.Figure, []string) {
	fig := report.Figure{File: FilePhases, Caption: "Where a cold turn's milliseconds go: median of each sequential host phase (journal), stacked; unit start runs alongside create and is not stacked"}
	if in.Phases == nil || len(in.Phases.SamplesMs) == 0 {
		return nil, fig, []string{FilePhases + ": not drawn, no per-turn phase samples (phases.json)"}
	}
	p := plot.New()
	p.Title.Text = "A cold turn's phases (medians)"
	p.Y.Label.Text = "ms"
	var notes []string
	var below *plotter.BarChart
	var legend []*plotter.BarChart
	var labels []string
	var sum float64
	n := 0
	add := func(label string, v float64) {
		b, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(60))
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %s: %v", FilePhases, label, err))
			return
		}
		b.Color = plotutil.Color(n)
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		p.Add(b)
		legend, labels = append(legend, b), append(labels, label)
		below = b
		n++
	}
	for _, ph := range coldPhases {
		xs := in.Phases.SamplesMs[ph]
		if len(xs) == 0 {
			notes = append(notes, fmt.Sprintf("%s: phase %q not recorded, left out", FilePhases, ph))
			continue
		}
		m := stats.Quantile(xs, 0.5)
		sum += m
		add(ph, m)
	}
	if n == 0 {
		return nil, fig, append(notes, FilePhases+": not drawn, none of its phases recorded")
	}
	// The rest of the host's own total, so the bar's height is the turn's.
	if xs := in.Phases.SamplesMs[journal.PhaseHostTotal]; len(xs) > 0 {
		if rest := stats.Quantile(xs, 0.5) - sum; rest > 0 {
			add("other (host total minus the above)", rest)
		}
	}
	// Top to bottom, as the bar is stacked.
	for i := len(legend) - 1; i >= 0; i-- {
		p.Legend.Add(labels[i], legend[i])
	}
	p.NominalX("cold turn")
	p.Legend.Top = true
	return p, fig, notes
}

func throughput(in *report.Inputs, _ *Fleet) (*plot.Plot, report.Figure, []string) {
	fig := report.Figure{File: FileThroughput, Caption: "Throughput of a burst of first turns against the admission cap: answered turns per second of wall time, median over bursts"}
	if in.Burst == nil || len(in.Burst.Variants) == 0 {
		return nil, fig, []string{FileThroughput + ": not drawn, no burst results (burst.json)"}
	}
	var vals plotter.Values
	var names, notes []string
	for _, v := range in.Burst.Variants {
		var rates []float64
		for _, r := range v.Runs {
			if r.WallMs > 0 {
				rates = append(rates, float64(len(r.LatenciesMs))/(r.WallMs/1000))
			}
		}
		if len(rates) == 0 {
			notes = append(notes, fmt.Sprintf("%s: %q has no timed burst, left out", FileThroughput, v.Name))
			continue
		}
		vals = append(vals, stats.Quantile(rates, 0.5))
		names = append(names, v.Name)
	}
	if len(vals) == 0 {
		return nil, fig, append(notes, FileThroughput+": not drawn, no timed burst")
	}
	b, err := plotter.NewBarChart(vals, vg.Points(40))
	if err != nil {
		return nil, fig, append(notes, fmt.Sprintf("%s: %v", FileThroughput, err))
	}
	b.Color = plotutil.Color(0)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Burst of %d first turns: throughput by admission", in.Burst.Channels)
	p.Y.Label.Text = "turns/s"
	p.Add(b)
	p.NominalX(names...)
	return p, fig, notes
}

func failover(_ *report.Inputs, fl *Fleet) (*plot.Plot, report.Figure, []string) {
	fig := report.Figure{File: FileFailover, Caption: "The fleet's failover time by fault: fault to the first committed turn of each affected channel (make fleet-bench)"}
	if fl == nil || len(fl.Faults) == 0 {
		return nil, fig, []string{FileFailover + ": not drawn, no fleet.json (make fleet-bench writes its numbers only as Markdown)"}
	}
	faults := append([]FleetFault(nil), fl.Faults...)
	sort.Slice(faults, func(i, j int) bool { return faults[i].Kind < faults[j].Kind })
	p := plot.New()
	p.Title.Text = "Fleet failover by fault"
	p.Y.Label.Text = "s"
	var names, notes []string
	for _, f := range faults {
		if len(f.FailoverMs) == 0 {
			notes = append(notes, fmt.Sprintf("%s: fault %q has no failover sample, left out", FileFailover, f.Kind))
			continue
		}
		secs := make(plotter.Values, len(f.FailoverMs))
		for i, v := range f.FailoverMs {
			secs[i] = v / 1000
		}
		b, err := plotter.NewBoxPlot(vg.Points(20), float64(len(names)), secs)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %q: %v", FileFailover, f.Kind, err))
			continue
		}
		p.Add(b)
		names = append(names, f.Kind)
	}
	if len(names) == 0 {
		return nil, fig, append(notes, FileFailover+": not drawn, no fault has a failover sample")
	}
	p.NominalX(names...)
	return p, fig, notes
}
