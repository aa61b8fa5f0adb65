package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/coderuns"
	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/turns"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// cmdRuns times a code run of `echo ready` through the host API beside
// `docker run --rm` of the same image and command with the run container's
// flags and, with --engine, the run's container through pkg/container:
// interleaved rounds, to the first output and to the result.
func cmdRuns(args []string) error {
	fs := flag.NewFlagSet("runs", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	rounds := fs.Int("rounds", 20, "measured rounds (each runs every series once)")
	warmup := fs.Int("warmup", 3, "warm-up rounds, recorded apart")
	hostSock := fs.String("host-socket", "", "host API socket (empty: skip the host series)")
	docker := fs.String("docker", "docker", "docker CLI")
	image := fs.String("image", layout.DefaultToolboxImage, "toolbox image (the host's runs.image)")
	imageText := fs.String("image-text", "", "which toolbox this is, for the report")
	uid := fs.Int("uid", 0, "non-root uid (and gid) for docker run and the Engine API series")
	ws := fs.String("workspace", "", "empty directory bound read-only at /workspace (as the host's workspaceRoot/.run-empty)")
	mem := fs.Int("memory-mb", 2048, "memory (MiB): runs.memoryMb")
	cpus := fs.Float64("cpus", 1, "CPUs: runs.cpus")
	pids := fs.Int64("pids", 256, "pids: runs.pids")
	tmpfs := fs.Int("tmpfs-mb", 512, "/tmp size (MiB): runs.tmpfsMb")
	output := fs.Int("output-mb", 256, "/output size (MiB): runs.outputMb")
	logDriver := fs.String("log-driver", "journald", "docker run's log driver (the host's is journald)")
	logTag := fs.String("log-tag", "sandbox/bench-run", "journald tag of docker run")
	engineHost := fs.String("engine", "", "Docker host URL for the Engine API series (empty: skip)")
	hostLabel := fs.String("host-label", report.RunSeriesHost, "name of the host series (the run standby series names itself)")
	settle := fs.Duration("settle", 0, "pause off the clock before each host run (time for the host to prepare a run standby)")
	_ = fs.Parse(args)
	if *out == "" {
		return errors.New("--out is required")
	}
	if *uid <= 0 {
		return errors.New("--uid must be a non-root uid")
	}
	if st, err := os.Stat(*ws); err != nil || !st.IsDir() {
		return fmt.Errorf("--workspace %s: not a directory (%v)", *ws, err)
	}
	ctx, cancel := signalContext()
	defer cancel()
	argv := []string{"echo", coderuns.Marker}
	lim := coderuns.Limits{MemoryMB: *mem, CPUs: *cpus, Pids: *pids, TmpfsMB: *tmpfs, OutputMB: *output}

	var runners []coderuns.Runner
	if *hostSock != "" {
		hr := &coderuns.HostRunner{Label: *hostLabel,
			Client: turns.UnixClient(*hostSock, 3*time.Minute, true),
			Params: runs.Params{Executable: argv[0], Args: argv[1:]}}
		if *settle > 0 {
			hr.Before = func(ctx context.Context) error {
				select {
				case <-time.After(*settle):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		runners = append(runners, hr)
	}
	var metricsClient *http.Client
	if *hostSock != "" {
		metricsClient = turns.UnixClient(*hostSock, time.Minute, true)
	}
	spec := coderuns.DockerSpec{Docker: *docker, Image: *image, UID: *uid, GID: *uid, Workspace: *ws, Limits: lim,
		LogDriver: *logDriver, LogTag: *logTag, Argv: argv}
	runners = append(runners, &coderuns.ExecRunner{Label: report.RunSeriesDocker,
		Argv: func(seq int) []string { return append([]string{spec.Docker}, coderuns.DockerArgs(spec, seq)...) }})
	if *engineHost != "" {
		drv, err := container.New(*engineHost)
		if err != nil {
			return err
		}
		defer drv.Close()
		runners = append(runners, &coderuns.EngineRunner{Label: report.RunSeriesEngine, Driver: drv,
			Spec: container.Spec{Image: *image, UID: *uid, GID: *uid, WorkspaceDir: *ws,
				MemoryMB: *mem, CPUs: *cpus, Pids: *pids, TmpfsMB: *tmpfs,
				Run: &container.RunOptions{OutputMB: *output, Command: []string{layout.ToolboxWorker, "run-supervise"}}},
			// The host's job for this run, with the shipped output bounds.
			Job: wire.Job{Argv: argv, UID: *uid, GID: *uid, MaxOutputBytes: 1 << 20, MaxArtifactBytes: 8 << 20, MaxArtifactTotalBytes: 32 << 20}})
	}
	res := report.CodeRuns{Rounds: *rounds, Warmup: *warmup, Image: *image, ImageText: *imageText, Argv: argv,
		Start: time.Now().UTC(), LoadStart: report.LoadAvg()}
	var before string
	if metricsClient != nil {
		before = fetchMetrics(ctx, metricsClient)
	}
	res.Series = coderuns.Interleave(ctx, runners, *warmup, *rounds)
	res.End = time.Now().UTC()
	if metricsClient != nil {
		res.StandbyMetrics = standbyRunDeltas(before, fetchMetrics(ctx, metricsClient))
	}
	res.SettleMs = settle.Milliseconds()
	res.LoadEnd = report.LoadAvg()
	for _, s := range res.Series {
		slog.Info("run series", "name", s.Name, "n", s.First.N, "first_median_ms", s.First.Median, "result_median_ms", s.Result.Median, "failures", s.Failures)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return writeJSON(*out, res)
}

// standbyRunDeltas is how much each sample line of a metric family naming
// both runs and standbys grew between two /metrics texts (whatever the
// warm path calls them: the report shows the names as the host wrote them).
func standbyRunDeltas(before, after string) map[string]float64 {
	parse := func(text string) map[string]float64 {
		m := map[string]float64{}
		for _, line := range strings.Split(text, "\n") {
			if line == "" || line[0] == '#' {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name := strings.SplitN(f[0], "{", 2)[0]
			if !strings.Contains(name, "run") || !strings.Contains(name, "standby") || strings.HasSuffix(name, "_bucket") {
				continue
			}
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				m[f[0]] = v
			}
		}
		return m
	}
	b, a := parse(before), parse(after)
	out := map[string]float64{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
