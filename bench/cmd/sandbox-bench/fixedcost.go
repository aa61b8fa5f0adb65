package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	dockerclient "github.com/docker/docker/client"

	"github.com/roundtable-sandbox/sandbox/bench/internal/bundle"
	"github.com/roundtable-sandbox/sandbox/bench/internal/fakeupstream"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o644)
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// cmdBundle writes config.json for a runc bundle whose rootfs is already filled.
func cmdBundle(args []string) error {
	fs := flag.NewFlagSet("bundle", flag.ExitOnError)
	dir := fs.String("dir", "", "bundle directory (rootfs/ inside must hold the payload)")
	var argv, env, binds listFlag
	fs.Var(&argv, "arg", "process argument (repeat; first is the absolute program path)")
	fs.Var(&env, "env", "KEY=VALUE (repeat)")
	fs.Var(&binds, "bind", "SRC:DST[:ro] (repeat)")
	uid := fs.Uint("uid", 0, "uid")
	gid := fs.Uint("gid", 0, "gid")
	mem := fs.Int64("memory-mb", 512, "memory limit (MiB), swap equal")
	cpus := fs.Float64("cpus", 1, "CPUs")
	pids := fs.Int64("pids", 64, "pids limit")
	tmpfs := fs.Int64("tmpfs-mb", 64, "/tmp tmpfs size (MiB)")
	cg := fs.String("cgroups-path", "", "cgroups path")
	_ = fs.Parse(args)
	s := bundle.Spec{Args: argv, Env: env, UID: uint32(*uid), GID: uint32(*gid), MemoryMB: *mem, CPUs: *cpus,
		Pids: *pids, TmpfsMB: *tmpfs, CgroupsPath: *cg}
	for _, b := range binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 || len(parts) > 3 || (len(parts) == 3 && parts[2] != "ro") {
			return fmt.Errorf("bind %q: want SRC:DST[:ro]", b)
		}
		s.Binds = append(s.Binds, bundle.Bind{Source: parts[0], Destination: parts[1], ReadOnly: len(parts) == 3})
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	return bundle.Write(*dir, s)
}

// FixedCostResult is the fixed-turn-cost results file.
type FixedCostResult = report.FixedCost

