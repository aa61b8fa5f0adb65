package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Code runs (DESIGN.md section 12). A run reuses a turn's lifecycle: its
// container, labels, cleanup with retries, broker units (network runs
// only) and the global concurrency cap; what differs is the image, the
// mounts, the policy (egress only) and what stdin and stdout carry (a
// wire.Job in, wire frames out).

// Run errors the API maps (statusOf).
var (
	ErrRunsDisabled = errors.New("code execution is disabled on this host (runs.enabled)")
	errRunTimeout   = errors.New("run timeout")
	errRunCancelled = errors.New("run cancelled")
)

// runChannelPrefix makes a run's pseudo channel "run-<id>": its tag (a
// valid channel tag as it is), its container name, its journal identifier
// sandbox/run-<id> and its queue entry.
const runChannelPrefix = "run-"

// runSlotChannel names the guest-uid record of run slot k: concurrent runs
// get distinct uids (RLIMIT_NPROC is per uid), never a channel's.
func runSlotChannel(k int) string { return "sandbox-run-slot/" + strconv.Itoa(k) }

// runSlots hands out the lowest free slot.
type runSlots struct {
	mu   sync.Mutex
	used []bool
}

func (s *runSlots) take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, u := range s.used {
		if !u {
			s.used[i] = true
			return i
		}
	}
	s.used = append(s.used, true)
	return len(s.used) - 1
}

func (s *runSlots) give(k int) {
	s.mu.Lock()
	s.used[k] = false
	s.mu.Unlock()
}

// newRunRegistry is the host's run registry from runs.*: every bound of
// the host's memory for runs (config.RunsMemoryBudget) is one of its limits.
func newRunRegistry(c config.Runs, now func() time.Time) *runs.Registry {
	return runs.NewRegistry(runs.RegistryLimits{
		ApprovalTimeout:    time.Duration(c.ApprovalTimeoutSeconds) * time.Second,
		Retain:             time.Duration(c.RetainSeconds) * time.Second,
		MaxRetained:        c.MaxRetained,
		MaxRetainedBytes:   c.MaxRetainedBytes,
		MaxActive:          c.MaxInFlight,
		MaxActivePerOwner:  c.MaxInFlightPerClient,
		ActiveKeys:         "runs.maxInFlight",
		ActivePerOwnerKeys: "runs.maxInFlightPerClient",
		MaxOutputBytes:     c.MaxOutputBytes,
		MaxHistoryBytes:    config.RunHistoryBytes,
	}, now)
}

// StartRun admits a run for owner (the caller's uid) and drives it in the
// background; the answer is its status at once.
func (h *Host) StartRun(p runs.Params, owner int) (runs.Status, error) {
	rc := h.cfg.Runs
	if !rc.Enabled {
		return runs.Status{}, ErrRunsDisabled
	}
	if _, ok := h.opts.Containers.(RunContainers); !ok {
		return runs.Status{}, ErrRunsDisabled
	}
	err := p.Validate(runs.ParamLimits{MaxArtifacts: rc.MaxArtifacts, ProjectKnown: func(name string) bool {
		_, ok := rc.ProjectPath(name)
		return ok
	}})
	if err != nil {
		return runs.Status{}, err
	}
	// Each parameter is within its bound, but the job that carries them
	// all to the container has one of its own: refuse here, not later.
	if err := wire.WriteJob(io.Discard, h.runJob(p, 1)); err != nil {
		return runs.Status{}, badRequest(fmt.Sprintf("the command, arguments, setup and artifacts together are over %d bytes", wire.MaxJobBytes))
	}
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return runs.Status{}, ErrShuttingDown
	}
	r, err := h.runs.Create(p, owner)
	if err != nil {
		h.mu.Unlock()
		return runs.Status{}, err
	}
	h.turns.Add(1) // shutdown waits for the run's cleanup
	h.mu.Unlock()
	h.log.Info("run admitted", "run", r.ID(), "owner_uid", owner, "mode", p.Mode(), "project", p.Project,
		"network", p.Network, "setup", len(p.Setup), "timeout_s", p.TimeoutSeconds, "artifacts", len(p.Artifacts))
	go h.driveRun(r)
	return r.Summary(), nil
}

