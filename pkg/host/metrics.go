package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
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
	// resultHeld: refused, the channel's previous cleanup failed (sandbox.HeldError).
	resultHeld     = "channel_held"
	resultShutdown = "shutdown"
	resultGone     = "client_gone"
)

type metrics struct {
	turns           *prometheus.CounterVec
	duration        prometheus.Histogram
	phases          *prometheus.HistogramVec
	queueWaiting    prometheus.GaugeFunc
	running         prometheus.GaugeFunc
	cleanupFailures *prometheus.CounterVec
	refused         *prometheus.CounterVec
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
			Name: "sandbox_cleanup_failures_total", Help: "Cleanup steps that failed and need operator inspection, by kind (sealedturn, coderun, ...) and stage (container, units, turn_dir, policy, scratch).",
		}, []string{"kind", "stage"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_api_errors_total", Help: "API requests answered with an error, by HTTP status.",
		}, []string{"status"}),
	}
	reg.MustRegister(m.turns, m.duration, m.phases, m.queueWaiting, m.running, m.cleanupFailures, m.refused)
	return m
}
