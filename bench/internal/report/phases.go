package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/promtext"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// phaseFamily is the host's phase histogram (pkg/host).
const phaseFamily = "sandbox_turn_phase_seconds"

// Step is one row of the turn's path, in the order a turn runs it.
type Step struct {
	Want    string // the phase the issue asks for
	Journal string // journal sample name, if any
	Metric  string // phase label of sandbox_turn_phase_seconds, if any
	Note    string
}

// Path is a turn's path. Indented names run inside the row above them.
var Path = []Step{
	{Want: "policy and directory", Journal: "prepare", Metric: "prepare", Note: "workspace, turn directory, policy file"},
	{Want: "D-Bus socket-unit start", Journal: "unit_start", Metric: "unit_start", Note: "host side: D-Bus StartUnit and job wait; concurrent with the container"},
	{Want: "  systemd: socket unit start job", Journal: journal.PhaseSocketJob, Note: "systemd's own share (Starting to Listening)"},
	{Want: "container create", Journal: "create", Metric: "create", Note: "concurrent with unit start"},
	{Want: "attach", Metric: "container_attach"},
	{Want: "start", Metric: "container_start", Note: "dockerd, containerd, shim, runc"},
	{Want: "started container waits for the unit job", Journal: "stdin_gate", Metric: "stdin_gate", Note: "stdin held until the socket unit is up"},
	{Want: "worker run (stdin to the reply frame, or stdout EOF)", Metric: "worker_run", Note: "holds broker activation and the model call; a framed turn's ends at its frame"},
	{Want: "read on after the reply frame", Metric: "frame_drain", Note: "after the reply left, in the cleanup: no exit, no wait on the reply path (docs/sealed-turns.md)"},
	{Want: "  socket listening to the worker's first connect", Journal: journal.PhaseUntilConnect, Note: "systemd view: create, attach, start, worker start"},
	{Want: "  broker activation", Journal: journal.PhaseBrokerActivation, Note: "systemd job start to READY of sandbox-broker@<turn>.service"},
	{Want: "  model call through the broker", Journal: journal.PhaseBrokerModelCall, Note: "the broker's log line"},
	{Want: "  broker ready to the host's stop request", Journal: journal.PhaseBrokerReadyToStop, Note: "model call, worker exit, wait, removal"},
	{Want: "wait", Metric: "container_wait", Note: "only a run not taken at its frame"},
	{Want: "attach + start + worker run + wait", Journal: "run", Metric: "run"},
	{Want: "removal", Journal: "remove", Metric: "remove"},
	{Want: "unit stop", Journal: "unit_stop", Metric: "unit_stop", Note: "host side: D-Bus StopUnit of service and socket"},
	{Want: "  systemd: broker service stop job", Journal: journal.PhaseServiceStopJob, Note: "systemd's own share"},
	{Want: "turn directory and policy removal", Journal: "files", Metric: "files"},
	{Want: "host total (admission to cleanup)", Journal: journal.PhaseHostTotal},
}