// driveRun takes a run from admission to its result: approval (network
// runs), a concurrency slot, the container, cleanup, then Finish. The
// result is recorded only after cleanup, so a finished run has left
// nothing behind (or the log says what).
func (h *Host) driveRun(r *runs.Run) {
	defer h.turns.Done()
	defer h.runs.Prune() // a finished run counts against the retained bounds at once
	id := r.ID()
	log := h.log.With("run", id)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer stopWatch()
	go func() {
		select {
		case <-r.CancelRequested():
			cancel(errRunCancelled)
		case <-ctx.Done():
		}
	}()
	start := h.opts.Now()
	finish := func(f runs.Finish) {
		r.Finish(f)
		st := r.Summary()
		h.metrics.runs.WithLabelValues(st.Result).Inc()
		h.metrics.runDuration.Observe(time.Since(start).Seconds())
		attrs := []any{"result", st.Result, "duration_ms", st.DurationMs}
		if st.ExitCode != nil {
			attrs = append(attrs, "exit_code", *st.ExitCode)
		}
		if st.Error != "" {
			attrs = append(attrs, "reason", st.Error)
		}
		if st.StdoutTruncated {
			attrs = append(attrs, "stdout_cut_dropped_bytes", st.StdoutDroppedBytes)
		}
		if st.StderrTruncated {
			attrs = append(attrs, "stderr_cut_dropped_bytes", st.StderrDroppedBytes)
		}
		log.Info("run done", attrs...)
	}
	stopped := func(err error) runs.Finish {
		if errors.Is(context.Cause(ctx), ErrShuttingDown) {
			return runs.Finish{Result: runs.ResultCancelled, Error: "the host stopped"}
		}
		return runs.Finish{Result: runs.ResultCancelled}
	}
	p := r.Params()
	if p.Network {
		if err := r.WaitApproval(ctx); err != nil {
			if errors.Is(err, runs.ErrDenied) || errors.Is(err, runs.ErrCancelled) {
				// The registry finished it (denied, timed out or cancelled).
				st := r.Summary()
				h.metrics.runs.WithLabelValues(st.Result).Inc()
				log.Info("run done", "result", st.Result, "reason", st.Error)
				return
			}
			finish(stopped(err))
			return
		}
		st := r.Summary()
		if st.ApprovedBy != nil {
			log.Info("run network approved", "by_uid", *st.ApprovedBy)
		}
	}
	release, err := h.queue.acquire(ctx, runChannelPrefix+id)
	if err != nil {
		if errors.Is(err, ErrShuttingDown) {
			finish(runs.Finish{Result: runs.ResultCancelled, Error: "the host stopped"})
			return
		}
		finish(stopped(err))
		return
	}
	defer release()
	if err := r.Start(); err != nil { // cancelled while queued: the registry finished it
		st := r.Summary()
		h.metrics.runs.WithLabelValues(st.Result).Inc()
		log.Info("run done", "result", st.Result, "reason", st.Error)
		return
	}
	finish(h.executeRun(ctx, r, log))
}

