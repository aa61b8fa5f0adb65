// Package fleetmetrics is a box's fleet metrics on the host's /metrics in
// fleet mode (docs/fleet.md), fed by the engine's Events (BoxOptions.OnEvent)
// and by the turns the box publishes. Guarantee: every event kind is
// counted from zero (each label exists before its first event), and no
// label carries a channel, a turn id or a payload.
package fleetmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// Metrics are a box's fleet metrics (the host's /metrics in fleet mode),
// fed by its Events (OnEvent) and by the turns it publishes.
type Metrics struct {
	partitions int
	published  prometheus.Counter
	events     *prometheus.CounterVec
	commit     prometheus.Histogram
	restores   *prometheus.CounterVec
	doubleRuns prometheus.Counter

	mu    sync.Mutex
	owned map[int]bool
}

// New registers a box's fleet metrics on reg.
func New(reg prometheus.Registerer, partitions int) *Metrics {
	m := &Metrics{partitions: partitions, owned: map[int]bool{},
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_fleet_turns_published_total", Help: "Turns this box admitted and published to the fleet.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_fleet_turn_events_total", Help: "Turns this box took, by what came of them: taken, committed, refused (by the fence: another box claimed the channel since), returned (handed back uncommitted), answered (already committed: answered from the state without running), given_up (delivered more often than the bound and still refused by the cluster: answered as failed).",
		}, []string{"event"}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandbox_fleet_commit_seconds", Help: "From a turn's publication to this box's commit of it (the turn's run included).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}),
		restores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_fleet_workspace_restores_total", Help: "Channel workspaces restored from the fleet's snapshot before a turn (another box committed since this one), by result.",
		}, []string{"result"}),
		doubleRuns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandbox_fleet_double_runs_total", Help: "Turns this box took that a box had taken before without committing them (a paused, cut-off or dead owner): each runs the turn again (execution is at least once).",
		}),
	}
	owned := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sandbox_fleet_partitions_owned", Help: "Partitions whose latest turn on this box was taken, committed or answered here and not refused by the fence since (a partition whose pin moved while idle counts until its next turn).",
	}, func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(len(m.owned)) })
	for _, k := range []fleet.EventKind{fleet.EventTaken, fleet.EventCommitted, fleet.EventRefused, fleet.EventReturned, fleet.EventAnswered, fleet.EventGivenUp} {
		m.events.WithLabelValues(string(k))
	}
	reg.MustRegister(m.published, m.events, m.commit, m.restores, m.doubleRuns, owned)
	return m
}

// Event counts one Event of this box (BoxOptions.OnEvent).
func (m *Metrics) Event(e fleet.Event) {
	m.events.WithLabelValues(string(e.Kind)).Inc()
	p := fleet.Partition(e.Channel, m.partitions)
	m.mu.Lock()
	switch e.Kind {
	case fleet.EventTaken, fleet.EventCommitted, fleet.EventAnswered:
		m.owned[p] = true
	case fleet.EventRefused:
		delete(m.owned, p)
	}
	m.mu.Unlock()
	if e.Kind == fleet.EventCommitted {
		m.commit.Observe(e.Took.Seconds())
	}
	if e.Kind == fleet.EventTaken && e.Runs > 1 {
		m.doubleRuns.Inc()
	}
}

// Published counts a turn this box published.
func (m *Metrics) Published() { m.published.Inc() }

// Restored counts a workspace restore (result ok or failed).
func (m *Metrics) Restored(result string) { m.restores.WithLabelValues(result).Inc() }
