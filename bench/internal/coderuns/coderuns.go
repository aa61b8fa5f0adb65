// Package coderuns times a code run of `echo ready` three ways, interleaved
// so that drift in machine load hits every series alike: through the host
// API (POST /v1/runs, then the run's NDJSON events), through `docker run
// --rm` of the toolbox image with the run container's flags and the command
// as its entrypoint, and through pkg/container with the run's container
// exactly as the host makes it (supervisor as PID 1, the job on stdin, the
// frames decoded) but no host in front. Each run yields two times: to the
// first output carrying the marker, and to the result (the container gone).
// A run counts only when it printed the marker and ended with exit code 0;
// anything else is a failure, counted and reported, never dropped.
package coderuns

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// Marker is what the measured command prints (`echo ready`).
const Marker = "ready"

// Timing is one run: request (or process start) to the first output that
// carried Marker, and to the result.
type Timing struct {
	First, Result time.Duration
	// HostMs is the host's own durationMs of the run (host series only).
	HostMs float64
}

// Runner runs `echo ready` once.
type Runner interface {
	Name() string
	Run(ctx context.Context, seq int) (Timing, error)
}

// Limits are the run container's limits (config runs.*).
type Limits struct {
	MemoryMB int
	CPUs     float64
	Pids     int64
	TmpfsMB  int
	OutputMB int
}

// HostRunner posts the run to the host API and follows its events.
type HostRunner struct {
	Label  string
	Client *http.Client // dials host.sock
	// Params is the run; Marker must appear on its stdout.
	Params runs.Params
	// Before, when set, runs off the clock before each run (a run
	// standby given time to be prepared).
	Before func(ctx context.Context) error
}

// Name is the series name.
func (r *HostRunner) Name() string { return r.Label }