// executeRun runs the container and always cleans up before it returns
// the run's finish.
func (h *Host) executeRun(ctx context.Context, r *runs.Run, log *slog.Logger) (fin runs.Finish) {
	rc := h.cfg.Runs
	p := r.Params()
	id := r.ID()
	began := time.Now()
	deadline := h.opts.Now().Add(time.Duration(p.TimeoutSeconds) * time.Second)
	runCtx, cancelDeadline := context.WithDeadlineCause(ctx, deadline, errRunTimeout)
	defer cancelDeadline()
	t := &turn{Handle: sandbox.Handle{ID: id, Channel: runChannelPrefix + id, Tag: runChannelPrefix + id, Deadline: deadline, Quiet: true}}
	slot := h.runSlots.take()
	defer h.runSlots.give(slot)
	defer func() {
		if err := h.cleanup(t, log); err != nil {
			msg := "the run's cleanup failed; the operator was told"
			if fin.Error == ErrorDockerWentAway {
				msg = "docker went away during the run and its cleanup failed; the operator was told"
			}
			fin = runs.Finish{Result: runs.ResultError, Error: msg}
		}
		if fin.Duration == 0 {
			fin.Duration = time.Since(began)
		}
	}()
	systemErr := func(what string, err error) runs.Finish {
		switch cause := context.Cause(runCtx); {
		case errors.Is(cause, errRunTimeout):
			return runs.Finish{Result: runs.ResultTimeout, Error: fmt.Sprintf("the run passed its %d s timeout and was killed", p.TimeoutSeconds)}
		case errors.Is(cause, errRunCancelled):
			return runs.Finish{Result: runs.ResultCancelled}
		case errors.Is(cause, ErrShuttingDown):
			return runs.Finish{Result: runs.ResultCancelled, Error: "the host stopped"}
		}
		log.Error("run failed", "step", what, "err", err)
		return runs.Finish{Result: runs.ResultError, Error: "the run could not be carried out (" + what + "); the host log has details"}
	}

	var err error
	if t.Container, err = ids.ContainerName(t.Channel, id); err != nil {
		return systemErr("name", err)
	}
	uid, err := h.state.GuestUID(runSlotChannel(slot), h.cfg.Guests, -1)
	if err != nil {
		return systemErr("guest uid", err)
	}
	workspace, err := h.runWorkspace(p.Project)
	if err != nil {
		return systemErr("project", err)
	}
	if p.Network {
		if err := h.prepareRunBroker(runCtx, t); err != nil {
			return systemErr("broker", err)
		}
	}
	spec := ContainerSpec{
		Name: t.Container, Image: rc.Image, UID: uid, GID: uid,
		WorkspaceDir: workspace, TurnDir: t.Dir,
		MemoryMB: rc.MemoryMB, CPUs: rc.CPUs, Pids: rc.Pids, TmpfsMB: rc.TmpfsMB,
		Runtime: h.cfg.Runtime, LogTag: "sandbox/" + t.Tag,
		Labels: map[string]string{
			layout.LabelInstallation: h.cfg.Installation,
			layout.LabelTurn:         id,
			layout.LabelChannel:      t.Tag,
			layout.LabelDeadline:     strconv.FormatInt(deadline.Unix(), 10),
		},
		Run: &RunContainer{Setup: len(p.Setup) > 0, OutputMB: rc.OutputMB, Command: []string{layout.ToolboxWorker, "run-supervise"}},
	}
	job := h.runJob(p, uid)
	var stdin bytes.Buffer
	if err := wire.WriteJob(&stdin, job); err != nil {
		return systemErr("job", err)
	}
	t.CreateTried = true
	if t.ContainerID, err = h.opts.Containers.Create(runCtx, spec); err != nil {
		return systemErr("container create", err)
	}
	sink := h.opts.WorkerLogs.Turn(t.Tag, id, t.Container)
	defer func() { h.life.CloseSink(&t.Handle, sink) }()
	pr, pw := io.Pipe()
	type decoded struct {
		res       wire.Result
		artifacts []runs.Artifact
		err       error
	}
	done := make(chan decoded, 1)
	go func() {
		res, arts, err := h.decodeRun(r, wire.NewDecoder(pr, wire.LimitsFor(job)), sink)
		pr.CloseWithError(errors.New("run output refused"))
		done <- decoded{res, arts, err}
	}()
	runsC := h.opts.Containers.(RunContainers)
	exit, streamErr := runsC.Stream(runCtx, t.ContainerID, stdin.Bytes(), pw, sink)
	pw.CloseWithError(io.ErrUnexpectedEOF) // the decoder sees the end
	d := <-done
	// A broken attach or wait, a stream cut short, or a supervisor stopped
	// by a signal the host never sent: when Docker no longer answers, it
	// is to blame (systemctl restart docker stops every container), not
	// the run's output or the sandbox.
	if runCtx.Err() == nil && (streamErr != nil || d.err != nil || d.res.Error == wire.ErrorStopped) {
		if perr := h.dockerGone(runsC); perr != nil {
			log.Error("run failed: docker went away", "stream_err", streamErr, "output_err", d.err,
				"supervisor_error", d.res.Error, "ping_err", perr)
			return runs.Finish{Result: runs.ResultError, Error: ErrorDockerWentAway}
		}
	}
	if streamErr != nil {
		if runCtx.Err() != nil {
			return systemErr("run", streamErr)
		}
		if d.err != nil {
			log.Warn("run output refused; container killed", "err", d.err)
			return runs.Finish{Result: runs.ResultError, Error: "the run's output broke the protocol and was refused"}
		}
		return systemErr("run", streamErr)
	}
	if d.err != nil {
		log.Warn("run output refused", "err", d.err, "exit_code", exit)
		return runs.Finish{Result: runs.ResultError, Error: "the run's output broke the protocol and was refused"}
	}
	cut := runs.Cut{Stdout: d.res.StdoutTruncated, Stderr: d.res.StderrTruncated, StdoutDropped: d.res.StdoutDropped, StderrDropped: d.res.StderrDropped}
	if d.res.Error != "" {
		return runs.Finish{Result: runs.ResultError, Error: "the sandbox could not run the command: " + d.res.Error, Cut: cut}
	}
	arts, err := runs.CheckArtifacts(p.Artifacts, d.artifacts, rc.MaxArtifactBytes, rc.MaxArtifactTotalBytes)
	if err != nil {
		log.Warn("run artifacts refused", "err", err)
		return runs.Finish{Result: runs.ResultError, Error: "the run's artifacts were refused"}
	}
	code := d.res.ExitCode
	f := runs.Finish{Result: runs.ResultOK, ExitCode: &code, FailedSetup: d.res.FailedSetup, Artifacts: arts, Duration: time.Since(began), Cut: cut}
	if code != 0 || d.res.FailedSetup != 0 {
		f.Result = runs.ResultFailed
	}
	return f
}

