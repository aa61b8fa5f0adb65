package livesession

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// metrics are the sessions' (docs/operating.md, Metrics).
type metrics struct {
	live    *prometheus.GaugeVec
	standby *prometheus.GaugeVec
	created prometheus.Counter
	refused prometheus.Counter
	closed  *prometheus.CounterVec
	execs   *prometheus.CounterVec
	latency prometheus.Histogram
	resumes *prometheus.CounterVec
	files   *prometheus.CounterVec
	network *prometheus.CounterVec // network.go
	k       *Kind
}

func newMetrics(k *Kind) metrics {
	return metrics{
		k: k,
		live: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandbox_sessions", Help: "Sessions on this box, by state (running, paused).",
		}, []string{"state"}),
		standby: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandbox_sessions_standby", Help: "Session standbys not yet taken, by state (preparing, ready: a plain create takes it).",
		}, []string{"state"}),
		created: prometheus.NewCounter(prometheus.CounterOpts{Name: "sandbox_sessions_created_total", Help: "Sessions admitted."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "sandbox_sessions_refused_total", Help: "Session creates refused at a bound (429)."}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_sessions_closed_total", Help: "Sessions removed, by reason (request, ttl, host stopping, supervisor gone, start failed, other).",
		}, []string{"reason"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_session_execs_total", Help: "Session execs finished, by result (ok, failed, timeout, cancelled, error).",
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandbox_session_exec_seconds", Help: "Session execs from the request to their result, as the host saw them.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60, 600},
		}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_session_resumes_total", Help: "Paused sessions resumed, by cause (request: transparently, explicit).",
		}, []string{"cause"}),
		files: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_session_files_total", Help: "Session file operations done, by op (put, get, getdir).",
		}, []string{"op"}),
		network: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_session_network_execs_total", Help: "Session network execs by outcome (granted, denied, timeout, withdrawn, bind_failed, revoke_failed).",
		}, []string{"outcome"}),
	}
}

func (m metrics) register(r prometheus.Registerer) {
	r.MustRegister(m.created, m.refused, m.closed, m.execs, m.latency, m.resumes, m.files, m.network, m)
}

// Describe and Collect make the live and standby gauges read the sessions
// when scraped.
func (m metrics) Describe(ch chan<- *prometheus.Desc) {
	m.live.Describe(ch)
	m.standby.Describe(ch)
}
func (m metrics) Collect(ch chan<- prometheus.Metric) {
	running, paused := 0, 0
	for _, s := range m.k.clients() {
		switch s.Status().State {
		case apiwire.SessionPaused:
			paused++
		case apiwire.SessionRunning:
			running++
		}
	}
	m.live.WithLabelValues("running").Set(float64(running))
	m.live.WithLabelValues("paused").Set(float64(paused))
	m.live.Collect(ch)
	counts := map[string]int{StandbyPreparing: 0, StandbyReady: 0}
	for _, t := range m.k.Listed() {
		if t.Standby != "" {
			counts[t.Standby]++
		}
	}
	for state, n := range counts {
		m.standby.WithLabelValues(state).Set(float64(n))
	}
	m.standby.Collect(ch)
}