// Run posts one run and reads its events to the result.
func (r *HostRunner) Run(ctx context.Context, _ int) (Timing, error) {
	body, err := json.Marshal(r.Params)
	if err != nil {
		return Timing{}, err
	}
	if r.Before != nil {
		if err := r.Before(ctx); err != nil {
			return Timing{}, fmt.Errorf("%s: before the run: %v", r.Label, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://host/v1/runs", bytes.NewReader(body))
	if err != nil {
		return Timing{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := r.Client.Do(req)
	if err != nil {
		return Timing{}, fmt.Errorf("%s: POST /v1/runs: %v", r.Label, err)
	}
	rb, err := protocol.ReadBounded(resp.Body, 1<<20)
	resp.Body.Close()
	if err != nil {
		return Timing{}, fmt.Errorf("%s: POST /v1/runs: %v", r.Label, err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return Timing{}, fmt.Errorf("%s: POST /v1/runs: status %d: %s", r.Label, resp.StatusCode, tail(string(rb)))
	}
	var st runs.Status
	if err := json.Unmarshal(rb, &st); err != nil || st.ID == "" {
		return Timing{}, fmt.Errorf("%s: POST /v1/runs: bad status %q: %v", r.Label, tail(string(rb)), err)
	}
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, "http://host/v1/runs/"+url.PathEscape(st.ID)+"/events", nil)
	if err != nil {
		return Timing{}, err
	}
	resp, err = r.Client.Do(req)
	if err != nil {
		return Timing{}, fmt.Errorf("%s: GET events: %v", r.Label, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		rb, _ := protocol.ReadBounded(resp.Body, 64<<10)
		return Timing{}, fmt.Errorf("%s: GET events: status %d: %s", r.Label, resp.StatusCode, tail(string(rb)))
	}
	return FollowEvents(resp.Body, start, time.Now)
}

// FollowEvents reads a run's NDJSON events until the result event: the
// time from start to the first stdout output that completes Marker, and to
// the result. The run must have ended ok with exit code 0 and Marker.
func FollowEvents(body io.Reader, start time.Time, now func() time.Time) (Timing, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var t Timing
	var stdout []byte
	for sc.Scan() {
		var ev runs.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return t, fmt.Errorf("event is not JSON: %v", err)
		}
		switch ev.Type {
		case runs.EventOutput:
			if ev.Stream != "stdout" || t.First != 0 {
				continue
			}
			stdout = append(stdout, ev.Data...)
			if bytes.Contains(stdout, []byte(Marker)) {
				t.First = now().Sub(start)
			}
		case runs.EventResult:
			t.Result = now().Sub(start)
			if ev.Status == nil {
				return t, errors.New("result event without a status")
			}
			st := ev.Status
			t.HostMs = float64(st.DurationMs)
			switch {
			case st.Result != runs.ResultOK || st.ExitCode == nil || *st.ExitCode != 0:
				code := "none"
				if st.ExitCode != nil {
					code = strconv.Itoa(*st.ExitCode)
				}
				return t, fmt.Errorf("run %s ended %q, exit code %s: %s", st.ID, st.Result, code, tail(st.Error+" "+st.Stderr))
			case t.First == 0:
				return t, fmt.Errorf("run %s: no output event carried %q (stdout %q)", st.ID, Marker, tail(st.Stdout))
			}
			return t, nil
		}
	}
	if err := sc.Err(); err != nil {
		return t, fmt.Errorf("events: %v", err)
	}
	return t, errors.New("events ended before the result event")
}

// DockerSpec is what `docker run` needs to match a run container.
type DockerSpec struct {
	Docker    string // docker CLI
	Image     string
	UID, GID  int
	Workspace string // bound read-only at /workspace (the empty workspace)
	Limits    Limits
	LogDriver string
	LogTag    string
	Runtime   string
	Argv      []string // the command: Argv[0] becomes the entrypoint
}

// DockerArgs is the `docker run` argv (without the CLI path): the flags of
// a run container without setup (pkg/container Spec with RunOptions), flag
// for flag, with the command as the entrypoint instead of the supervisor.
func DockerArgs(s DockerSpec, seq int) []string {
	name := fmt.Sprintf("roundtable-sandbox-bench-run-%d-%d", time.Now().UnixNano()%1e9, seq)
	pids := strconv.FormatInt(s.Limits.Pids, 10)
	args := []string{"run", "--rm", "--name", name, "--network", "none",
		"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--user", fmt.Sprintf("%d:%d", s.UID, s.GID), "--init=false", "--ipc", "none",
		"--memory", fmt.Sprintf("%dm", s.Limits.MemoryMB), "--memory-swap", fmt.Sprintf("%dm", s.Limits.MemoryMB),
		"--cpus", strconv.FormatFloat(s.Limits.CPUs, 'f', -1, 64), "--pids-limit", pids,
		"--ulimit", fmt.Sprintf("nofile=%d:%d", container.MaxOpenFiles, container.MaxOpenFiles),
		"--ulimit", "nproc=" + pids + ":" + pids,
		"--tmpfs", fmt.Sprintf("%s:size=%dm,mode=1777,nosuid,nodev", container.TmpPath, s.Limits.TmpfsMB),
		"--tmpfs", fmt.Sprintf("%s:size=%dm,mode=0755,nosuid,nodev,uid=%d,gid=%d", container.OutputPath, s.Limits.OutputMB, s.UID, s.GID),
		"--mount", fmt.Sprintf("type=bind,source=%s,target=%s,readonly,bind-propagation=rprivate", s.Workspace, protocol.WorkspacePath),
		"--workdir", protocol.WorkspacePath, "--env", "LANG=C.UTF-8",
		"--label", layout.LabelInstallation + "=bench",
		"--label", layout.LabelTurn + "=" + ids.NewTurnID(),
		"--label", layout.LabelChannel + "=bench-run",
		"--label", layout.LabelDeadline + "=" + strconv.FormatInt(time.Now().Add(2*time.Minute).Unix(), 10),
		"--pull", "never", "--log-driver", s.LogDriver,
	}
	if s.LogDriver == "journald" {
		args = append(args, "--log-opt", "tag="+s.LogTag)
	}
	if s.Runtime != "" {
		args = append(args, "--runtime", s.Runtime)
	}
	args = append(args, "--entrypoint", s.Argv[0], s.Image)
	return append(args, s.Argv[1:]...)
}

// ExecRunner times a process whose stdout must carry Marker: to the first
// byte of it on stdout, and to the process's exit (status 0).
type ExecRunner struct {
	Label string
	Argv  func(seq int) []string
}

// Name is the series name.
func (r *ExecRunner) Name() string { return r.Label }

// Run executes the command once.
func (r *ExecRunner) Run(ctx context.Context, seq int) (Timing, error) {
	argv := r.Argv(seq)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Timing{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Timing{}, fmt.Errorf("%s: %v", r.Label, err)
	}
	first, stdout, readErr := FirstMarker(out, start, time.Now)
	err = cmd.Wait()
	t := Timing{First: first, Result: time.Since(start)}
	switch {
	case err != nil:
		return t, fmt.Errorf("%s: %v: %s", r.Label, err, tail(errb.String()))
	case readErr != nil:
		return t, fmt.Errorf("%s: stdout: %v", r.Label, readErr)
	case first == 0:
		return t, fmt.Errorf("%s: stdout %q has no %q", r.Label, tail(string(stdout)), Marker)
	}
	return t, nil
}

// FirstMarker reads r to its end: the time from start to the read that
// completed Marker (0 when it never came) and what was read (bounded).
func FirstMarker(r io.Reader, start time.Time, now func() time.Time) (time.Duration, []byte, error) {
	var first time.Duration
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 && len(got) < 64<<10 {
			got = append(got, buf[:n]...)
			if first == 0 && bytes.Contains(got, []byte(Marker)) {
				first = now().Sub(start)
			}
		}
		if err == io.EOF {
			return first, got, nil
		}
		if err != nil {
			return first, got, err
		}
	}
}

// EngineRunner runs the run's container as the host does (pkg/container:
// create with RunOptions, attach, start, the job on stdin, frames decoded
// with wire.Decoder, wait, remove) with no API, registry, queue or journal
// sink in front: the host's own share of a run is the difference.
type EngineRunner struct {
	Label  string
	Driver *container.Driver
	Spec   container.Spec // Name, Labels and LogTag are filled per run
	Job    wire.Job
}

// Name is the series name.
func (r *EngineRunner) Name() string { return r.Label }

// Run runs one container; the result time includes its removal, as the
// host's result event and docker run --rm's exit do.
func (r *EngineRunner) Run(ctx context.Context, _ int) (Timing, error) {
	var stdin bytes.Buffer
	if err := wire.WriteJob(&stdin, r.Job); err != nil {
		return Timing{}, err
	}
	id := ids.NewTurnID()
	const channel = "bench-engine-run"
	name, err := ids.ContainerName(channel, id)
	if err != nil {
		return Timing{}, err
	}
	spec := r.Spec
	spec.Name = name
	spec.LogTag = ids.LogTag(channel)
	spec.Labels = map[string]string{
		layout.LabelInstallation: "bench",
		layout.LabelTurn:         id,
		layout.LabelChannel:      ids.ChannelTag(channel),
		layout.LabelDeadline:     strconv.FormatInt(time.Now().Add(10*time.Minute).Unix(), 10),
	}
	start := time.Now()
	cid, err := r.Driver.Create(ctx, spec)
	if err != nil {
		return Timing{}, fmt.Errorf("%s: %v", r.Label, err)
	}
	remove := func() error {
		rmCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return r.Driver.Remove(rmCtx, cid)
	}
	started, err := r.Driver.Start(ctx, cid)
	if err != nil {
		return Timing{}, fmt.Errorf("%s: %v (remove: %v)", r.Label, err, remove())
	}
	pr, pw := io.Pipe()
	type decoded struct {
		first time.Duration
		res   wire.Result
		err   error
	}
	done := make(chan decoded, 1)
	go func() {
		d := decodeFrames(wire.NewDecoder(pr, wire.LimitsFor(r.Job)), start)
		pr.CloseWithError(errors.New("run output refused"))
		done <- d
	}()
	var stderr bytes.Buffer
	exit, streamErr := started.Stream(ctx, stdin.Bytes(), pw, &limited{w: &stderr, n: 4096})
	pw.CloseWithError(io.ErrUnexpectedEOF)
	d := <-done
	rmErr := remove()
	t := Timing{First: d.first, Result: time.Since(start)}
	switch {
	case streamErr != nil || rmErr != nil:
		return t, fmt.Errorf("%s: stream: %v, remove: %v: %s", r.Label, streamErr, rmErr, tail(stderr.String()))
	case d.err != nil:
		return t, fmt.Errorf("%s: frames: %v (container exit %d): %s", r.Label, d.err, exit, tail(stderr.String()))
	case d.res.Error != "" || d.res.ExitCode != 0:
		return t, fmt.Errorf("%s: result exit %d, error %q", r.Label, d.res.ExitCode, d.res.Error)
	case d.first == 0:
		return t, fmt.Errorf("%s: no stdout frame carried %q", r.Label, Marker)
	}
	return t, nil
}

// decodeFrames reads frames to the result: when stdout completed Marker.
func decodeFrames(dec *wire.Decoder, start time.Time) (d struct {
	first time.Duration
	res   wire.Result
	err   error
}) {
	var stdout []byte
	for {
		f, err := dec.Next()
		if err != nil {
			d.err = err
			return d
		}
		switch f.Type {
		case wire.FrameStdout:
			if d.first == 0 {
				stdout = append(stdout, f.Data...)
				if bytes.Contains(stdout, []byte(Marker)) {
					d.first = time.Since(start)
				}
			}
		case wire.FrameResult:
			d.res = f.Result
			return d
		}
	}
}

// limited keeps the first n bytes written and discards the rest.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// Series is one runner's measured results, samples in run order.
type Series struct {
	Name           string        `json:"name"`
	FirstMs        []float64     `json:"firstMs"`
	ResultMs       []float64     `json:"resultMs"`
	HostMs         []float64     `json:"hostMs,omitempty"` // the host's durationMs (host series)
	WarmupFirstMs  []float64     `json:"warmupFirstMs"`
	WarmupResultMs []float64     `json:"warmupResultMs"`
	Failures       int           `json:"failures"`
	Errors         []string      `json:"errors,omitempty"`
	First          stats.Summary `json:"first"`
	Result         stats.Summary `json:"result"`
	Host           stats.Summary `json:"host"`
}

const maxErrors = 10

// Interleave runs every runner once per round, in order, for
// warmup+rounds rounds; warm-up samples are kept apart, failures counted.
func Interleave(ctx context.Context, runners []Runner, warmup, rounds int) []Series {
	out := make([]Series, len(runners))
	for i, r := range runners {
		out[i].Name = r.Name()
	}
	seq := 0
	for round := 0; round < warmup+rounds && ctx.Err() == nil; round++ {
		for i, r := range runners {
			if ctx.Err() != nil {
				break
			}
			seq++
			t, err := r.Run(ctx, seq)
			s := &out[i]
			switch {
			case err != nil:
				s.Failures++
				if len(s.Errors) < maxErrors {
					s.Errors = append(s.Errors, err.Error())
				}
				slog.Warn("run failed", "series", s.Name, "round", round, "err", err)
			case round < warmup:
				s.WarmupFirstMs = append(s.WarmupFirstMs, stats.Ms(t.First))
				s.WarmupResultMs = append(s.WarmupResultMs, stats.Ms(t.Result))
			default:
				s.FirstMs = append(s.FirstMs, stats.Ms(t.First))
				s.ResultMs = append(s.ResultMs, stats.Ms(t.Result))
				if t.HostMs > 0 {
					s.HostMs = append(s.HostMs, t.HostMs)
				}
			}
		}
		if (round+1)%5 == 0 {
			slog.Info("run rounds done", "n", round+1, "of", warmup+rounds)
		}
	}
	for i := range out {
		out[i].First = stats.Summarize(out[i].FirstMs)
		out[i].Result = stats.Summarize(out[i].ResultMs)
		out[i].Host = stats.Summarize(out[i].HostMs)
	}
	return out
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}