// ErrorDockerWentAway is a run's error when the Docker daemon stopped
// answering during the run (restarted, stopped or crashed).
const ErrorDockerWentAway = "docker went away during the run (the Docker daemon stopped answering); the host log has details"

// dockerProbeTimeout bounds the ping that decides whether Docker went away.
const dockerProbeTimeout = 5 * time.Second

// dockerGone pings the daemon: nil when it answers.
func (h *Host) dockerGone(rc RunContainers) error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerProbeTimeout)
	defer cancel()
	return rc.Ping(ctx)
}

// decodeRun reads the supervisor's frames: output to the run's record and
// the journal, artifacts collected, until the result.
func (h *Host) decodeRun(r *runs.Run, dec *wire.Decoder, journal io.Writer) (wire.Result, []runs.Artifact, error) {
	var arts []runs.Artifact
	for {
		f, err := dec.Next()
		if err != nil {
			return wire.Result{}, nil, err
		}
		switch f.Type {
		case wire.FrameStdout, wire.FrameStderr:
			stream := runs.StreamStdout
			if f.Type == wire.FrameStderr {
				stream = runs.StreamStderr
			}
			r.Output(stream, f.Phase, f.Data)
			journal.Write(f.Data)
		case wire.FrameArtifact:
			a := runs.Artifact{Path: f.Artifact.Path, Size: f.Artifact.Size, Error: f.Artifact.Error}
			if a.Error == "" {
				a.Data = make([]byte, 0, a.Size)
			}
			arts = append(arts, a)
		case wire.FrameArtifactData:
			last := &arts[len(arts)-1]
			last.Data = append(last.Data, f.Data...)
		case wire.FrameResult:
			return f.Result, arts, nil
		}
	}
}