func writePhases(b *strings.Builder, in *Inputs) error {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	var hist map[string]*promtext.Histogram
	if fc := in.FixedCost; fc != nil && fc.MetricsAfter != "" {
		before, err := promtext.Parse(fc.MetricsBefore)
		if err != nil {
			return err
		}
		after, err := promtext.Parse(fc.MetricsAfter)
		if err != nil {
			return err
		}
		hist = map[string]*promtext.Histogram{}
		for _, h := range promtext.Delta(before, after) {
			if h.Name == phaseFamily {
				hist[h.Labels["phase"]] = h
			}
		}
	}
	var samples map[string][]float64
	if in.Phases != nil {
		samples = in.Phases.SamplesMs
	}
	if hist == nil && len(samples) == 0 {
		p("No host trace points in this run.\n\n")
		writeEnginePhases(b, in)
		return nil
	}
	p("Measured over the fixed-cost host series only (sequential turns, warm-up excluded). Two sources: **journal** = exact per-turn values (the host's debug `turn phases` line, systemd's job messages for each broker unit, the broker's call log), median and p95 over turns; **metrics** = the host's `%s` histogram, before/after delta: the mean is exact, `~` median/p95 are interpolated inside buckets (bounds 5, 10, 25, 50, 100 ms ...) and are coarse.\n\n", phaseFamily)
	p("| step | journal median / p95 ms (n) | metrics mean ms (~median / ~p95) (n) | note |\n| --- | --- | --- | --- |\n")
	var missing []string
	for _, st := range Path {
		j, m := "-", "-"
		if xs := samples[st.Journal]; st.Journal != "" && len(xs) > 0 {
			s := stats.Summarize(xs)
			j = fmt.Sprintf("%s / %s (%d)", ms(s.Median), ms(s.P95), s.N)
		}
		if h := hist[st.Metric]; st.Metric != "" && h != nil {
			m = fmt.Sprintf("%s (~%s / ~%s) (%.0f)", ms(h.Mean()*1000), ms(h.Quantile(0.5)*1000), ms(h.Quantile(0.95)*1000), h.Count)
		}
		if j == "-" && m == "-" {
			missing = append(missing, strings.TrimSpace(st.Want))
		}
		p("| %s | %s | %s | %s |\n", strings.Replace(st.Want, "  ", "&nbsp;&nbsp;", 1), j, m, st.Note)
	}
	// Whatever else the host recorded, so a renamed or new phase is not lost.
	var extra []string
	for k := range samples {
		if !known(k) {
			extra = append(extra, k)
		}
	}
	for k := range hist {
		if !known(k) {
			extra = append(extra, k+" (metrics)")
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		name := strings.TrimSuffix(k, " (metrics)")
		j, m := "-", "-"
		if xs := samples[name]; len(xs) > 0 && !strings.HasSuffix(k, " (metrics)") {
			s := stats.Summarize(xs)
			j = fmt.Sprintf("%s / %s (%d)", ms(s.Median), ms(s.P95), s.N)
		}
		if h := hist[name]; h != nil && strings.HasSuffix(k, " (metrics)") {
			m = fmt.Sprintf("%s (~%s / ~%s) (%.0f)", ms(h.Mean()*1000), ms(h.Quantile(0.5)*1000), ms(h.Quantile(0.95)*1000), h.Count)
		}
		p("| other: `%s` | %s | %s | |\n", name, j, m)
	}
	if host := series(in.FixedCost, SeriesHost); host != nil {
		if xs := samples[journal.PhaseHostTotal]; len(xs) > 0 {
			d := host.Summary.Median - stats.Quantile(xs, 0.5)
			p("| API overhead: client-observed median minus host-total median | %s | | HTTP over host.sock, admission, queue hand-off, reply encoding |\n", ms(d))
		}
	}
	p("\n")
	if len(missing) > 0 {
		p("Not covered by any trace point in this run: %s.\n\n", strings.Join(missing, ", "))
	}
	if len(samples[journal.PhaseBrokerActivation]) > 0 || len(samples[journal.PhaseBrokerModelCall]) > 0 {
		p("Broker activation, the model call and the systemd-side rows are not host trace points (the host cannot see inside the container or systemd): they come from systemd's job messages (PID 1 logging to the journal: `systemd-analyze set-log-target journal` in the namespace) and the broker's log lines for the same turns.\n\n")
	}
	writeEnginePhases(b, in)
	return nil
}

// enginePhases is the container driver's order (pkg/container).
var enginePhases = []string{"create", "container_attach", "container_start", "worker_run", "frame_drain", "container_wait", "remove"}

// writeEnginePhases shows the Engine API series' exact per-run driver phases:
// the container's share of a turn without the host around it.
func writeEnginePhases(b *strings.Builder, in *Inputs) {
	if in.FixedCost == nil || len(in.FixedCost.EnginePhasesMs) == 0 {
		return
	}
	ph := in.FixedCost.EnginePhasesMs
	fmt.Fprintf(b, "The %s series, exact per run (the same driver code the host uses, timed by its Observe hook; the worker talks to the long-lived baseline broker, so no unit start or activation):\n\n", SeriesEngine)
	b.WriteString("| driver phase | median ms | p95 ms | n |\n| --- | --- | --- | --- |\n")
	var sum float64
	names := append([]string(nil), enginePhases...)
	for k := range ph {
		found := false
		for _, n := range enginePhases {
			found = found || n == k
		}
		if !found {
			names = append(names, k)
		}
	}
	for _, k := range names {
		xs := ph[k]
		if len(xs) == 0 {
			continue
		}
		s := stats.Summarize(xs)
		sum += s.Median
		fmt.Fprintf(b, "| %s | %s | %s | %d |\n", k, ms(s.Median), ms(s.P95), s.N)
	}
	fmt.Fprintf(b, "| sum of medians | %s | | |\n\n", ms(sum))
}

func known(name string) bool {
	for _, st := range Path {
		if st.Journal == name || st.Metric == name {
			return true
		}
	}
	return false
}
