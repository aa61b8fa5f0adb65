package fleet

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsFromEvents: events count by kind, commits feed the latency
// histogram, a partition is owned from a take until the fence refuses.
func TestMetricsFromEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, 4)
	a, b := "chan-a", "chan-b"
	for Partition(a, 4) == Partition(b, 4) {
		b += "x"
	}
	m.Published()
	for _, e := range []Event{
		{Kind: EventTaken, Channel: a}, {Kind: EventCommitted, Channel: a, Took: 30 * time.Millisecond},
		{Kind: EventTaken, Channel: b}, {Kind: EventRefused, Channel: b},
		{Kind: EventAnswered, Channel: a}, {Kind: EventReturned, Channel: a}, {Kind: EventGivenUp, Channel: a},
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
