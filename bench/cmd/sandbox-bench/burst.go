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
// interleaved by rounds (shipped, 4, 16, shipped, 4, 16 ...). Before each
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
	caps := fs.String("caps", "4,16", "comma-separated fixed queue.globalConcurrency caps (the baseline)")
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
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n <= 0 {
			return fmt.Errorf("--caps %q: want positive integers", *caps)
		}
		variants = append(variants, report.BurstVariant{Name: fmt.Sprintf("globalConcurrency: %d", n), Cap: n})
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
				text = setGlobalConcurrency(text, v.Cap)
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

// setGlobalConcurrency returns the YAML text with queue.globalConcurrency
// set to n: the line under the top-level queue: block is replaced, or added
// to it (a queue: block is added when there is none).
func setGlobalConcurrency(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var out []string
	inQueue, done := false, false
	for _, l := range lines {
		top := l != "" && l[0] != ' ' && l[0] != '#'
		if top && inQueue && !done {
			out = append(out, fmt.Sprintf("  globalConcurrency: %d", n))
			done = true
		}
		if top {
			inQueue = strings.HasPrefix(l, "queue:")
		}
		if inQueue && strings.HasPrefix(strings.TrimSpace(l), "globalConcurrency:") {
			if !done {
				out = append(out, fmt.Sprintf("  globalConcurrency: %d", n))
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
		out = append(out, fmt.Sprintf("  globalConcurrency: %d", n))
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
