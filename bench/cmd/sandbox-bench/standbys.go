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
	"syscall"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/procmem"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
)

// cmdStandbyMem switches channels on, gives each one turn, waits until
// every channel's standby is ready and sums the memory of the processes
// that hold them, against a reading taken before. It leaves the channels
// on: the caller switches them off (discarding the standbys).
func cmdStandbyMem(args []string) error {
	fs := flag.NewFlagSet("standbymem", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	hostSock := fs.String("host-socket", "", "host API socket")
	channels := fs.Int("channels", 64, "channels")
	prefix := fs.String("channel-prefix", "bench-idle-", "channel name prefix")
	max := fs.Int("standby-max", 64, "the host's standby.max (for the report)")
	unit := fs.String("unit", "sandbox-host.service", "host unit (MemoryCurrent)")
	var comms listFlag
	fs.Var(&comms, "comm", "process name to sum (repeat)")
	_ = fs.Parse(args)
	if *out == "" || *hostSock == "" || len(comms) == 0 {
		return errors.New("--out, --host-socket and --comm are required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	client := turns.UnixClient(*hostSock, 5*time.Minute, true)
	read := func() []procmem.Kind {
		var ks []procmem.Kind
		for _, c := range comms {
			ks = append(ks, procmem.SumByComm(c))
		}
		return ks
	}
	res := report.StandbyMem{Channels: *channels, StandbyMax: *max, LoadStart: report.LoadAvg()}
	name := func(i int) string { return fmt.Sprintf("%s%02d", *prefix, i) }
	res.Before = read()
	res.MemCurBefore, _ = strconv.ParseInt(systemctlShow(*unit, "MemoryCurrent"), 10, 64)
	for i := 0; i < *channels; i++ {
		if err := turns.SetMode(ctx, client, name(i), "on"); err != nil {
			return fmt.Errorf("channel on %s: %w", name(i), err)
		}
	}
	start := time.Now()
	lr := turns.Load(ctx, *channels, 1, func(ch int) turns.Runner {
		n := name(ch)
		return &turns.HostRunner{Label: "idle", Client: client, Channel: func(int) string { return n }, Text: "hello from the standby memory benchmark"}
	})
	res.TurnFailures, res.Errors = lr.Failures, lr.Errors
	for i := 0; i < *channels; i++ {
		if err := turns.StandbyReady(client, name(i))(ctx, 0); err != nil {
			if len(res.Errors) < 5 {
				res.Errors = append(res.Errors, fmt.Sprintf("%s: standby not ready: %v", name(i), err))
			}
			continue
		}
	}
	res.WaitReadyMs = stats.Ms(time.Since(start))
	// Read the count again after the memory: a standby that expired or
	// failed meanwhile lowers it.
	time.Sleep(2 * time.Second)
	res.With = read()
	res.MemCurWith, _ = strconv.ParseInt(systemctlShow(*unit, "MemoryCurrent"), 10, 64)
	for i := 0; i < *channels; i++ {
		if ok, _ := turns.IsStandbyReady(ctx, client, name(i)); ok {
			res.Ready++
		}
	}
	res.LoadEnd = report.LoadAvg()
	slog.Info("standby memory", "channels", *channels, "ready", res.Ready, "turnFailures", res.TurnFailures)
	return writeJSON(*out, res)
}

// cmdRuntimes times a cold turn and a standby turn per OCI runtime,
// interleaved by rounds: before each runtime's turns it rewrites the
// config's runtime key and restarts the host, off the clock. It leaves the
// config with the first runtime and the host restarted.
func cmdRuntimes(args []string) error {
	fs := flag.NewFlagSet("runtimes", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	hostSock := fs.String("host-socket", "", "host API socket")
	cfg := fs.String("config", "/etc/roundtable-sandbox/sandbox.yaml", "host config (its runtime key is rewritten)")
	list := fs.String("runtimes", "runc,runsc", "comma-separated runtimes")
	rounds := fs.Int("rounds", 7, "rounds")
	channel := fs.String("channel", "bench-runtime", "channel (switched on here)")
	unit := fs.String("unit", "sandbox-host.service", "host unit")
	_ = fs.Parse(args)
	if *out == "" || *hostSock == "" {
		return errors.New("--out and --host-socket are required")
	}
	rts := strings.Split(*list, ",")
	ctx, cancel := signalContext()
	defer cancel()
	client := turns.UnixClient(*hostSock, 5*time.Minute, true)
	samples := map[string]*turns.Series{}
	var order []string
	for _, rt := range rts {
		for _, kind := range []string{"cold", "standby"} {
			n := rt + " " + kind
			samples[n] = &turns.Series{Name: n}
			order = append(order, n)
		}
	}
	fail := func(s *turns.Series, err error) {
		s.Failures++
		if len(s.Errors) < 5 {
			s.Errors = append(s.Errors, err.Error())
		}
	}
	res := report.Runtimes{Rounds: *rounds, Runtimes: rts, LoadStart: report.LoadAvg()}
	for r := 0; r < *rounds && ctx.Err() == nil; r++ {
		for _, rt := range rts {
			cold, warm := samples[rt+" cold"], samples[rt+" standby"]
			if err := switchRuntime(ctx, *cfg, rt, *unit); err != nil {
				return err
			}
			if err := turns.SetMode(ctx, client, *channel, "on"); err != nil {
				fail(cold, err)
				continue
			}
			runner := &turns.HostRunner{Label: cold.Name, Client: client, Channel: func(int) string { return *channel },
				Text: "hello from the runtime benchmark", Before: turns.StandbyDiscarded(client, *channel)}
			if d, err := runner.Run(ctx, r); err != nil {
				fail(cold, err)
			} else {
				cold.SamplesMs = append(cold.SamplesMs, stats.Ms(d))
			}
			runner.Label, runner.Before = warm.Name, turns.StandbyReady(client, *channel)
			if d, err := runner.Run(ctx, r); err != nil {
				fail(warm, err)
			} else {
				warm.SamplesMs = append(warm.SamplesMs, stats.Ms(d))
			}
		}
	}
	if err := switchRuntime(ctx, *cfg, rts[0], *unit); err != nil {
		return err
	}
	res.LoadEnd = report.LoadAvg()
	for _, n := range order {
		s := samples[n]
		s.Summary = stats.Summarize(s.SamplesMs)
		slog.Info("runtime", "summary", s.String())
		res.Series = append(res.Series, *s)
	}
	return writeJSON(*out, res)
}

// switchRuntime sets the config's runtime key (runc is written as the
// default, no key) keeping the file's owner and mode, and restarts the
// host.
func switchRuntime(ctx context.Context, path, rt, unit string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	data = []byte(setRuntime(string(data), rt))
	if err := atomicfile.WriteFile(path, data, st.Mode().Perm()); err != nil {
		return err
	}
	if uid, gid, ok := fileOwner(st); ok {
		if err := os.Chown(path, uid, gid); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_ = exec.CommandContext(cctx, "systemctl", "reset-failed", unit).Run()
	if out, err := exec.CommandContext(cctx, "systemctl", "restart", unit).CombinedOutput(); err != nil {
		return fmt.Errorf("restart %s with runtime %s: %v: %s", unit, rt, err, out)
	}
	return nil
}

// setRuntime returns the YAML text with its top-level runtime key set to rt
// (removed for runc, the default).
func setRuntime(text, rt string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if !strings.HasPrefix(l, "runtime:") {
			lines = append(lines, l)
		}
	}
	if rt != "runc" {
		lines = append(lines, "runtime: "+rt)
	}
	return strings.Join(lines, "\n") + "\n"
}

func fileOwner(st os.FileInfo) (uid, gid int, ok bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(s.Uid), int(s.Gid), true
}
