package report

import (
	"fmt"
	"strings"

	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/promtext"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// median of a journal phase, ok=false when absent.
func jmed(in *Inputs, key string) (float64, bool) {
	if in == nil || in.Phases == nil || len(in.Phases.SamplesMs[key]) == 0 {
		return 0, false
	}
	return stats.Quantile(in.Phases.SamplesMs[key], 0.5), true
}

// emed is the median of an Engine API driver phase.
func emed(in *Inputs, key string) (float64, bool) {
	if in == nil || in.FixedCost == nil || len(in.FixedCost.EnginePhasesMs[key]) == 0 {
		return 0, false
	}
	return stats.Quantile(in.FixedCost.EnginePhasesMs[key], 0.5), true
}

// hmean is the exact mean of a host phase histogram over the fixed-cost run.
func hmean(in *Inputs, phase string) (float64, bool) {
	if in == nil || in.FixedCost == nil || in.FixedCost.MetricsAfter == "" {
		return 0, false
	}
	b, err1 := promtext.Parse(in.FixedCost.MetricsBefore)
	a, err2 := promtext.Parse(in.FixedCost.MetricsAfter)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	for _, h := range promtext.Delta(b, a) {
		if h.Name == phaseFamily && h.Labels["phase"] == phase {
			return h.Mean() * 1000, true
		}
	}
	return 0, false
}

// writeAnalysis states, from this run's numbers, where a turn's fixed cost
// goes and what would cut it. Every number in it is computed here.
func writeAnalysis(b *strings.Builder, in *Inputs) {
	host, dock := series(in.FixedCost, SeriesHost), series(in.FixedCost, SeriesDocker)
	eng, rw, rf := series(in.FixedCost, SeriesEngine), series(in.FixedCost, SeriesRuncWorker), series(in.FixedCost, SeriesRuncFloor)
	if host == nil || dock == nil {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	H, D := host.Summary.Median, dock.Summary.Median
	p("## Where the milliseconds go\n\n")
	p("- A turn through the host costs **%s ms** (median) against **%s ms** for `docker run --rm -i` of the same container and turn: ratio **%.2f** (target <= %.1f, so the host would need <= %s ms).\n",
		ms(H), ms(D), H/D, TargetRatio, ms(TargetRatio*D))
	if eng != nil && rw != nil && rf != nil {
		E, R, F := eng.Summary.Median, rw.Summary.Median, rf.Summary.Median
		p("- The same container driven through the Engine API without the host costs %s ms; `runc run` of the same files, binds, limits and turn (broker call included) %s ms; of a trivial payload %s ms. Docker's machinery (dockerd, containerd, shim) adds about **%s ms** over runc alone, and it is the same in `docker run`, in the Engine API series and in the host.\n",
			ms(E), ms(R), ms(F), ms(E-R))
		if st, ok := emed(in, "container_start"); ok {
			p("- Most of that is `ContainerStart` (%s ms median in the Engine API series); create (%s ms), attach, wait and remove are small.", ms(st), msOr(emed(in, "create")))
			if va := in.Variants; va != nil && len(va.Series) > 1 {
				all, bare := va.Series[0].Summary.Median, va.Series[len(va.Series)-1].Summary.Median
				p(" In the flag-group variants (section 2) `docker run` of the trivial payload with every confinement flag costs %s ms and with none of them (%s) %s ms: ", ms(all), va.Series[len(va.Series)-1].Name, ms(bare))
				if all-bare <= 0.05*all {
					p("leaving the confinement out saves nothing measurable (%s ms), so the guarantees are not where the cost is.", ms(all-bare))
				} else {
					p("the flags account for %s ms of it.", ms(all-bare))
				}
			}
			p("\n")
		}
		p("- The host adds **%s ms** over the Engine API series. From its trace points and systemd's:\n", ms(H-E))
		us, okU := jmed(in, "unit_start")
		cr, _ := jmed(in, "create")
		if gate, ok := jmed(in, "stdin_gate"); ok {
			p("  - broker units' start over D-Bus (the service's start, socket and credential set pulled in, waited for until READY): %s ms (in systemd, socket start to READY %s ms, of which the credential set %s ms; the rest is D-Bus and polkit), run while the container is created, attached and started; the started container then waited %s ms (median) for it before stdin;\n",
				msOr(us, okU), msOr(jmed(in, journal.PhaseSocketToReady)), msOr(jmed(in, journal.PhaseCredsetJob)), ms(gate))
		} else if okU {
			p("  - broker socket-unit start over D-Bus: %s ms, of which %s ms is on the critical path (it runs concurrently with a %s ms create only; systemd's own share is %s ms, the rest is D-Bus and polkit);\n",
				ms(us), ms(max(us-cr, 0)), ms(cr), msOr(jmed(in, journal.PhaseSocketJob)))
		}
		if act, ok := jmed(in, journal.PhaseBrokerActivation); ok {
			hw, ok1 := hmean(in, "worker_run")
			ew, ok2 := emed(in, "worker_run")
			if ok1 && ok2 {
				where := "strictly after the container started (on the worker's first connect)"
				if hw-ew < act/2 {
					where = "overlapping the container start (it no longer lengthens the worker's run)"
				}
				p("  - broker activation: %s ms, %s: worker run %s ms in the host against %s ms with an already running broker;\n", ms(act), where, ms(hw), ms(ew))
			} else {
				p("  - broker activation: %s ms;\n", ms(act))
			}
		}
		rm, ok1 := jmed(in, "remove")
		stp, ok2 := jmed(in, "unit_stop")
		fl, _ := jmed(in, "files")
		tot, okT := jmed(in, journal.PhaseHostTotal)
		if ok1 && ok2 {
			when := "before the reply"
			if okT && tot-H > (rm+stp)/2 {
				when = fmt.Sprintf("after the reply (the client sees %s ms, the host's turn ends at %s ms; the channel's next turn waits for it)", ms(H), ms(tot))
			}
			p("  - cleanup %s: removal %s ms, unit stop %s ms (systemd's own share %s ms), files %s ms.\n",
				when, ms(rm), ms(stp), msOr(jmed(in, journal.PhaseServiceStopJob)), ms(fl))
		}
	}
	if sb := series(in.FixedCost, SeriesHostStandby); sb != nil {
		S := sb.Summary.Median
		p("- The warm path takes Docker's container start off the reply path: a turn on the channel's ready standby (container started, broker running, policy and stdin written when the message arrives) costs **%s ms** (median; p95 %s ms): %.2f of docker run (p95 %.2f) and %.2f of the cold path, whose %s ms are what a channel pays for its first turn, for a turn arriving before the replacement standby is ready, or beyond `standby.max`.\n",
			ms(S), ms(sb.Summary.P95), S/D, stats.Ratio(sb.Summary.P95, dock.Summary.P95), S/H, ms(H))
		p("\n")
		return
	}
	if st, ok := emed(in, "container_start"); ok {
		budget := TargetRatio * D
		cmp := "more than"
		if st < budget {
			cmp = fmt.Sprintf("%.0f%% of", 100*st/budget)
		}
		p("- Reaching %.1f of docker run is out of reach while every turn pays Docker's container start on its reply path (%s ms here, %s the %s ms budget on its own). The lever that remains is to take the start off the reply path: keep one started, never-used container per active channel waiting on stdin (turn id, turn directory and socket unit prepared with it; the policy with the turn's identity written, and stdin sent, when the guest message arrives). That is a design change (idle containers hold memory; the deadline label and the reaper must learn about pre-started containers), not a tuning, and needs a decision.\n",
			TargetRatio, ms(st), cmp, ms(budget))
		if pre := series(in.FixedCost, SeriesPrestart); pre != nil {
			act, _ := jmed(in, journal.PhaseBrokerActivation)
			own, _ := jmed(in, "prepare")
			if tot, ok := jmed(in, journal.PhaseHostTotal); ok {
				own += max(H-tot, 0) // API overhead
			}
			est := pre.Summary.Median + act + own
			p("  A measured proxy for the container side of it: the %s series costs %s ms (%.2f of docker run). Adding the broker's activation on the worker's first call (%s ms here) and the host's own prepare and API work (%s ms), a turn would come to about %s ms, %.2f of docker run; pre-starting the broker service as well (reading the policy on its first request instead of at start) would remove the activation too.\n",
				SeriesPrestart, ms(pre.Summary.Median), pre.Summary.Median/D, ms(act), ms(own), ms(est), est/D)
		}
	}
	p("\n")
}

func msOr(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return ms(v)
}
