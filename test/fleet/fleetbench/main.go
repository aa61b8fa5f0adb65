// Command fleetbench is `make fleet-bench` and `make fleet-demo`: the fleet
// on one machine (test/fleet) with stub turns. The bench measures
// throughput on 1, 2 and 4 boxes, the engine's overhead per turn, and
// failover and correctness through at least 20 faults over at least 10,000
// turns, and writes its section of docs/BENCHMARKS.md; the demo starts
// three boxes, kills the busiest and shows its channels answering from the
// others. Root only (network namespaces).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	fleetpkg "github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/test/fleet"
)

func main() {
	demo := flag.Bool("demo", false, "run the demo instead of the bench")
	report := flag.String("report", "docs/BENCHMARKS.md", "file whose fleet section the bench writes")
	minTurns := flag.Int("turns", 10000, "fault phase: at least this many turns")
	minFaults := flag.Int("faults", 20, "fault phase: at least this many faults")
	tpFor := flag.Duration("throughput-for", 30*time.Second, "throughput: measure each box count this long")
	kindList := flag.String("kinds", "", "fault phase: only these fault kinds, comma-separated (default every kind: "+strings.Join(fleet.Kinds, ", ")+")")
	jsonOut := flag.String("json", "bench/results/fleet.json", "file for the failover samples by fault (make bench draws them; empty: none)")
	keep := flag.Bool("keep", false, "keep the run's directory (the boxes' and servers' logs) and print its path")
	flag.Parse()
	if why := fleet.Available(); why != "" {
		fmt.Fprintln(os.Stderr, "fleetbench: skipped:", why)
		os.Exit(0)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "sbx-fleet.")
	if err != nil {
		fail(err)
	}
	if *keep {
		fmt.Println("fleetbench: keeping", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		fail(err)
	}
	bin := filepath.Join(dir, "bin")
	fmt.Println("fleetbench: building fleetit (-tags fleetstub) and sandbox-nats")
	if err := fleet.Build(ctx, filepath.Dir(strings.TrimSpace(string(root))), bin); err != nil {
		fail(err)
	}
	if *demo {
		err = runDemo(ctx, dir, bin)
	} else {
		var kinds []string
		if kinds, err = fleet.SelectKinds(*kindList); err == nil {
			err = runBench(ctx, dir, bin, *report, *jsonOut, *minTurns, *minFaults, *tpFor, kinds, *kindList != "")
		}
	}
	if err != nil {
		os.RemoveAll(dir) // fail exits: the deferred removal would not run
		fail(err)
	}
}

// closeOnSignal cleans up after a signal even when the run does not
// return within 20 s (the namespaces, processes and mounts must go).
func closeOnSignal(ctx context.Context, f *fleet.Fleet) {
	go func() {
		<-ctx.Done()
		t := time.NewTimer(20 * time.Second)
		<-t.C
		fmt.Fprintln(os.Stderr, "fleetbench: interrupted; cleaning up")
		f.Close()
		os.Exit(130)
	}()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fleetbench:", err)
	os.Exit(1)
}

func ms(d time.Duration) string  { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
func sec(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// stepsLine says each step's p50 / p99 (fleet.StepNames order; run is
// the stub turn with its slot's wait).
func stepsLine(by map[string][]time.Duration) string {
	var parts []string
	for _, name := range fleetpkg.StepNames {
		if ds := by[name]; len(ds) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s / %s", name, ms(fleet.Percentile(ds, 50)), ms(fleet.Percentile(ds, 99))))
		}
	}
	return strings.Join(parts, ", ")
}

func peersOf(n int) []int {
	var p []int
	for i := 1; i <= n; i++ {
		p = append(p, i)
	}
	return p
}

// runBench runs the bench; faultsOnly (-kinds given) runs the fault phase
// alone, with only those kinds, and prints its report without writing it.
func runBench(ctx context.Context, dir, bin, report, jsonOut string, minTurns, minFaults int, tpFor time.Duration, faultKinds []string, faultsOnly bool) error {
	start := time.Now()
	f, err := fleet.Start(ctx, fleet.Options{Dir: filepath.Join(dir, "run"), Servers: 4, Partitions: 16, Replicas: 3,
		AckWait: fleet.DefaultAckWait(), Slots: 2, Stub: 200 * time.Millisecond, DiskBox: 4, DiskMB: 128, Bin: bin, Log: os.Stdout})
	if err != nil {
		return err
	}
	defer f.Close()
	closeOnSignal(ctx, f)
	rec := f.Recorder()
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	load := sampleLoad(ctx)

	rates := map[int]float64{}
	var d *fleet.Driver
	var base, probed int
	var took, exec, over []time.Duration
	var steps string
	var toReply []time.Duration
	if !faultsOnly {
		// Throughput on 1, 2 and 4 boxes.
		for _, n := range []int{1, 2, 4} {
			if err := f.StartBoxes(ctx, peersOf(n)); err != nil {
				return err
			}
			d, err := f.StartDriver(ctx, fmt.Sprintf("tp%d", n), 32, 2)
			if err != nil {
				return err
			}
			base := rec.Replies()
			if err := rec.Wait(ctx, func(r *fleet.Recorder) bool { return r.Replies() >= base+50 }); err != nil {
				return err
			}
			// A measurement window, not an assertion: count what it holds.
			c0, t0 := rec.Replies(), time.Now()
			tm := time.NewTimer(tpFor)
			select {
			case <-tm.C:
			case <-ctx.Done():
				return ctx.Err()
			}
			c1, t1 := rec.Replies(), time.Now()
			rates[n] = float64(c1-c0) / t1.Sub(t0).Seconds()
			a, err := d.Stop(ctx)
			if err != nil {
				return err
			}
			fmt.Printf("fleetbench: %d box(es): %.1f turns/s; audit %s\n", n, rates[n], a.Audit)
			for _, i := range peersOf(n) {
				if err := f.StopBox(ctx, i); err != nil {
					return err
				}
			}
		}

		// Overhead: one channel, one turn at a time, on four boxes.
		if err := f.StartBoxes(ctx, peersOf(4)); err != nil {
			return err
		}
		rec.ResetEngineTimes()
		d, err = f.StartDriver(ctx, "probe", 1, 1)
		if err != nil {
			return err
		}
		base = rec.Replies()
		// 200 turns or 2 minutes, whichever comes first: one turn at a time
		// took seconds each on a loaded machine, and the fault phase must run.
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
		_ = rec.Wait(pctx, func(r *fleet.Recorder) bool { return r.Replies() >= base+200 })
		pcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		probed = rec.Replies() - base
		if _, err := d.Stop(ctx); err != nil {
			return err
		}
		took, exec = rec.EngineTimes()
		for i := range took {
			over = append(over, took[i]-exec[i])
		}
		fmt.Printf("fleetbench: engine overhead p50 %s p99 %s (publish to commit %s / %s, stub turn %s / %s)\n",
			ms(fleet.Percentile(over, 50)), ms(fleet.Percentile(over, 99)), ms(fleet.Percentile(took, 50)), ms(fleet.Percentile(took, 99)),
			ms(fleet.Percentile(exec, 50)), ms(fleet.Percentile(exec, 99)))
		steps = stepsLine(rec.EngineSteps())
		fmt.Println("fleetbench: engine overhead by step, p50 / p99:", steps)
		// The reply is stored (the frontend can be answered) before the
		// ack, which Took includes: said apart, not in the verdict.
		if acks := rec.EngineSteps()["ack"]; len(acks) == len(over) {
			for i := range over {
				toReply = append(toReply, over[i]-acks[i])
			}
			fmt.Printf("fleetbench: engine overhead to the reply stored (before the ack) p50 %s p99 %s\n", ms(fleet.Percentile(toReply, 50)), ms(fleet.Percentile(toReply, 99)))
		}
	} else if err := f.StartBoxes(ctx, peersOf(4)); err != nil {
		return err
	}

	// Faults.
	d, err = f.StartDriver(ctx, "faults", 48, 2)
	if err != nil {
		return err
	}
	base = rec.Replies()
	if err := rec.Wait(ctx, func(r *fleet.Recorder) bool { return r.Replies() >= base+200 }); err != nil {
		return err
	}
	var results []fleet.FaultResult
	var faultErr error
	for k := 0; (len(results) < minFaults || rec.Replies()-base < minTurns) && k < 4*minFaults; k++ {
		kind := faultKinds[k%len(faultKinds)]
		res, err := f.Fault(ctx, kind, peersOf(4), 60*time.Second, 100)
		results = append(results, res)
		if err != nil {
			faultErr = err
			fmt.Println("fleetbench: fault error (the run stops here):", err)
			break
		}
		fmt.Printf("fleetbench: fault %d %s on box%d: %d channels, failover p50 %s max %s, %d missed, %d unanswered after the restore, %d turns so far\n",
			len(results), kind, res.Box, res.Affected, sec(fleet.Percentile(res.Failover, 50)), sec(fleet.Percentile(res.Failover, 100)), res.Missed, len(res.Unanswered), rec.Replies()-base)
	}
	a, err := d.Stop(ctx)
	if err != nil {
		return err
	}
	fmt.Println("fleetbench: fault phase audit:", a.Audit)

	// Report.
	var all []time.Duration
	byKind := map[string][]time.Duration{}
	missed, late, unanswered, pauses := 0, 0, 0, 0
	for _, r := range results {
		all = append(all, r.Failover...)
		byKind[r.Kind] = append(byKind[r.Kind], r.Failover...)
		missed += r.Missed
		unanswered += len(r.Unanswered)
		if r.Kind == fleet.PauseOwner {
			// At the end: the paused box's last commit attempts come after
			// its fault returned.
			late += rec.StaleCommits(fleet.BoxName(r.Box), r.At, r.Restored)
			pauses++
		}
	}
	if faultsOnly {
		jsonOut = ""
	}
	if err := writeFailoverJSON(jsonOut, byKind); err != nil {
		return err
	}
	lmin, lavg, lmax := load()
	p50, p99 := fleet.Percentile(all, 50), fleet.Percentile(all, 99)
	o50, o99 := fleet.Percentile(over, 50), fleet.Percentile(over, 99)
	add("### Fleet (`make fleet-bench`)")
	add("")
	add("Written by `make fleet-bench` (`test/fleet/fleetbench`) on %s (%s); the machine's 1-minute load average during the run: min %.1f, mean %.1f, max %.1f (other work shared its 2 cores).", start.UTC().Format("2006-01-02 15:04 UTC"), sec(time.Since(start)), lmin, lavg, lmax)
	add("Four boxes as network namespaces on one 2-core machine, each with its own nats-server (sandbox-nats: TLS, nkeys, AES at rest, `sync_interval: always`) and a box process (pkg/fleet Box);")
	add("16 partitions, R3, AckWait %s, **stub turns** (200 ms, 2 at once per box, standing in for a box's capacity), not containers.", fleet.DefaultAckWait())
	add("")
	add("| what | goal | measured | verdict |")
	add("| --- | --- | --- | --- |")
	add("| lost / duplicated / reordered committed turns (%d turns, %d faults) | 0 / 0 / 0 | %d / %d / %d (extra commits %d, failed replies %d) | %s |", a.Turns, len(results), a.Lost, a.Dup, a.Reord, a.Extra, a.Failed, verdict(a.Lost+a.Dup+a.Reord+a.Extra == 0))
	add("| replies per turn id | exactly 1 | %s | %s |", onePerTurn(a), verdict(a.Lost == 0 && a.Dup == 0))
	add("| failover, fault to first committed turn of each affected channel (%d channel-faults, %d without one in 60 s) | p50 <= 10 s, p99 <= 20 s | p50 %s, p99 %s | %s |", len(all), missed, sec(p50), sec(p99), verdict(p50 <= 10*time.Second && p99 <= 20*time.Second && missed == 0))
	add("| channels unanswered after a fault's restore (a partition left to no box) | 0 | %d | %s |", unanswered, verdict(unanswered == 0))
	add("| commits by a paused owner of the turns it held that another box took meanwhile (%d pauses) | 0 | %d | %s |", pauses, late, verdict(late == 0))
	if !faultsOnly {
		// Not measured in a fault-phase-only run (-kinds).
		add("| throughput 2 boxes vs 1 | >= 1.6 x | %.2f x (%.1f vs %.1f turns/s) | %s |", rates[2]/rates[1], rates[2], rates[1], verdict(rates[2] >= 1.6*rates[1]))
		add("| throughput 4 boxes vs 1 | >= 3.2 x | %.2f x (%.1f vs %.1f turns/s) | %s |", rates[4]/rates[1], rates[4], rates[1], verdict(rates[4] >= 3.2*rates[1]))
		add("| engine overhead per turn (publish to commit minus the turn itself) | p50 <= 10 ms, p99 <= 50 ms | p50 %s, p99 %s | %s |", ms(o50), ms(o99), verdict(o50 <= 10*time.Millisecond && o99 <= 50*time.Millisecond))
	}
	add("| turns run more than once (a paused or cut-off owner's take redone; counted, not a fault) | - | %d | - |", a.Double)
	add("")
	if !faultsOnly {
		add("- Overhead: one channel, one turn at a time (%d turns), on the four-box fleet: publish to commit p50 %s / p99 %s against the stub turn on its box %s / %s (the one-box turn, same run).",
			probed, ms(fleet.Percentile(took, 50)), ms(fleet.Percentile(took, 99)), ms(fleet.Percentile(exec, 50)), ms(fleet.Percentile(exec, 99)))
		add("- Overhead by step (fleet.Event.Steps), p50 / p99: %s.", steps)
		if len(toReply) > 0 {
			add("- Overhead to the reply stored (the frontend can be answered; the ack follows): p50 %s, p99 %s.", ms(fleet.Percentile(toReply, 50)), ms(fleet.Percentile(toReply, 99)))
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	add("")
	add("| fault | faults | affected channels | failover p50 | p99 | max | without one in 60 s |")
	add("| --- | --- | --- | --- | --- | --- | --- |")
	for _, k := range kinds {
		n, ch, miss := 0, 0, 0
		for _, r := range results {
			if r.Kind == k {
				n, ch, miss = n+1, ch+r.Affected, miss+r.Missed
			}
		}
		ds := byKind[k]
		add("| %s | %d | %d | %s | %s | %s | %d |", k, n, ch, sec(fleet.Percentile(ds, 50)), sec(fleet.Percentile(ds, 99)), sec(fleet.Percentile(ds, 100)), miss)
	}
	add("")
	add("- Paused owner: SIGSTOP, SIGCONT once every affected channel answered from another box; a commit by the paused box, after SIGCONT, of a turn it had taken before SIGSTOP and another box took since counts above (the fence must refuse them; a turn nobody took meanwhile is still its claim, and its later commits are new turns once its partitions come back).")
	add("- A box's home partitions return to it after a fault once it has announced them for StandbyDelay (2 x AckWait); failover includes the presence timeout (AckWait) after which the other boxes stand by for an unheard box's partitions.")
	add("- Full disk: the store of box 4's nats-server is a 128 MiB tmpfs filled to ENOSPC; restored by removing the filler and restarting that server (JetStream disables itself on a write error).")
	if faultErr != nil {
		add("- The fault phase stopped early: %v", faultErr)
	}
	if faultsOnly {
		fmt.Println("fleetbench: fault phase only (-kinds): the report is printed, not written")
		fmt.Println(strings.Join(lines, "\n"))
		return nil
	}
	if err := writeSection(report, lines); err != nil {
		return err
	}
	fmt.Printf("fleetbench: wrote the fleet section of %s\n", report)
	return nil
}

// writeFailoverJSON writes the failover samples by fault kind in the shape
// bench/internal/figures reads (its Fleet), so make bench can draw them.
func writeFailoverJSON(path string, byKind map[string][]time.Duration) error {
	if path == "" {
		return nil
	}
	type fault struct {
		Kind       string    `json:"kind"`
		FailoverMs []float64 `json:"failoverMs"`
	}
	var out struct {
		Faults []fault `json:"faults"`
	}
	for k, ds := range byKind {
		f := fault{Kind: k}
		for _, d := range ds {
			f.FailoverMs = append(f.FailoverMs, float64(d.Microseconds())/1000)
		}
		out.Faults = append(out.Faults, f)
	}
	sort.Slice(out.Faults, func(i, j int) bool { return out.Faults[i].Kind < out.Faults[j].Kind })
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func onePerTurn(a fleet.Line) string {
	return fmt.Sprintf("%d turns: %d without, %d with more than one", a.Turns, a.Lost, a.Dup)
}

// sampleLoad reads the 1-minute load average every 10 s until ctx ends;
// the returned func gives min, mean and max so far.
func sampleLoad(ctx context.Context) func() (float64, float64, float64) {
	var mu sync.Mutex
	var samples []float64
	read := func() {
		b, err := os.ReadFile("/proc/loadavg")
		if err != nil {
			return
		}
		var v float64
		if _, err := fmt.Sscan(string(b), &v); err == nil {
			mu.Lock()
			samples = append(samples, v)
			mu.Unlock()
		}
	}
	read()
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				read()
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() (float64, float64, float64) {
		mu.Lock()
		defer mu.Unlock()
		if len(samples) == 0 {
			return 0, 0, 0
		}
		lo, hi, sum := samples[0], samples[0], 0.0
		for _, v := range samples {
			lo, hi, sum = min(lo, v), max(hi, v), sum+v
		}
		return lo, sum / float64(len(samples)), hi
	}
}

const (
	beginMark = "<!-- fleet-bench begin -->"
	endMark   = "<!-- fleet-bench end -->"
)

// writeSection replaces the fleet section of report (between its marks,
// under the hand-run heading that make bench keeps), or appends it.
func writeSection(report string, lines []string) error {
	old, err := os.ReadFile(report)
	if err != nil {
		return err
	}
	section := beginMark + "\n" + strings.Join(lines, "\n") + "\n" + endMark
	s := string(old)
	if i, j := strings.Index(s, beginMark), strings.Index(s, endMark); i >= 0 && j > i {
		s = s[:i] + section + s[j+len(endMark):]
	} else {
		if !strings.Contains(s, "## Hand-run measurements") {
			s = strings.TrimRight(s, "\n") + "\n\n## Hand-run measurements\n"
		}
		s = strings.TrimRight(s, "\n") + "\n\n" + section + "\n"
	}
	return os.WriteFile(report, []byte(s), 0o644)
}

func runDemo(ctx context.Context, dir, bin string) error {
	fmt.Println("fleet-demo: three boxes, each a network namespace with its own nats-server and box process; STUB turns (200 ms, no container)")
	f, err := fleet.Start(ctx, fleet.Options{Dir: filepath.Join(dir, "run"), Servers: 3, Partitions: 9, Replicas: 3,
		AckWait: 3 * time.Second, Slots: 4, Stub: 200 * time.Millisecond, Bin: bin, Log: os.Stdout})
	if err != nil {
		return err
	}
	defer f.Close()
	closeOnSignal(ctx, f)
	peers := peersOf(3)
	if err := f.StartBoxes(ctx, peers); err != nil {
		return err
	}
	d, err := f.StartDriver(ctx, "demo", 9, 1)
	if err != nil {
		return err
	}
	rec := f.Recorder()
	if err := rec.Wait(ctx, func(r *fleet.Recorder) bool { return r.Replies() >= 90 }); err != nil {
		return err
	}
	for _, i := range peers {
		fmt.Printf("fleet-demo: %s answers channels %v\n", fleet.BoxName(i), sorted(rec.Owned(fleet.BoxName(i), nil)))
	}
	res, err := f.Fault(ctx, fleet.KillBox, peers, 60*time.Second, 30)
	if err != nil {
		return err
	}
	fmt.Printf("fleet-demo: killed (kill -9) the busiest box, box%d: its %d channels answered again from the others after %s (p50) / %s (max)\n",
		res.Box, res.Affected, sec(fleet.Percentile(res.Failover, 50)), sec(fleet.Percentile(res.Failover, 100)))
	for _, i := range peers {
		fmt.Printf("fleet-demo: %s answers channels %v\n", fleet.BoxName(i), sorted(rec.Owned(fleet.BoxName(i), nil)))
	}
	a, err := d.Stop(ctx)
	if err != nil {
		return err
	}
	fmt.Println("fleet-demo: audit:", a.Audit)
	return nil
}

func sorted(s []string) []string {
	sort.Strings(s)
	return s
}
