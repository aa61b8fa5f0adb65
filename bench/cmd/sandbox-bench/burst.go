package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
)

// cmdBurst posts one first turn on each of --channels fresh channels, all
// at once, once per admission variant and round: the config as installed
// (the shipped queue.* values) and each fixed queue.globalConcurrency cap,
// interleaved by rounds (shipped, 4, 16, shipped, 4, 16 ...). With
// --fixed-starts (a host with queue.startConcurrency) a fixed cap N also
// sets startConcurrency N, so the caps stay the baseline they were before
// starts had a bound of their own; a cap written N:S sets startConcurrency
// S (a tuning variant, not a baseline). Before each
// variant it rewrites the config and restarts the host (off the clock); the
// channels of a burst are new, so every turn takes the cold path, and are
// switched off after it. It leaves the config as it found it.
func cmdBurst(args []string) error {
	fs := flag.NewFlagSet("burst", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	hostSock := fs.String("host-socket", "", "host API socket")
	cfg := fs.String("config", "/etc/roundtable-sandbox/sandbox.yaml", "host config (its queue.globalConcurrency is rewritten)")
	unit := fs.String("unit", "sandbox-host.service", "host unit")
	channels := fs.Int("channels", 64, "channels, one first turn each, all posted at once")
	caps := fs.String("caps", "4,16", "comma-separated fixed queue.globalConcurrency caps (the baseline); N:S also sets queue.startConcurrency S")
	fixedStarts := fs.Bool("fixed-starts", false, "a fixed cap N also sets queue.startConcurrency N (the host has that key)")
	rounds := fs.Int("rounds", 2, "rounds (each runs every variant once)")
	prefix := fs.String("channel-prefix", "bench-burst-", "channel name prefix")
	_ = fs.Parse(args)
	if *out == "" || *hostSock == "" {
		return errors.New("--out and --host-socket are required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	st, err := os.Stat(*cfg)
	if err != nil {
		return err
	}
	orig, err := os.ReadFile(*cfg)
	if err != nil {
		return err
	}
	variants := []report.BurstVariant{{Name: report.BurstShipped, Cap: -1}}
	for _, c := range strings.Split(*caps, ",") {
		v, err := burstVariant(strings.TrimSpace(c), *fixedStarts)
		if err != nil {
			return fmt.Errorf("--caps %q: %w", *caps, err)
		}
		variants = append(variants, v)
	}
	res := report.Burst{Channels: *channels, Rounds: *rounds, LoadStart: report.LoadAvg(), Start: time.Now().UTC()}
	res.ShippedQueue = queueBlock(string(orig))
	client := turns.UnixClient(*hostSock, 10*time.Minute, true)
	write := func(text string) error {
		if err := atomicfile.WriteFile(*cfg, []byte(text), st.Mode().Perm()); err != nil {
			return err
		}
		if uid, gid, ok := fileOwner(st); ok {
			return os.Chown(*cfg, uid, gid)
		}
		return nil
	}
	defer func() {
		if err := write(string(orig)); err != nil {
			slog.Error("restoring the config failed", "err", err)
		}
		if err := restartUnit(context.Background(), *unit); err != nil {
			slog.Error("restarting the host on the restored config failed", "err", err)
		}
	}()
	for r := 0; r < *rounds && ctx.Err() == nil; r++ {
		for i := range variants {
			v := &variants[i]
			text := string(orig)
			if v.Cap > 0 {
				text = setQueueKey(text, "globalConcurrency", v.Cap)
			}
			if v.Starts > 0 {
				text = setQueueKey(text, "startConcurrency", v.Starts)
			}
			if err := write(text); err != nil {
				return err
			}
			if err := restartUnit(ctx, *unit); err != nil {
				return fmt.Errorf("%s: %w", v.Name, err)
			}
			name := func(ch int) string { return fmt.Sprintf("%s%d-%d-%02d", *prefix, r, i, ch) }
			for ch := 0; ch < *channels; ch++ {
				if err := turns.SetMode(ctx, client, name(ch), "on"); err != nil {
					return fmt.Errorf("channel on %s: %w", name(ch), err)
				}
			}
			lr := turns.Load(ctx, *channels, 1, func(ch int) turns.Runner {
				n := name(ch)
				return &turns.HostRunner{Label: v.Name, Client: client, Channel: func(int) string { return n }, Text: "hello from the burst benchmark"}
			})
			v.Runs = append(v.Runs, report.BurstRun{WallMs: stats.Ms(lr.Wall), LatenciesMs: lr.LatenciesMs,
				Failures: lr.Failures, FailureKinds: lr.FailureKinds, Errors: lr.Errors, LoadEnd: report.LoadAvg()})
			slog.Info("burst", "variant", v.Name, "round", r, "wallMs", stats.Ms(lr.Wall), "failures", lr.Failures)
			// Off the clock: the burst's channels (and the standbys their
			// turns left) go before the next variant.
			for ch := 0; ch < *channels; ch++ {
				if err := turns.SetMode(ctx, client, name(ch), "off"); err != nil {
					slog.Warn("channel off failed", "channel", name(ch), "err", err)
				}
			}
		}
	}
	for i := range variants {
		v := &variants[i]
		var all, walls []float64
		for _, run := range v.Runs {
			all = append(all, run.LatenciesMs...)
			walls = append(walls, run.WallMs)
			v.Failures += run.Failures
		}
		v.Latency, v.Wall = stats.Summarize(all), stats.Summarize(walls)
	}
	res.Variants = variants
	res.End, res.LoadEnd = time.Now().UTC(), report.LoadAvg()
	return writeJSON(*out, res)
}

func restartUnit(ctx context.Context, unit string) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_ = runQuiet(cctx, "systemctl", "reset-failed", unit)
	if out, err := runCombined(cctx, "systemctl", "restart", unit); err != nil {
		return fmt.Errorf("restart %s: %v: %s", unit, err, out)
	}
	return nil
}

// burstVariant parses one --caps entry: N (queue.globalConcurrency N; with
// fixedStarts startConcurrency N too) or N:S (startConcurrency S).
func burstVariant(spec string, fixedStarts bool) (report.BurstVariant, error) {
	capText, startText, tuned := strings.Cut(spec, ":")
	n, err := strconv.Atoi(capText)
	if err != nil || n <= 0 {
		return report.BurstVariant{}, fmt.Errorf("%q: want a positive integer, or two joined by a colon", spec)
	}
	v := report.BurstVariant{Name: fmt.Sprintf("globalConcurrency: %d", n), Cap: n}
	switch {
	case tuned:
		s, err := strconv.Atoi(startText)
		if err != nil || s <= 0 {
			return report.BurstVariant{}, fmt.Errorf("%q: want a positive startConcurrency after the colon", spec)
		}
		v.Starts, v.Tuning = s, true
		v.Name += fmt.Sprintf(", startConcurrency: %d", s)
	case fixedStarts:
		v.Starts = n
		v.Name += fmt.Sprintf(", startConcurrency: %d", n)
	}
	return v, nil
}

// setQueueKey returns the YAML text with queue.<key> set to n: the line
// under the top-level queue: block is replaced, or added to it (a queue:
// block is added when there is none).
func setQueueKey(text, key string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var out []string
	inQueue, done := false, false
	for _, l := range lines {
		top := l != "" && l[0] != ' ' && l[0] != '#'
		if top && inQueue && !done {
			out = append(out, fmt.Sprintf("  %s: %d", key, n))
			done = true
		}
		if top {
			inQueue = strings.HasPrefix(l, "queue:")
		}
		if inQueue && strings.HasPrefix(strings.TrimSpace(l), key+":") {
			if !done {
				out = append(out, fmt.Sprintf("  %s: %d", key, n))
				done = true
			}
			continue
		}
		out = append(out, l)
	}
	if !done {
		if !inQueue {
			out = append(out, "queue:")
		}
		out = append(out, fmt.Sprintf("  %s: %d", key, n))
	}
	return strings.Join(out, "\n") + "\n"
}

// queueBlock is the top-level queue: block of a YAML text, for the report.
func queueBlock(text string) string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if l != "" && l[0] != ' ' && l[0] != '#' {
			in = strings.HasPrefix(l, "queue:")
			continue
		}
		if in && strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, ", ")
}

func runQuiet(ctx context.Context, name string, args ...string) error {
	return exec.CommandContext(ctx, name, args...).Run()
}

func runCombined(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}