// runWorkspace is the directory bound read-only at /workspace: the named
// project's, or an empty one the host keeps.
func (h *Host) runWorkspace(project string) (string, error) {
	if project != "" {
		path, ok := h.cfg.Runs.ProjectPath(project)
		if !ok {
			return "", fmt.Errorf("project %q is not declared", project)
		}
		return path, nil
	}
	dir := filepath.Join(h.cfg.WorkspaceRoot, ".run-empty")
	if err := os.Mkdir(dir, 0o555); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() || st.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	// The unit's UMask (0077) turns Mkdir's 0555 into 0500, which the
	// run's uid cannot enter (its command then fails to start with
	// "permission denied"): the mode is set, not masked.
	if st.Mode().Perm() != 0o555 {
		if err := os.Chmod(dir, 0o555); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// prepareRunBroker gives an approved network run its broker: a turn
// directory, an egress-only policy (egress.allow, the default grant, the
// run's deadline; no model, tool or credential) and the socket unit.
func (h *Host) prepareRunBroker(ctx context.Context, t *turn) error {
	c := h.cfg
	var err error
	if t.Dir, err = layout.TurnDir(c.RunRoot, t.ID); err != nil {
		return err
	}
	if t.Policy, err = layout.PolicyFile(c.PolicyDir, t.ID); err != nil {
		return err
	}
	g := policy.DefaultEgress()
	pol := policy.Policy{
		Version: policy.Version, TurnID: t.ID,
		Identity:       policy.Identity{Channel: t.Channel, ChannelTag: t.Tag},
		DeadlineUnixMs: t.Deadline.UnixMilli(),
		Limits:         c.Broker.PolicyLimits(),
		EgressAllow:    append([]string{}, c.Egress.Allow...),
		Egress:         &g,
		EgressOnly:     true,
	}
	if pol.Limits.MaxConnections <= g.MaxConnections {
		pol.Limits.MaxConnections = g.MaxConnections + 1
	}
	data, err := pol.Marshal()
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if err := h.makeTurnDir(t); err != nil {
		return err
	}
	if err := h.writePolicyFile(t, data); err != nil {
		return err
	}
	t.UnitTried = true
	return h.opts.Units.StartBroker(ctx, t.ID)
}

// runDeadlineBound is the latest a run's objects may live: its start plus
// its timeout, or, before it started, now plus the approval wait and the
// timeout.
func (h *Host) runDeadlineBound(r *runs.Run) time.Time {
	p, st := r.Params(), r.Summary()
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if st.StartedAt != nil {
		return st.StartedAt.Add(timeout)
	}
	return h.opts.Now().Add(time.Duration(h.cfg.Runs.ApprovalTimeoutSeconds)*time.Second + timeout)
}

// RunStatus is one run's status (any owner: callers check access).
func (h *Host) RunStatus(id string) (runs.Status, error) {
	r, err := h.runs.Get(id)
	if err != nil {
		return runs.Status{}, err
	}
	return r.Status(), nil
}

// ApproveRun approves network for a run awaiting it, as uid (an admin:
// callers check the role).
func (h *Host) ApproveRun(id string, uid int) error {
	r, err := h.runs.Get(id)
	if err != nil {
		return err
	}
	return r.Approve(uid)
}

// CancelRun cancels a run (callers check access).
func (h *Host) CancelRun(id string) error {
	r, err := h.runs.Get(id)
	if err != nil {
		return err
	}
	return r.Cancel()
}

// runJob is what the run's supervisor is asked to do, as uid.
func (h *Host) runJob(p runs.Params, uid int) wire.Job {
	rc := h.cfg.Runs
	job := wire.Job{
		Setup: p.Setup, UID: uid, GID: uid, Proxy: p.Network, Artifacts: p.Artifacts,
		MaxOutputBytes: rc.MaxOutputBytes, MaxArtifactBytes: rc.MaxArtifactBytes, MaxArtifactTotalBytes: rc.MaxArtifactTotalBytes,
	}
	if p.Mode() == runs.ModeShell {
		job.Command = p.Command
	} else {
		job.Argv = append([]string{p.Executable}, p.Args...)
	}
	return job
}
