package fleetmetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// TestMetricsFromEvents: events count by kind, commits feed the latency
// histogram, a partition is owned from a take until the fence refuses.
func TestMetricsFromEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, 4)
	a, b := "chan-a", "chan-b"
	for fleet.Partition(a, 4) == fleet.Partition(b, 4) {
		b += "x"
	}
	m.Published()
	for _, e := range []fleet.Event{
		{Kind: fleet.EventTaken, Channel: a}, {Kind: fleet.EventCommitted, Channel: a, Took: 30 * time.Millisecond},
		{Kind: fleet.EventTaken, Channel: b}, {Kind: fleet.EventRefused, Channel: b},
		{Kind: fleet.EventAnswered, Channel: a}, {Kind: fleet.EventReturned, Channel: a}, {Kind: fleet.EventGivenUp, Channel: a},
	} {
		m.Event(e)
	}
	want := map[string]float64{
		"sandbox_fleet_turns_published_total":       1,
		"sandbox_fleet_turn_events_total/taken":     2,
		"sandbox_fleet_turn_events_total/committed": 1,
		"sandbox_fleet_turn_events_total/refused":   1,
		"sandbox_fleet_turn_events_total/answered":  1,
		"sandbox_fleet_turn_events_total/returned":  1,
		"sandbox_fleet_turn_events_total/given_up":  1,
		"sandbox_fleet_commit_seconds":              1, // sample count
		"sandbox_fleet_partitions_owned":            1, // a's; b's was refused
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range mt.GetLabel() {
				key += "/" + l.GetValue()
			}
			switch {
			case mt.Counter != nil:
				got[key] = mt.GetCounter().GetValue()
			case mt.Gauge != nil:
				got[key] = mt.GetGauge().GetValue()
			case mt.Histogram != nil:
				got[key] = float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestDoubleRunsMetric: a take that is not the turn's first run (Runs > 1,
// as the claim counted it) counts once in sandbox_fleet_double_runs_total; a
// first take does not. The other half, that the engine reports such a
// take exactly once when a paused owner's turn runs again, is pkg/fleet's
// TestDoubleRunsCounted (moved from there with this package).
func TestDoubleRunsMetric(t *testing.T) {
	m := New(prometheus.NewRegistry(), 2)
	for _, e := range []fleet.Event{
		{Kind: fleet.EventTaken, Channel: "chan-double", Runs: 1},
		{Kind: fleet.EventTaken, Channel: "chan-double", Runs: 2},
		{Kind: fleet.EventCommitted, Channel: "chan-double", Runs: 2},
	} {
		m.Event(e)
	}
	var got dto.Metric
	if err := m.doubleRuns.Write(&got); err != nil {
		t.Fatal(err)
	}
	if got := got.GetCounter().GetValue(); got != 1 {
		t.Errorf("sandbox_fleet_double_runs_total = %v, want 1", got)
	}
}
