package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// Turn results (label "result" of sandbox_turns_total).
const (
	resultOK     = "ok"
	resultNotOK  = "reply_not_ok"
	resultFailed = "failed"
	// resultUnitFailed: a broker or credential unit failed (UnitFailure).
	resultUnitFailed = "unit_failed"
	resultDeadline   = "deadline"
	resultCancelled  = "cancelled"
	resultCleanup    = "cleanup_failed"
	resultShutdown   = "shutdown"
	resultGone       = "client_gone"
)

type metrics struct {
	turns           *prometheus.CounterVec
	duration        prometheus.Histogram
	phases          *prometheus.HistogramVec
	queueWaiting    prometheus.GaugeFunc
	running         prometheus.GaugeFunc
	cleanupFailures *prometheus.CounterVec
	refused         *prometheus.CounterVec
	standbyTakes    *prometheus.CounterVec
	standbyDiscards *prometheus.CounterVec
	standbyPrepares *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, q *admission.Queue) *metrics {
	// Sub-millisecond buckets too: prepare, attach, files and removal take well under 5 ms.
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	m := &metrics{
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_turns_total", Help: "Turns run, by result.",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandbox_turn_duration_seconds", Help: "Whole turn duration from admission to cleanup.", Buckets: buckets,
		}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandbox_turn_phase_seconds", Help: "Duration of each turn phase.", Buckets: buckets,
		}, []string{"phase"}),
		queueWaiting: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandbox_queue_waiting", Help: "Turns waiting in all channel queues.",
		}, func() float64 { w, _ := q.Totals(); return float64(w) }),
		running: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sandbox_turns_running", Help: "Turns running now.",
		}, func() float64 { _, r := q.Totals(); return float64(r) }),
		cleanupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_cleanup_failures_total", Help: "Turn cleanup steps that failed and need operator inspection.",
		}, []string{"what"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_api_errors_total", Help: "API requests answered with an error, by HTTP status.",
		}, []string{"status"}),
		standbyTakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_standby_turns_total", Help: "Turns by whether they found a ready standby (result hit or miss; reason of a miss).",
		}, []string{"result", "reason"}),
		standbyDiscards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_standby_discards_total", Help: "Standbys discarded unused, by reason.",
		}, []string{"reason"}),
		standbyPrepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_standby_prepares_total", Help: "Standby preparations by result (ok, failed, capped: skipped at standby.max).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.turns, m.duration, m.phases, m.queueWaiting, m.running, m.cleanupFailures, m.refused,
		m.standbyTakes, m.standbyDiscards, m.standbyPrepares)
	return m
}

// standbyEvent counts what the standby pool reports.
func (m *metrics) standbyEvent(event, reason string) {
	switch event {
	case standby.EventHit:
		m.standbyTakes.WithLabelValues("hit", "").Inc()
	case standby.EventMiss:
		m.standbyTakes.WithLabelValues("miss", reason).Inc()
	case standby.EventDiscard:
		m.standbyDiscards.WithLabelValues(reason).Inc()
	case standby.EventPrepared:
		m.standbyPrepares.WithLabelValues("ok").Inc()
	case standby.EventPrepareFailed:
		m.standbyPrepares.WithLabelValues("failed").Inc()
	case standby.EventCapped:
		m.standbyPrepares.WithLabelValues("capped").Inc()
	}
}
