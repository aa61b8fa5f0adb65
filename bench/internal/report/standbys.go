package report

import (
	"fmt"
	"strings"

	"github.com/roundtable-sandbox/sandbox/bench/internal/procmem"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
)

// Results files of the standby idle cost and the runtime comparison.
const (
	FileStandbyMem = "standbymem.json"
	FileRuntimes   = "runtimes.json"
)

// StandbyMem is standbymem.json: what many channels' ready standbys cost
// while they wait, per process kind, summed from /proc/<pid>/smaps_rollup.
type StandbyMem struct {
	Channels   int `json:"channels"`
	StandbyMax int `json:"standbyMax"`
	// Ready is how many channels reported `standby: ready` when read.
	Ready        int            `json:"ready"`
	TurnFailures int            `json:"turnFailures"`
	Errors       []string       `json:"errors,omitempty"`
	Before       []procmem.Kind `json:"before"` // no standby anywhere
	With         []procmem.Kind `json:"with"`   // every channel's standby ready
	LoadStart    string         `json:"loadStart"`
	LoadEnd      string         `json:"loadEnd"`
	MemCurBefore int64          `json:"hostMemoryCurrentBefore"` // bytes, systemd MemoryCurrent
	MemCurWith   int64          `json:"hostMemoryCurrentWith"`
	WaitReadyMs  float64        `json:"waitReadyMs"`
}

// Runtimes is runtimes.json: cold and standby turns per OCI runtime,
// interleaved by rounds, the host restarted with the runtime between
// them (off the clock).
type Runtimes struct {
	Rounds    int            `json:"rounds"`
	Runtimes  []string       `json:"runtimes"`
	Skipped   string         `json:"skipped,omitempty"`
	Series    []turns.Series `json:"series"`
	LoadStart string         `json:"loadStart"`
	LoadEnd   string         `json:"loadEnd"`
}

func kindOf(ks []procmem.Kind, comm string) procmem.Kind {
	for _, k := range ks {
		if k.Comm == comm {
			return k
		}
	}
	return procmem.Kind{Comm: comm}
}

// writeStandbyMem renders the idle cost of many standbys (part of
// section 5).
func writeStandbyMem(b *strings.Builder, sm *StandbyMem) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("### Idle cost of %d channels' standbys\n\n", sm.Channels)
	p("`standby.max: %d`; %d channels switched on, one (cold) turn each (%d failed), then %d of them reported `standby: ready` (GET /v1/channels/{c}) after %.1f s. Rss and Pss summed from `/proc/<pid>/smaps_rollup` per process name, read with no standby anywhere (before) and with every standby ready (with); Pss splits shared pages among the processes sharing them, so the per-standby column is the with-minus-before Pss divided by the ready standbys. Load average %s at start, %s at end.\n\n",
		sm.StandbyMax, sm.Channels, sm.TurnFailures, sm.Ready, sm.WaitReadyMs/1000, sm.LoadStart, sm.LoadEnd)
	p("| process | count before / with | Rss before / with | Pss before / with | Pss per standby |\n| --- | --- | --- | --- | --- |\n")
	var perTotal int64
	for _, k := range sm.With {
		bf := kindOf(sm.Before, k.Comm)
		per := "-"
		if sm.Ready > 0 {
			d := (k.PSSKiB - bf.PSSKiB) / int64(sm.Ready)
			per = fmt.Sprintf("%.2f MiB", float64(d)/1024)
			perTotal += d
		}
		p("| `%s` | %d / %d | %s / %s | %s / %s | %s |\n", k.Comm, bf.Count, k.Count, mib(bf.RSSKiB), mib(k.RSSKiB), mib(bf.PSSKiB), mib(k.PSSKiB), per)
	}
	if sm.Ready > 0 {
		p("| all of the above | | | | %.2f MiB (x %d = %s) |\n", float64(perTotal)/1024, sm.Ready, mib(perTotal*int64(sm.Ready)))
	}
	if sm.MemCurWith > 0 {
		p("\nsandbox-host.service MemoryCurrent (the host and the broker units it starts are separate units; this is the host's own cgroup): %s before, %s with the standbys.\n", mib(sm.MemCurBefore/1024), mib(sm.MemCurWith/1024))
	}
	if len(sm.Errors) > 0 {
		p("\nFailures (first turns, or standbys not ready in time; the first few):\n\n")
	}
	for _, e := range sm.Errors {
		p("- `%s`\n", oneLine(e))
	}
	p("\n")
}

// writeRuntimes renders the runc and runsc comparison.
func writeRuntimes(b *strings.Builder, rt *Runtimes) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## 6. runsc beside runc\n\n")
	if rt == nil {
		p("Not measured in this run.\n\n")
		return
	}
	if rt.Skipped != "" {
		p("Skipped: %s\n\n", rt.Skipped)
		return
	}
	p("A cold turn (the channel switched off and on first, off the clock) and a turn on the ready standby (waited for off the clock) through the host API, for each of %s in turn per round, the config's `runtime` rewritten and sandbox-host restarted between runtimes (off the clock); %d rounds. Load average %s at start, %s at end.\n\n",
		strings.Join(rt.Runtimes, ", "), rt.Rounds, rt.LoadStart, rt.LoadEnd)
	p("| series | n | median ms | p95 ms | min ms | max ms | failures |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	by := map[string]*turns.Series{}
	for i := range rt.Series {
		s := &rt.Series[i]
		by[s.Name] = s
		p("| %s | %d | %s | %s | %s | %s | %d |\n", s.Name, s.Summary.N, ms(s.Summary.Median), ms(s.Summary.P95), ms(s.Summary.Min), ms(s.Summary.Max), s.Failures)
	}
	p("\n")
	for _, kind := range []string{"cold", "standby"} {
		a, c := by["runsc "+kind], by["runc "+kind]
		if a != nil && c != nil && a.Summary.N > 0 && c.Summary.N > 0 {
			p("- runsc / runc, %s: %.2f (medians), %.2f (p95s)\n", kind, stats.Ratio(a.Summary.Median, c.Summary.Median), stats.Ratio(a.Summary.P95, c.Summary.P95))
		}
	}
	for _, s := range rt.Series {
		for _, e := range s.Errors {
			p("- failure (%s): `%s`\n", s.Name, oneLine(e))
		}
	}
	p("\n")
}
