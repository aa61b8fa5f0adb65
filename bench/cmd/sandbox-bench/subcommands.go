package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/brokerbench"
	"github.com/roundtable-sandbox/sandbox/bench/internal/figures"
	"github.com/roundtable-sandbox/sandbox/bench/internal/journal"
	"github.com/roundtable-sandbox/sandbox/bench/internal/procmem"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

func readAllBounded(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("more than %d bytes", max)
	}
	return data, nil
}

func cmdBroker(args []string) error {
	fs := flag.NewFlagSet("broker", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	bin := fs.String("broker", "bin/sandbox-broker", "sandbox-broker binary")
	work := fs.String("workdir", "", "scratch directory")
	n := fs.Int("iterations", 3000, "call pairs per mode")
	per := fs.Int("calls-per-broker", 500, "calls before a fresh broker")
	modes := fs.String("modes", brokerbench.ModeKeepAlive+","+brokerbench.ModeNewConn, "comma-separated modes")
	_ = fs.Parse(args)
	if *out == "" || *work == "" {
		return errors.New("--out and --workdir are required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	res, err := brokerbench.Run(ctx, brokerbench.Config{Broker: *bin, WorkDir: *work, Iterations: *n, CallsPerBroker: *per, Modes: strings.Split(*modes, ",")})
	if err != nil {
		return err
	}
	return writeJSON(*out, res)
}

// systemctlShow returns one property of a unit ("" when unavailable).
func systemctlShow(unit, prop string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", "show", "-p", prop, "--value", unit).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func cmdLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	hostSock := fs.String("host-socket", "", "host API socket")
	channels := fs.Int("channels", 16, "channels")
	per := fs.Int("turns", 4, "turns per channel")
	prefix := fs.String("channel-prefix", "bench-load-", "channel name prefix (channels must be in sandbox mode)")
	unit := fs.String("unit", "sandbox-host.service", "host unit (for MainPID and MemoryCurrent)")
	pid := fs.Int("host-pid", 0, "host pid (default: the unit's MainPID, else the process named sandbox-host)")
	idleWait := fs.Duration("idle-wait", 2*time.Second, "settle time before the idle reading")
	_ = fs.Parse(args)
	if *out == "" || *hostSock == "" {
		return errors.New("--out and --host-socket are required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	if *pid == 0 {
		if v, err := strconv.Atoi(systemctlShow(*unit, "MainPID")); err == nil && v > 0 {
			*pid = v
		} else if ps := procmem.PIDsByComm("sandbox-host"); len(ps) == 1 {
			*pid = ps[0]
		}
	}
	res := report.Load{Channels: *channels, TurnsPerChannel: *per, HostPID: *pid, LoadStart: report.LoadAvg()}
	time.Sleep(*idleWait)
	if *pid > 0 {
		res.HostRSSIdleKiB, _, _ = procmem.Status(*pid)
	}
	res.HostMemCurIdle, _ = strconv.ParseInt(systemctlShow(*unit, "MemoryCurrent"), 10, 64)
	client := turns.UnixClient(*hostSock, 5*time.Minute, true)
	res.MetricsBefore = fetchMetrics(ctx, client)
	sampler := &procmem.Sampler{PID: *pid, Comm: "sandbox-broker", Interval: 20 * time.Millisecond}
	sampler.Start()
	lr := turns.Load(ctx, *channels, *per, func(ch int) turns.Runner {
		name := fmt.Sprintf("%s%02d", *prefix, ch)
		return &turns.HostRunner{Label: "load", Client: client, Channel: func(int) string { return name }, Text: "hello from the load benchmark"}
	})
	res.HostRSSPeakKiB, res.BrokerRSSPeakKiB, res.BrokersSeen = sampler.Stop()
	res.MetricsAfter = fetchMetrics(ctx, client)
	if *pid > 0 {
		res.HostRSSAfterKiB, _, _ = procmem.Status(*pid)
	}
	res.HostMemCurAfter, _ = strconv.ParseInt(systemctlShow(*unit, "MemoryCurrent"), 10, 64)
	res.WallMs = stats.Ms(lr.Wall)
	res.Latency = stats.Summarize(lr.LatenciesMs)
	res.Succeeded = len(lr.LatenciesMs)
	res.Failures, res.FailureKinds, res.Errors = lr.Failures, lr.FailureKinds, lr.Errors
	if lr.Wall > 0 {
		res.TurnsPerSecond = float64(res.Succeeded) / lr.Wall.Seconds()
	}
	res.LoadEnd = report.LoadAvg()
	slog.Info("load", "turnsPerSecond", res.TurnsPerSecond, "p95", res.Latency.P95, "failures", res.Failures,
		"hostIdleKiB", res.HostRSSIdleKiB, "hostPeakKiB", res.HostRSSPeakKiB, "brokerPeakKiB", res.BrokerRSSPeakKiB)
	return writeJSON(*out, res)
}

// cmdReady restarts the host unit n times and reads systemd's own
// timestamps: ExecMainStartTimestampMonotonic (the main process started) to
// ActiveEnterTimestampMonotonic (READY=1 arrived, Type=notify).
func cmdReady(args []string) error {
	fs := flag.NewFlagSet("ready", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	unit := fs.String("unit", "sandbox-host.service", "unit")
	n := fs.Int("n", 10, "restarts")
	_ = fs.Parse(args)
	if *out == "" {
		return errors.New("--out is required")
	}
	res := report.Ready{Method: "systemd ExecMainStartTimestampMonotonic to ActiveEnterTimestampMonotonic over `systemctl restart`"}
	for i := 0; i < *n; i++ {
		// Restarts in a row hit the unit's start rate limit (5 in 10 s by
		// default): reset it, and leave the unit a moment between restarts.
		_ = exec.Command("systemctl", "reset-failed", *unit).Run()
		if err := exec.Command("systemctl", "restart", *unit).Run(); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("restart %d: %v", i, err))
			continue
		}
		start, err1 := strconv.ParseInt(systemctlShow(*unit, "ExecMainStartTimestampMonotonic"), 10, 64)
		active, err2 := strconv.ParseInt(systemctlShow(*unit, "ActiveEnterTimestampMonotonic"), 10, 64)
		if err1 != nil || err2 != nil || start == 0 || active < start {
			res.Errors = append(res.Errors, fmt.Sprintf("restart %d: timestamps %d %d", i, start, active))
			continue
		}
		res.SamplesMs = append(res.SamplesMs, float64(active-start)/1000)
		time.Sleep(time.Second)
	}
	res.Summary = stats.Summarize(res.SamplesMs)
	slog.Info("ready", "median", res.Summary.Median, "n", res.Summary.N, "errors", len(res.Errors))
	return writeJSON(*out, res)
}

func cmdEnv(args []string) error {
	fs := flag.NewFlagSet("env", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	var facts listFlag
	fs.Var(&facts, "fact", "KEY=VALUE extra fact (repeat)")
	_ = fs.Parse(args)
	if *out == "" {
		return errors.New("--out is required")
	}
	extra := map[string]string{}
	for _, f := range facts {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("--fact %q: want KEY=VALUE", f)
		}
		extra[k] = v
	}
	return writeJSON(*out, report.CollectEnv(extra))
}

func cmdReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	dir := fs.String("results", "", "results directory")
	out := fs.String("out", "docs/BENCHMARKS.md", "markdown file")
	figDir := fs.String("figures", "", "directory for the SVG figures (empty: none)")
	fleetFile := fs.String("fleet", "", "make fleet-bench's failover samples (fleet.json) for its figure")
	_ = fs.Parse(args)
	in, err := report.ReadDir(*dir)
	if err != nil {
		return err
	}
	if *figDir != "" {
		if err := drawFigures(in, *fleetFile, *figDir, *out); err != nil {
			return err
		}
	}
	md, err := report.Markdown(in)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(*out); err == nil {
		md = report.KeepHandRun(md, old)
	}
	return atomicfile.WriteFile(*out, []byte(md), 0o644)
}

// cmdPolicy writes a valid broker policy for the baseline broker (model only,
// generous call limit and deadline) and, optionally, its credential file;
// it prints the turn id.
func cmdPolicy(args []string) error {
	fs := flag.NewFlagSet("policy", flag.ExitOnError)
	dir := fs.String("dir", "", "policy directory")
	url := fs.String("model-url", "", "upstream URL (http loopback allowed)")
	model := fs.String("model", "bench-model", "model name")
	cred := fs.String("credential", "model", "credential name")
	maxCalls := fs.Int("max-calls", 1000, "calls the broker allows")
	ttl := fs.Duration("deadline", 3*time.Hour, "deadline from now")
	credDir := fs.String("credentials-dir", "", "also write the credential here, named as systemd's LoadCredential= names it")
	_ = fs.Parse(args)
	if *dir == "" || *url == "" {
		return errors.New("--dir and --model-url are required")
	}
	if *credDir != "" {
		v := "sk-bench-baseline-" + ids.NewTurnID()
		if err := atomicfile.WriteFile(filepath.Join(*credDir, layout.CredentialPrefix+*cred), []byte(v+"\n"), 0o600); err != nil {
			return err
		}
	}
	turn := ids.NewTurnID()
	channel := "bench-baseline"
	p := &policy.Policy{
		Version:        policy.Version,
		TurnID:         turn,
		Identity:       policy.Identity{Channel: channel, ChannelTag: ids.ChannelTag(channel), SpeakerID: "bench-user", SpeakerName: "Bench", PrincipalID: "bench-principal"},
		DeadlineUnixMs: time.Now().Add(*ttl).UnixMilli(),
		Model:          policy.Model{URL: *url, Name: *model, MaxTokens: policy.DefaultMaxTokens, Credential: *cred, AllowHTTP: true},
		Limits:         policy.DefaultLimits(),
	}
	p.Limits.MaxCalls = *maxCalls
	data, err := p.Marshal()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(*dir, turn+".json"), data, 0o640); err != nil {
		return err
	}
	fmt.Println(turn)
	return nil
}

// cmdPhases reads the journal over the measured window of a fixed-cost run.
func cmdPhases(args []string) error {
	fs := flag.NewFlagSet("phases", flag.ExitOnError)
	fcPath := fs.String("fixedcost", "", "fixedcost.json of the run (or units.json: any results file with measuredStart and end)")
	out := fs.String("out", "", "results file")
	_ = fs.Parse(args)
	if *fcPath == "" || *out == "" {
		return errors.New("--fixedcost and --out are required")
	}
	data, err := os.ReadFile(*fcPath)
	if err != nil {
		return err
	}
	var fc report.FixedCost
	if err := json.Unmarshal(data, &fc); err != nil {
		return err
	}
	since, until := fc.MeasuredStart, fc.End
	if since.IsZero() || until.IsZero() {
		return errors.New("fixedcost.json has no measured window")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "journalctl", "-o", "json", "--no-pager",
		"--since", "@"+strconv.FormatInt(since.Unix()-1, 10), "--until", "@"+strconv.FormatInt(until.Unix()+2, 10),
		"-u", "sandbox-host.service", "-u", "sandbox-broker@*", "-u", "sandbox-credset@*")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	samples, perr := journal.Parse(pipe, since.UnixMicro(), until.Add(time.Second).UnixMicro())
	werr := cmd.Wait()
	if err := errors.Join(perr, werr); err != nil {
		return fmt.Errorf("journalctl: %w", err)
	}
	res := report.Phases{Source: "journalctl -o json -u sandbox-host.service -u sandbox-broker@* -u sandbox-credset@*", Since: since, Until: until, SamplesMs: samples}
	for k, v := range samples {
		slog.Info("phase", "name", k, "n", len(v), "medianMs", stats.Quantile(v, 0.5))
	}
	return writeJSON(*out, res)
}

// variantGroups are the docker run variants of cmdVariants, in run order.
var variantGroups = []struct {
	name string
	drop []string
}{
	{"all flags (as the host)", nil},
	{"without journald (--log-driver none)", []string{turns.GroupJournald}},
	{"without limits (memory, swap, cpus, pids)", []string{turns.GroupLimits}},
	{"without the /tmp tmpfs", []string{turns.GroupTmpfs}},
	{"without the two bind mounts", []string{turns.GroupBinds}},
	{"without read-only, cap-drop, no-new-privileges, user", []string{turns.GroupSecurity}},
	{"without labels, env, workdir", []string{turns.GroupMeta}},
	{"bare: --network none --log-driver none only", []string{turns.GroupJournald, turns.GroupLimits, turns.GroupTmpfs, turns.GroupBinds, turns.GroupSecurity, turns.GroupMeta}},
}

// cmdVariants times docker run of a payload with flag groups left out, to
// attribute docker run's fixed cost. Interleaved like fixedcost.
func cmdVariants(args []string) error {
	fs := flag.NewFlagSet("variants", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	rounds := fs.Int("rounds", 20, "measured rounds")
	warmup := fs.Int("warmup", 2, "warm-up rounds")
	docker := fs.String("docker", "docker", "docker CLI")
	image := fs.String("image", "", "payload image (the floor image: no broker needed)")
	uid := fs.Int("uid", 0, "uid")
	gid := fs.Int("gid", 0, "gid")
	ws := fs.String("workspace", "", "workspace dir")
	turnDir := fs.String("turn-dir", "", "turn dir")
	_ = fs.Parse(args)
	if *out == "" || *image == "" {
		return errors.New("--out and --image are required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	var runners []turns.Runner
	for _, v := range variantGroups {
		spec := turns.DockerSpec{Docker: *docker, Image: *image, UID: *uid, GID: *gid, Workspace: *ws, TurnDir: *turnDir,
			Limits:    turns.Limits{MemoryMB: 512, CPUs: 1, Pids: 64, TmpfsMB: 64},
			LogDriver: "journald", LogTag: "sandbox/bench-variants", NamePrefix: "roundtable-sandbox-bench-v", Drop: map[string]bool{}}
		for _, g := range v.drop {
			spec.Drop[g] = true
		}
		runners = append(runners, &turns.ExecRunner{Label: v.name, Stdin: turns.BenchTurn("bench-model"),
			Argv: func(seq int) []string { return append([]string{spec.Docker}, turns.DockerArgs(spec, seq)...) }})
	}
	res := report.Variants{Rounds: *rounds, Warmup: *warmup, Image: *image, LoadStart: report.LoadAvg()}
	res.Series = turns.Interleave(ctx, runners, *warmup, *rounds, 0)
	res.LoadEnd = report.LoadAvg()
	for _, s := range res.Series {
		slog.Info("variant", "summary", s.String())
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return writeJSON(*out, res)
}

// cmdBackToBack posts turns on one channel, each as soon as the previous
// reply arrived, and counts from the host's metrics how many found a ready
// standby.
func cmdBackToBack(args []string) error {
	fs := flag.NewFlagSet("backtoback", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	hostSock := fs.String("host-socket", "", "host API socket")
	channel := fs.String("channel", "bench-b2b", "channel (in sandbox mode)")
	n := fs.Int("turns", 20, "turns")
	text := fs.String("text", "hello from the back-to-back benchmark", "turn text (the fake model's script may match it)")
	pause := fs.Duration("pause", 0, "wait between a reply and the next turn (0: back to back)")
	modelDelay := fs.Duration("model-delay", 0, "how long the fake model takes to answer this text (for the report)")
	waitReady := fs.Bool("wait-ready", true, "wait, off the clock, for the channel's standby before the first turn")
	_ = fs.Parse(args)
	if *out == "" || *hostSock == "" {
		return errors.New("--out and --host-socket are required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	client := turns.UnixClient(*hostSock, 5*time.Minute, true)
	runner := &turns.HostRunner{Label: "back-to-back", Client: client, Channel: func(int) string { return *channel },
		Text: *text}
	if *waitReady {
		if err := turns.StandbyReady(client, *channel)(ctx, 0); err != nil {
			slog.Warn("the channel's standby was not ready before the first turn", "channel", *channel, "err", err)
		}
	}
	before := fetchMetrics(ctx, client)
	res := report.BackToBack{Channel: *channel, Turns: *n, PauseMs: pause.Milliseconds(), ModelDelayMs: modelDelay.Milliseconds()}
	var lat []float64
	for i := 0; i < *n && ctx.Err() == nil; i++ {
		if i > 0 && *pause > 0 {
			select {
			case <-time.After(*pause):
			case <-ctx.Done():
			}
		}
		d, err := runner.Run(ctx, i)
		if err != nil {
			res.Failures++
			if len(res.Errors) < 5 {
				res.Errors = append(res.Errors, err.Error())
			}
			continue
		}
		lat = append(lat, stats.Ms(d))
	}
	after := fetchMetrics(ctx, client)
	res.Hits = standbyTurns(after, true) - standbyTurns(before, true)
	res.Misses = standbyTurns(after, false) - standbyTurns(before, false)
	res.Latency = stats.Summarize(lat)
	slog.Info("back-to-back", "turns", *n, "hits", res.Hits, "misses", res.Misses, "median", res.Latency.Median)
	return writeJSON(*out, res)
}

// standbyTurns sums sandbox_standby_turns_total over its hit (or every
// other) result label in Prometheus text.
func standbyTurns(text string, hit bool) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "sandbox_standby_turns_total{") {
			continue
		}
		if strings.Contains(line, `result="hit"`) != hit {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// drawFigures draws the figures into figDir and hands the report their
// links, relative to the report file out.
func drawFigures(in *report.Inputs, fleetFile, figDir, out string) error {
	var fleet *figures.Fleet
	if fleetFile != "" {
		var err error
		if fleet, err = figures.ReadFleet(fleetFile); err != nil {
			return err
		}
	}
	res, err := figures.Write(in, fleet, figDir)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(out), figDir)
	if err != nil {
		rel = figDir
	}
	for _, f := range res.Figures {
		f.Href = filepath.ToSlash(filepath.Join(rel, f.File))
		in.Figures = append(in.Figures, f)
	}
	in.FigureNotes = res.Notes
	return nil
}
