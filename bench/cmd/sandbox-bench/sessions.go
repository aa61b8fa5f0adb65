package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/livesession"
)

// cmdSessions measures a session (docs/sessions.md) against the installed
// host: exec of `true` on the open stream beside `docker exec` of the same
// container, interleaved; a file put and get; resume from pause to an
// exec's first output; session create to ready; and what a paused session
// costs (CPU used over a window, memory held), read from its cgroup.
func cmdSessions(args []string) error {
	fs := flag.NewFlagSet("sessions", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	rounds := fs.Int("rounds", 40, "measured rounds of the exec and file series")
	warmup := fs.Int("warmup", 3, "warm-up rounds, recorded apart")
	resumes := fs.Int("resumes", 10, "pause/resume rounds")
	creates := fs.Int("creates", 5, "session creates (each closed after)")
	fileMB := fs.Int("file-mb", 1, "size of the put/get file (MiB)")
	window := fs.Duration("idle-window", 3*time.Second, "how long a paused session's CPU use is watched")
	hostSock := fs.String("host-socket", "", "host API socket")
	docker := fs.String("docker", "docker", "docker CLI")
	standbyCreates := fs.Int("standby-creates", 0, "only: creates on a ready standby (the host runs sessions.standby: 1), added to --out's results")
	_ = fs.Parse(args)
	if *out == "" || *hostSock == "" {
		return errors.New("--out and --host-socket are required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	c := client.NewWithOptions(*hostSock, client.Options{})
	if *standbyCreates > 0 {
		return standbySessionCreates(ctx, c, *out, *standbyCreates)
	}
	res := report.Sessions{Rounds: *rounds, Warmup: *warmup, FileBytes: *fileMB << 20,
		Start: time.Now().UTC(), LoadStart: report.LoadAvg()}

	// Creates: to the session's first state answer (its supervisor up).
	for i := 0; i < *creates && ctx.Err() == nil; i++ {
		t0 := time.Now()
		s, err := c.CreateSession(ctx, apiwire.SessionCreate{})
		if err != nil {
			res.Failures = append(res.Failures, "create: "+err.Error())
			continue
		}
		res.CreateMs = append(res.CreateMs, stats.Ms(time.Since(t0)))
		if _, err := c.CloseSession(ctx, s.ID); err != nil {
			res.Failures = append(res.Failures, "close: "+err.Error())
		}
	}

	s, err := c.CreateSession(ctx, apiwire.SessionCreate{})
	if err != nil {
		return fmt.Errorf("create the measured session: %w", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		if _, err := c.CloseSession(cctx, s.ID); err != nil {
			slog.Warn("close the measured session", "err", err)
		}
	}()
	name, err := ids.ContainerName(ids.SessionName(s.ID), s.ID)
	if err != nil {
		return err
	}

	execTrue := func() (float64, error) {
		t0 := time.Now()
		r, err := c.Exec(ctx, s.ID, apiwire.SessionExec{Executable: "true"}, func(apiwire.SessionExecEvent) error { return nil })
		d := stats.Ms(time.Since(t0))
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exit code %d", r.ExitCode)
		}
		return d, err
	}
	dockerExec := func() (float64, error) {
		t0 := time.Now()
		out, err := exec.CommandContext(ctx, *docker, "exec", name, "true").CombinedOutput()
		d := stats.Ms(time.Since(t0))
		if err != nil {
			err = fmt.Errorf("docker exec: %v: %s", err, bytes.TrimSpace(out))
		}
		return d, err
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), (*fileMB<<20)/16)
	put := func(i int) (float64, error) {
		t0 := time.Now()
		_, err := c.PutFile(ctx, s.ID, "bench-"+strconv.Itoa(i%2)+".bin", 0o644, data)
		return stats.Ms(time.Since(t0)), err
	}
	get := func(i int) (float64, error) {
		t0 := time.Now()
		f, err := c.GetFile(ctx, s.ID, "bench-"+strconv.Itoa(i%2)+".bin", false)
		d := stats.Ms(time.Since(t0))
		if err == nil && !bytes.Equal(f.Data, data) {
			err = errors.New("get: the file differs from what was put")
		}
		return d, err
	}
	record := func(dst *[]float64, what string, d float64, err error, measured bool) {
		if err != nil {
			res.Failures = append(res.Failures, what+": "+err.Error())
			return
		}
		if measured {
			*dst = append(*dst, d)
		}
	}
	for i := 0; i < *warmup+*rounds && ctx.Err() == nil; i++ {
		m := i >= *warmup
		// Alternate which goes first so neither always runs on a warmer cache.
		if i%2 == 0 {
			d, err := execTrue()
			record(&res.ExecMs, "exec", d, err, m)
			d, err = dockerExec()
			record(&res.DockerExecMs, "docker exec", d, err, m)
		} else {
			d, err := dockerExec()
			record(&res.DockerExecMs, "docker exec", d, err, m)
			d, err = execTrue()
			record(&res.ExecMs, "exec", d, err, m)
		}
		d, err := put(i)
		record(&res.PutMs, "put", d, err, m)
		d, err = get(i)
		record(&res.GetMs, "get", d, err, m)
	}

	// Resume: pause, then an exec's first output (the host resumes it
	// transparently on the request).
	for i := 0; i < *resumes && ctx.Err() == nil; i++ {
		if _, err := c.PauseSession(ctx, s.ID); err != nil {
			res.Failures = append(res.Failures, "pause: "+err.Error())
			continue
		}
		t0 := time.Now()
		var first float64
		_, err := c.Exec(ctx, s.ID, apiwire.SessionExec{Executable: "echo", Args: []string{"back"}}, func(ev apiwire.SessionExecEvent) error {
			if ev.Type == apiwire.ExecStdout && first == 0 {
				first = stats.Ms(time.Since(t0))
			}
			return nil
		})
		if err == nil && first == 0 {
			err = errors.New("no output")
		}
		record(&res.ResumeFirstOutputMs, "resume", first, err, true)
	}

	// A paused session's cost, from its cgroup: CPU used over the window
	// and memory held.
	if _, err := c.PauseSession(ctx, s.ID); err != nil {
		res.Failures = append(res.Failures, "pause: "+err.Error())
	} else if u, err := containerUsage(ctx, *docker, name); err != nil {
		res.PausedNote = "not measured: " + err.Error()
	} else {
		u0, err0 := u.cpuUsec()
		sleepCtx(ctx, *window)
		u1, err1 := u.cpuUsec()
		mem, err2 := u.memBytes()
		if err := errors.Join(err0, err1, err2); err != nil {
			res.PausedNote = "not measured: " + strings.ReplaceAll(err.Error(), "\n", "; ")
		} else {
			res.PausedCPUUsec, res.PausedWindowMs, res.PausedMemoryBytes = u1-u0, window.Milliseconds(), mem
		}
	}
	res.End, res.LoadEnd = time.Now().UTC(), report.LoadAvg()
	slog.Info("sessions", "exec_median_ms", stats.Summarize(res.ExecMs).Median, "docker_exec_median_ms", stats.Summarize(res.DockerExecMs).Median,
		"put_median_ms", stats.Summarize(res.PutMs).Median, "get_median_ms", stats.Summarize(res.GetMs).Median,
		"resume_median_ms", stats.Summarize(res.ResumeFirstOutputMs).Median, "failures", len(res.Failures))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return writeJSON(*out, res)
}

// usage reads a container's CPU time used (µs) and memory held (bytes)
// from its cgroup.
type usage struct {
	cpuUsec, memBytes func() (int64, error)
}

// containerUsage finds a container's cgroup: on the unified hierarchy
// (v2) its directory's cpu.stat usage_usec and memory.current; on a v1
// hierarchy (a mount per controller under /sys/fs/cgroup, as on Debian
// machines booted that way) cpuacct.usage (ns) and memory.usage_in_bytes,
// each under its own controller. The directory is the path
// /proc/<pid>/cgroup names, or, where the reader sits in a cgroup
// namespace whose /sys/fs/cgroup is mounted from elsewhere (the bench's
// namespaced systemd), the one named by the container's id beneath it.
func containerUsage(ctx context.Context, docker, name string) (usage, error) {
	out, err := exec.CommandContext(ctx, docker, "inspect", "-f", "{{.State.Pid}} {{.Id}}", name).Output()
	if err != nil {
		return usage{}, fmt.Errorf("docker inspect: %w", err)
	}
	pid, id, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	const root = "/sys/fs/cgroup"
	v2 := func(dir string) usage {
		return usage{
			cpuUsec:  func() (int64, error) { return cgroupValue(filepath.Join(dir, "cpu.stat"), "usage_usec") },
			memBytes: func() (int64, error) { return cgroupValue(filepath.Join(dir, "memory.current"), "") },
		}
	}
	if fileExists(filepath.Join(root, "cgroup.controllers")) {
		if b, err := os.ReadFile("/proc/" + pid + "/cgroup"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if p, ok := strings.CutPrefix(line, "0::"); ok {
					if dir := filepath.Join(root, p); fileExists(filepath.Join(dir, "cpu.stat")) {
						return v2(dir), nil
					}
				}
			}
		}
		if dir := findCgroup(root, id); dir != "" {
			return v2(dir), nil
		}
		return usage{}, fmt.Errorf("no cgroup directory of container %.12s under %s", id, root)
	}
	cpu, mem := findCgroup(filepath.Join(root, "cpuacct"), id), findCgroup(filepath.Join(root, "memory"), id)
	if cpu == "" || mem == "" {
		return usage{}, fmt.Errorf("no cgroup v1 cpuacct and memory directories of container %.12s under %s", id, root)
	}
	return usage{
		cpuUsec: func() (int64, error) {
			ns, err := cgroupValue(filepath.Join(cpu, "cpuacct.usage"), "")
			return ns / 1000, err
		},
		memBytes: func() (int64, error) { return cgroupValue(filepath.Join(mem, "memory.usage_in_bytes"), "") },
	}, nil
}

// findCgroup is the directory under root named by container id (or
// docker-<id>.scope), "" when there is none.
func findCgroup(root, id string) string {
	found := ""
	errFound := errors.New("found")
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(path, root), "/") > 6 {
			return filepath.SkipDir
		}
		if b := d.Name(); b == id || b == "docker-"+id+".scope" {
			found = path
			return errFound
		}
		return nil
	})
	return found
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// cgroupValue reads a cgroup file: the number after key in a flat keyed
// file, or the whole file's number when key is "".
func cgroupValue(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case key == "" && len(fields) == 1:
			return strconv.ParseInt(fields[0], 10, 64)
		case len(fields) == 2 && fields[0] == key:
			return strconv.ParseInt(fields[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %q", path, key)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// standbySessionCreates adds to the results in path n session creates,
// each on a ready standby: before each, off the clock, it waits (bounded)
// until the host lists the session standby as ready (GET /v1/turns marks
// it "preparing", then "ready": docs/sessions.md "Standby"), so no create
// arrives while the next one is still being prepared.
func standbySessionCreates(ctx context.Context, c *client.Client, path string, n int) error {
	var res report.Sessions
	if b, err := os.ReadFile(path); err != nil {
		return err
	} else if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	res.StandbyCreateMs, res.StandbyNote = nil, ""
	// The host has no stream of standby states: a poll, bounded, off the
	// clock (the bench only; tests wait on the kind's own signals).
	ready := func() error {
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			turns, err := c.Turns(ctx)
			if err != nil {
				return err
			}
			for _, t := range turns {
				if strings.HasPrefix(t.ChannelTag, "session-") && t.Standby == livesession.StandbyReady {
					return nil
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		return errors.New("no ready session standby listed within 90 s (is sessions.standby 1?)")
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if err := ready(); err != nil {
			res.StandbyNote = "not measured: " + err.Error()
			break
		}
		t0 := time.Now()
		s, err := c.CreateSession(ctx, apiwire.SessionCreate{})
		if err != nil {
			res.Failures = append(res.Failures, "standby create: "+err.Error())
			continue
		}
		res.StandbyCreateMs = append(res.StandbyCreateMs, stats.Ms(time.Since(t0)))
		if _, err := c.CloseSession(ctx, s.ID); err != nil {
			res.Failures = append(res.Failures, "close: "+err.Error())
		}
	}
	return writeJSON(path, res)
}