func cmdFixedCost(args []string) error {
	fs := flag.NewFlagSet("fixedcost", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	rounds := fs.Int("rounds", 40, "measured rounds (each runs every series once)")
	warmup := fs.Int("warmup", 3, "warm-up rounds, recorded apart")
	pause := fs.Duration("pause", 0, "pause after each run")
	hostSock := fs.String("host-socket", "", "host API socket (empty: skip the host series)")
	model := fs.String("model", "bench-model", "model name in the baseline turn (the host's model.name)")
	channel := fs.String("channel", "bench-fixed", "channel for the host series (must be in sandbox mode)")
	standbyChannel := fs.String("standby-channel", "", "channel for the host series served by a standby (in sandbox mode; empty: skip)")
	metrics := fs.Bool("metrics", true, "snapshot GET /metrics on the host socket before and after")
	docker := fs.String("docker", "docker", "docker CLI")
	image := fs.String("image", "", "worker image for the docker run series (empty: skip)")
	uid := fs.Int("uid", 0, "container uid (docker run and runc)")
	gid := fs.Int("gid", 0, "container gid")
	ws := fs.String("workspace", "", "workspace dir bound at /workspace")
	turnDir := fs.String("turn-dir", "", "dir holding broker.sock, bound read-only at /run/broker")
	mem := fs.Int64("memory-mb", 512, "memory (MiB)")
	cpus := fs.Float64("cpus", 1, "CPUs")
	pids := fs.Int64("pids", 64, "pids")
	tmpfs := fs.Int64("tmpfs-mb", 64, "/tmp size (MiB)")
	logDriver := fs.String("log-driver", "journald", "docker log driver")
	logTag := fs.String("log-tag", "sandbox/bench", "journald tag")
	runtime := fs.String("runtime", "", "OCI runtime name for docker run")
	prestart := fs.Bool("engine-prestart", false, "also time a pre-started container (attach, stdin, reply, wait only)")
	engineHost := fs.String("engine", "", "Docker host URL for the Engine API series (pkg/container; needs journald; empty: skip)")
	runc := fs.String("runc", "runc", "runc binary")
	floorBundle := fs.String("runc-floor", "", "bundle with the trivial payload (empty: skip)")
	workerBundle := fs.String("runc-worker", "", "bundle with the worker (empty: skip)")
	_ = fs.Parse(args)
	if *out == "" {
		return errors.New("--out is required")
	}
	ctx, cancel := signalContext()
	defer cancel()

	turn := turns.BenchTurn(*model)
	var runners []turns.Runner
	var hostClient *http.Client
	if *hostSock != "" {
		hostClient = turns.UnixClient(*hostSock, 3*time.Minute, true)
		// The cold series discards the channel's standby before each turn;
		// the standby series waits for one (both off the clock).
		runners = append(runners, &turns.HostRunner{Label: report.SeriesHost, Client: hostClient,
			Channel: func(int) string { return *channel }, Text: "hello from the benchmark",
			Before: turns.StandbyDiscarded(hostClient, *channel)})
		if *standbyChannel != "" {
			runners = append(runners, &turns.HostRunner{Label: report.SeriesHostStandby, Client: hostClient,
				Channel: func(int) string { return *standbyChannel }, Text: "hello from the benchmark",
				Before: turns.StandbyReady(hostClient, *standbyChannel)})
		}
	}
	if *image != "" {
		spec := turns.DockerSpec{Docker: *docker, Image: *image, UID: *uid, GID: *gid, Workspace: *ws, TurnDir: *turnDir,
			Limits:    turns.Limits{MemoryMB: *mem, CPUs: *cpus, Pids: *pids, TmpfsMB: *tmpfs},
			LogDriver: *logDriver, LogTag: *logTag, Runtime: *runtime, NamePrefix: "roundtable-sandbox-bench"}
		runners = append(runners, &turns.ExecRunner{Label: report.SeriesDocker, Stdin: turn,
			Argv: func(seq int) []string { return append([]string{spec.Docker}, turns.DockerArgs(spec, seq)...) }})
	}
	var engine, pre *turns.EngineRunner
	if *engineHost != "" {
		drv, err := container.New(*engineHost)
		if err != nil {
			return err
		}
		defer drv.Close()
		engine = &turns.EngineRunner{Label: report.SeriesEngine, Driver: drv, Channel: "bench-engine", Stdin: turn,
			Spec: container.Spec{Image: *image, UID: *uid, GID: *gid, WorkspaceDir: *ws, TurnDir: *turnDir,
				MemoryMB: int(*mem), CPUs: *cpus, Pids: *pids, TmpfsMB: int(*tmpfs), Runtime: *runtime}}
		runners = append(runners, engine)
		if *prestart {
			cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(*engineHost), dockerclient.WithAPIVersionNegotiation())
			if err != nil {
				return err
			}
			defer cli.Close()
			drv2, err := container.New(*engineHost)
			if err != nil {
				return err
			}
			defer drv2.Close()
			pre = &turns.EngineRunner{Label: report.SeriesPrestart, Driver: drv2, Channel: "bench-prestart", Stdin: turn, Spec: engine.Spec,
				Starter: func(ctx context.Context, id string) error {
					return cli.ContainerStart(ctx, id, dockercontainer.StartOptions{})
				}}
			defer pre.Close()
			runners = append(runners, pre)
		}
	}
	runcArgv := func(b, prefix string) func(int) []string {
		return func(seq int) []string {
			return []string{*runc, "run", "--bundle", b, fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq)}
		}
	}
	if *workerBundle != "" {
		runners = append(runners, &turns.ExecRunner{Label: report.SeriesRuncWorker, Stdin: turn, Argv: runcArgv(*workerBundle, "bench-worker")})
	}
	if *floorBundle != "" {
		runners = append(runners, &turns.ExecRunner{Label: report.SeriesRuncFloor, Stdin: turn, Argv: runcArgv(*floorBundle, "bench-floor")})
	}
	if len(runners) == 0 {
		return errors.New("nothing to run: give --host-socket, --image or a --runc-* bundle")
	}
	res := FixedCostResult{Rounds: *rounds, Warmup: *warmup, Start: time.Now().UTC(), LoadStart: report.LoadAvg()}
	// Warm-up first, on its own, so the measured window (for the host's
	// journal and metrics) holds measured turns only.
	warm := turns.Interleave(ctx, runners, 0, *warmup, *pause)
	if hostClient != nil && *metrics {
		res.MetricsBefore = fetchMetrics(ctx, hostClient)
	}
	if engine != nil {
		engine.ResetPhases()
	}
	if pre != nil {
		pre.ResetPhases()
	}
	res.MeasuredStart = time.Now().UTC()
	res.Series = turns.Interleave(ctx, runners, 0, *rounds, *pause)
	for i := range res.Series {
		res.Series[i].WarmupMs = warm[i].SamplesMs
		res.Series[i].Failures += warm[i].Failures
		res.Series[i].Errors = append(warm[i].Errors, res.Series[i].Errors...)
	}
	if hostClient != nil && *metrics {
		res.MetricsAfter = fetchMetrics(ctx, hostClient)
	}
	res.End = time.Now().UTC()
	if engine != nil {
		res.EnginePhasesMs = engine.Phases()
	}
	if pre != nil {
		res.PrestartPhasesMs = pre.Phases()
	}
	res.LoadEnd = report.LoadAvg()
	for _, s := range res.Series {
		slog.Info("series", "summary", s.String())
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return writeJSON(*out, res)
}

// fetchMetrics returns the host's /metrics text, or "" when it has none.
func fetchMetrics(ctx context.Context, c *http.Client) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://host/metrics", nil)
	resp, err := c.Do(req)
	if err != nil {
		slog.Warn("GET /metrics failed", "err", err)
		return ""
	}
	defer resp.Body.Close()
	data, err := readAllBounded(resp.Body, 8<<20)
	if err != nil || resp.StatusCode != http.StatusOK {
		slog.Warn("GET /metrics unusable", "status", resp.StatusCode, "err", err)
		return ""
	}
	return string(data)
}

// cmdFakeModel serves the fake upstream until signalled (for the docker run
// baseline's broker when the e2e fake model is not in the tree).
func cmdFakeModel(args []string) error {
	fs := flag.NewFlagSet("fakemodel", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "TCP address")
	key := fs.String("key", "", "required bearer key (empty: any)")
	addrFile := fs.String("addr-file", "", "write the bound address here")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *addrFile != "" {
		if err := atomicfile.WriteFile(*addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	ctx, cancel := signalContext()
	defer cancel()
	srv := &http.Server{Handler: &fakeupstream.Handler{Key: *key}, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	slog.Info("fake model listening", "addr", ln.Addr().String())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
