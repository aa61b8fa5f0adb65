// Package coderun is the code-run kind (DESIGN.md section 12): the record
// of every run the host keeps (Run: its approval state machine and bounded
// event history; Registry: creation, lookup, retention), admission of a
// run, its approval wait (network runs), a concurrency slot, the
// toolbox container driven through the lifecycle (a wire.Job on stdin,
// wire frames back), artifacts, and the result recorded only after cleanup.
// It holds only the runs' own rules and state; it reaches the host through
// the narrow Host interface and never imports another kind.
// Guarantee: a run's result is recorded only once its container, broker
// units, turn directory and policy file are gone (or the log names what is
// left); a run with network starts only after one human approval of that
// run; a run's job fits wire.MaxJobBytes or is refused before anything
// starts; a finished run's result reaches a client that is reading it or
// asks for it within runs.resultHoldSeconds (new runs are refused rather
// than a result forgotten), and every run forgotten is logged.
package coderun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/gate"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// Errors the host maps to a status.
var (
	// ErrRunsDisabled: runs.enabled is off, or the driver cannot stream.
	ErrRunsDisabled = errors.New("code execution is disabled on this host (runs.enabled)")
	// ErrJobTooLarge: each parameter is within its bound, but the job that
	// carries them all to the container is not.
	ErrJobTooLarge = fmt.Errorf("the command, arguments, setup and artifacts together are over %d bytes", wire.MaxJobBytes)

	errTimeout   = errors.New("run timeout")
	errCancelled = errors.New("run cancelled")
)

// A run's pseudo channel ids.RunName(id), "run-<id>", is its tag (a valid
// channel tag as it is), its container name, its journal identifier
// sandbox/run-<id> and its queue entry; its guest uid is its slot's
// (ids.RunSlot: concurrent runs get distinct uids, RLIMIT_NPROC is per
// uid). No channel key takes either form (ids.ValidChannel).

// Host is what a run needs of the host that made the kind.
type Host interface {
	// Admit runs create under the host's admission lock unless the host
	// is stopping (then sandbox.ErrShuttingDown), and counts the work
	// until done is called, so a shutdown waits for it.
	Admit(create func() error) (done func(), err error)
	// Slot waits for a place under the global concurrency cap, queued
	// under key; sandbox.ErrShuttingDown once the host stops.
	Slot(ctx context.Context, key string) (release func(), err error)
	// Stopped ends, with cause sandbox.ErrShuttingDown, when the host stops.
	Stopped() context.Context
	// GuestUID is the guest uid recorded for key (made on first use).
	GuestUID(key string) (int, error)
	// SpareSlot waits for a slot of the global concurrency granted only
	// when nothing waits for one (a run standby's preparation).
	SpareSlot(ctx context.Context) (release func(), err error)
}

// Options make a Kind.
type Options struct {
	Config    *config.Config
	Lifecycle *sandbox.Lifecycle
	Host      Host
	Logger    *slog.Logger
	Now       func() time.Time
	// Lchown changes one entry, never through a link (a run's gate).
	Lchown func(path string, uid, gid int) error
	// Registry receives sandbox_runs_total and sandbox_run_duration_seconds.
	Registry prometheus.Registerer
	// Fleet, in fleet mode, is where runs go once they may start (fleet.go);
	// Box is this box's name (fleet.box).
	Fleet *fleet.Fleet
	Box   string
}

// Kind is the host's code runs.
type Kind struct {
	cfg      *config.Config
	life     *sandbox.Lifecycle
	host     Host
	log      *slog.Logger
	now      func() time.Time
	lchown   func(path string, uid, gid int) error
	runs     *Registry
	slots    sandbox.Slots
	results  *prometheus.CounterVec
	duration prometheus.Histogram

	// Run standbys (standby.go; nil standbys: every run is cold).
	standbys   *standby.Pool
	warm       sandbox.WarmContainers
	standbyKey string

	// Fleet mode (fleet.go; nil fleet: every run runs here).
	queue   *fleetjobs.Queue
	box     string
	shadows shadowRuns
}

// New makes the kind and its registry from runs.*: every bound of the
// host's memory for runs (config.RunsMemoryBudget) is one of its limits.
func New(o Options) *Kind {
	c := o.Config.Runs
	k := &Kind{
		cfg: o.Config, life: o.Lifecycle, host: o.Host, log: o.Logger, now: o.Now, lchown: o.Lchown,
		runs: NewRegistry(RegistryLimits{
			ApprovalTimeout:    time.Duration(c.ApprovalTimeoutSeconds) * time.Second,
			Retain:             time.Duration(c.RetainSeconds) * time.Second,
			MaxRetained:        c.MaxRetained,
			MaxRetainedBytes:   c.MaxRetainedBytes,
			Hold:               time.Duration(c.ResultHoldSeconds) * time.Second,
			RunBytes:           c.RunRetainedBytes(),
			RetainedKeys:       "runs.maxRetainedBytes, runs.maxRetained; each run is kept runs.resultHoldSeconds after it finishes",
			Logger:             o.Logger,
			MaxActive:          c.MaxInFlight,
			MaxActivePerOwner:  c.MaxInFlightPerClient,
			ActiveKeys:         "runs.maxInFlight",
			ActivePerOwnerKeys: "runs.maxInFlightPerClient",
			MaxOutputBytes:     c.MaxOutputBytes,
			MaxHistoryBytes:    config.RunHistoryBytes,
		}, o.Now),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_runs_total", Help: "Code runs finished, by result (ok, failed, timeout, cancelled, denied, error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sandbox_run_duration_seconds", Help: "Code runs from admission (approval wait included) to their result after cleanup.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200},
		}),
	}
	o.Registry.MustRegister(k.results, k.duration)
	k.newStandbys(o.Registry)
	k.queue, k.box = fleetjobs.New(o.Fleet), o.Box
	shadow := k.runs.lim
	shadow.Hold = -1 // the run's own box holds its result for its client
	k.shadows = shadowRuns{NewRegistry(shadow, o.Now)}
	return k
}

// Registry is the runs' record (the API reads and acts on it).
func (k *Kind) Registry() *Registry { return k.runs }

// Listed are the live runs for GET /v1/turns: the reaper's contract is
// that the host lists a turn (a run is one to the reaper) from before it
// writes anything until after everything of it is gone; a run's result may
// come before its cleanup, so a run stays listed until it End-ed
// (Registry.Live).
func (k *Kind) Listed() []apiwire.Turn {
	var out []apiwire.Turn
	seen := map[string]bool{}
	for _, r := range append(k.shadows.reg.Live(), k.runs.Live()...) {
		if seen[r.ID()] { // this box runs its own run's job
			continue
		}
		seen[r.ID()] = true
		d := k.DeadlineBound(r)
		out = append(out, apiwire.Turn{ID: r.ID(), ChannelTag: ids.RunName(r.ID()), DeadlineUnix: d.Unix(), DeadlineUnixMs: d.UnixMilli(), Run: true})
	}
	if k.standbys != nil {
		// Run standbys from before their preparation until the run that
		// bound one has been cleaned up (the lease's "binding" state).
		for _, w := range k.standbys.Turns() {
			st := w.State
			if st == "binding" {
				st = "" // a run now, no longer waiting
			}
			out = append(out, apiwire.Turn{ID: w.TurnID, ChannelTag: ids.RunName(w.TurnID), DeadlineUnix: w.Expiry.Unix(), DeadlineUnixMs: w.Expiry.UnixMilli(), Run: true, Standby: st})
		}
	}
	return out
}

// Workspace is the directory bound read-only at /workspace: the named
// project's, or an empty one the host keeps.
func (k *Kind) Workspace(project string) (string, error) {
	if project != "" {
		path, ok := k.cfg.Runs.ProjectPath(project)
		if !ok {
			return "", fmt.Errorf("project %q is not declared", project)
		}
		return path, nil
	}
	return sandbox.EmptyWorkspace(k.cfg.WorkspaceRoot)
}

// Start admits a run for owner (the caller's uid) and drives it in the
// background; the answer is its status at once.
func (k *Kind) Start(p runs.Params, owner int) (runs.Status, error) {
	rc := k.cfg.Runs
	if !rc.Enabled {
		return runs.Status{}, ErrRunsDisabled
	}
	if _, ok := k.life.Containers().(sandbox.RunContainers); !ok {
		return runs.Status{}, ErrRunsDisabled
	}
	err := p.Validate(runs.ParamLimits{MaxArtifacts: rc.MaxArtifacts, ProjectKnown: func(name string) bool {
		_, ok := rc.ProjectPath(name)
		return ok
	}, CredentialAvailable: func(name string) bool {
		e, ok := k.cfg.EgressCredential(name)
		return ok && e.MayAsk(p.Project, owner)
	}})
	if err != nil {
		return runs.Status{}, err
	}
	// Each parameter is within its bound, but the job that carries them
	// all to the container has one of its own: refuse here, not later.
	if err := wire.WriteJob(io.Discard, k.job(p, 1)); err != nil {
		return runs.Status{}, ErrJobTooLarge
	}
	var r *Run
	done, err := k.host.Admit(func() error {
		var err error
		r, err = k.runs.Create(p, owner)
		return err
	})
	if err != nil {
		return runs.Status{}, err
	}
	r.setCredentialVariables(k.credentialVariables(p.Credentials))
	k.log.Info("run admitted", "run", r.ID(), "owner_uid", owner, "mode", p.Mode(), "project", p.Project,
		"network", p.Network, "credentials", p.Credentials, "setup", len(p.Setup), "timeout_s", p.TimeoutSeconds, "artifacts", len(p.Artifacts))
	go func() {
		defer done() // shutdown waits for the run's cleanup
		k.drive(r)
	}()
	return r.Summary(), nil
}

// drive takes a run from admission to its result: approval (network
// runs), a concurrency slot, the container, then Finish and cleanup. The
// supervisor's result is recorded as soon as its frame arrives, before the
// container's exit, removal and the slot's release (docs/code-runs.md, "The
// result leaves before the cleanup"); every other result after the
// cleanup, which may change it. The slot is held until the cleanup ended;
// Ended says when the run left nothing behind (or the log says what).
func (k *Kind) drive(r *Run) {
	defer r.End()
	defer k.runs.Prune() // a finished run counts against the retained bounds at once
	id := r.ID()
	log := k.log.With("run", id)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stopWatch := context.AfterFunc(k.host.Stopped(), func() { cancel(sandbox.ErrShuttingDown) })
	defer stopWatch()
	go func() {
		select {
		case <-r.CancelRequested():
			cancel(errCancelled)
		case <-ctx.Done():
		}
	}()
	start := k.now()
	finish := func(f Finish) {
		r.Finish(f)
		st := r.Summary()
		k.results.WithLabelValues(st.Result).Inc()
		k.duration.Observe(time.Since(start).Seconds())
		attrs := []any{"result", st.Result, "duration_ms", st.DurationMs}
		if st.Standby {
			attrs = append(attrs, "standby", true)
		}
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
	stopped := func(err error) Finish {
		if errors.Is(context.Cause(ctx), sandbox.ErrShuttingDown) {
			return Finish{Result: runs.ResultCancelled, Error: "the host stopped"}
		}
		return Finish{Result: runs.ResultCancelled}
	}
	p := r.Params()
	if p.Network {
		stopApproval := k.fleetApproval(ctx, r, log)
		err := r.WaitApproval(ctx)
		stopApproval()
		if err != nil {
			if errors.Is(err, runs.ErrDenied) || errors.Is(err, runs.ErrCancelled) {
				// The registry finished it (denied, timed out or cancelled).
				st := r.Summary()
				k.results.WithLabelValues(st.Result).Inc()
				log.Info("run done", "result", st.Result, "reason", st.Error)
				return
			}
			finish(stopped(err))
			return
		}
		st := r.Summary()
		if st.ApprovedBy != nil {
			log.Info("run network approved", "by_uid", *st.ApprovedBy, "credentials", st.Credentials)
		}
	}
	if k.travels(p) {
		k.driveRemote(ctx, r, log, finish)
		return
	}
	release, err := k.host.Slot(ctx, ids.RunName(id))
	if err != nil {
		if errors.Is(err, sandbox.ErrShuttingDown) {
			finish(Finish{Result: runs.ResultCancelled, Error: "the host stopped"})
			return
		}
		finish(stopped(err))
		return
	}
	defer release()
	if err := r.Start(); err != nil { // cancelled while queued: the registry finished it
		st := r.Summary()
		k.results.WithLabelValues(st.Result).Inc()
		log.Info("run done", "result", st.Result, "reason", st.Error)
		return
	}
	sent := false
	r.Sandboxed() // listed until its cleanup ended, its result notwithstanding
	fin := k.execute(ctx, r, log, func(f Finish) { sent = true; finish(f) })
	if !sent {
		finish(fin)
	}
}

// execute runs the container and always cleans up before it returns
// the run's finish. The supervisor's own result (ok or failed) is given to
// early as soon as its frame arrived, before the container's exit and the
// cleanup; once early ran, what execute returns is the caller's to drop. A
// run of a declared shape binds its ready standby (its job on the started
// supervisor's stdin); any other, and one that finds none, takes the cold
// path.
func (k *Kind) execute(ctx context.Context, r *Run, log *slog.Logger, early func(Finish)) (fin Finish) {
	p := r.Params()
	id := r.ID()
	began := time.Now()
	deadline := k.now().Add(time.Duration(p.TimeoutSeconds) * time.Second)
	runCtx, cancelDeadline := context.WithDeadlineCause(ctx, deadline, errTimeout)
	defer cancelDeadline()
	// Deferred in this order, run in reverse: the container and files go
	// first, then the slot is freed, then the standby's id is no longer
	// listed.
	warm, lease := k.takeStandby(runCtx, p.Project, len(p.Setup) > 0, p.Network)
	var t *sandbox.Handle
	var slot int
	if warm != nil {
		defer lease.Release()
		t, slot = warm.h, warm.slot
		r.ServedByStandby()
		log = log.With("run_standby", t.ID)
	} else {
		t = &sandbox.Handle{ID: id, Channel: ids.RunName(id), Tag: ids.RunName(id), Deadline: deadline, Quiet: true}
		slot = k.slots.Take()
	}
	defer k.slots.Give(slot)
	var earlyFin *Finish // the result given to early, if any
	defer func() {
		if earlyFin != nil && fin.Result != earlyFin.Result {
			log.Warn("run container misbehaved after its result was recorded", "result", earlyFin.Result, "late_result", fin.Result, "late_reason", fin.Error)
		}
	}()
	defer func() {
		if warm != nil {
			warm.started.Close()
		}
		if err := k.life.Cleanup(t, log); err != nil {
			if earlyFin != nil {
				// The result already left; the lifecycle's log line names
				// what an operator must remove, and the metric counts it.
				log.Error("run cleanup failed after its result was recorded", "result", earlyFin.Result)
				return
			}
			msg := "the run's cleanup failed; the operator was told"
			if fin.Error == ErrorDockerWentAway {
				msg = "docker went away during the run and its cleanup failed; the operator was told"
			}
			fin = Finish{Result: runs.ResultError, Error: msg}
		}
		if fin.Duration == 0 {
			fin.Duration = time.Since(began)
		}
	}()
	systemErr := func(what string, err error) Finish {
		switch cause := context.Cause(runCtx); {
		case errors.Is(cause, errTimeout):
			return Finish{Result: runs.ResultTimeout, Error: fmt.Sprintf("the run passed its %d s timeout and was killed", p.TimeoutSeconds)}
		case errors.Is(cause, errCancelled):
			return Finish{Result: runs.ResultCancelled}
		case errors.Is(cause, sandbox.ErrShuttingDown):
			return Finish{Result: runs.ResultCancelled, Error: "the host stopped"}
		}
		log.Error("run failed", "step", what, "err", err)
		return Finish{Result: runs.ResultError, Error: "the run could not be carried out (" + what + "); the host log has details"}
	}

	runsC := k.life.Containers().(sandbox.RunContainers)
	var uid int
	var stream streamFunc
	if warm != nil {
		uid, stream = warm.uid, warm.started.Stream
		// The run's deadline replaces the standby's expiry for the reaper.
		if err := k.writeDeadline(t, deadline); err != nil {
			return systemErr("deadline record", err)
		}
	} else {
		var err error
		if t.Container, err = ids.ContainerName(t.Channel, id); err != nil {
			return systemErr("name", err)
		}
		if uid, err = k.host.GuestUID(ids.RunSlot(slot)); err != nil {
			return systemErr("guest uid", err)
		}
		workspace, err := k.Workspace(p.Project)
		if err != nil {
			return systemErr("project", err)
		}
		gateDir := ""
		if len(p.Setup) > 0 {
			if gateDir, err = gate.Prepare(k.cfg.WorkspaceRoot, slot, uid, k.lchown); err != nil {
				return systemErr("project gate", err)
			}
		}
		if p.Network {
			if err := k.prepareBroker(runCtx, t, p.Credentials); err != nil {
				return systemErr("broker", err)
			}
		}
		spec := k.runSpec(t, uid, workspace, gateDir, len(p.Setup) > 0, sandbox.Labels(k.cfg.Installation, id, t.Tag, deadline))
		t.CreateTried = true
		if t.ContainerID, err = k.life.Containers().Create(runCtx, spec); err != nil {
			return systemErr("container create", err)
		}
		stream = func(ctx context.Context, stdin []byte, stdout, stderr io.Writer) (int64, error) {
			return runsC.Stream(ctx, t.ContainerID, stdin, stdout, stderr)
		}
	}
	job := k.job(p, uid)
	var stdin bytes.Buffer
	if err := wire.WriteJob(&stdin, job); err != nil {
		return systemErr("job", err)
	}
	// The run's own journal identifier and id, whichever container serves it.
	sink := k.life.WorkerLogs().Turn(ids.RunName(id), id, t.Container)
	defer func() { k.life.CloseSink(t, sink) }()
	pr, pw := io.Pipe()
	type decoded struct {
		res       wire.Result
		artifacts []runs.Artifact
		err       error
	}
	done := make(chan decoded, 1)
	go func() {
		res, arts, err := k.decode(r, wire.NewDecoder(pr, wire.LimitsFor(job)), sink)
		pr.CloseWithError(errors.New("run output refused"))
		done <- decoded{res, arts, err}
	}()
	type streamed struct {
		exit int64
		err  error
	}
	streamDone := make(chan streamed, 1)
	go func() {
		exit, err := stream(runCtx, stdin.Bytes(), pw, sink)
		pw.CloseWithError(io.ErrUnexpectedEOF) // the decoder sees the end
		streamDone <- streamed{exit, err}
	}()
	var d decoded
	var sd streamed
	select {
	case d = <-done:
		// The supervisor's result frame, after its last output: a result
		// of its own leaves now; the container's exit and the cleanup
		// follow (the slot stays held until then).
		if d.err == nil && d.res.Error == "" && runCtx.Err() == nil {
			if f, err := k.resultFinish(p, d.res, d.artifacts, began); err == nil {
				earlyFin = &f
				early(f)
			}
		}
		sd = <-streamDone
	case sd = <-streamDone:
		d = <-done
	}
	exit, streamErr := sd.exit, sd.err
	// A broken attach or wait, a stream cut short, or a supervisor stopped
	// by a signal the host never sent: when Docker no longer answers, it
	// is to blame (systemctl restart docker stops every container), not
	// the run's output or the sandbox.
	if runCtx.Err() == nil && (streamErr != nil || d.err != nil || d.res.Error == wire.ErrorStopped) {
		if perr := k.dockerGone(runsC); perr != nil {
			log.Error("run failed: docker went away", "stream_err", streamErr, "output_err", d.err,
				"supervisor_error", d.res.Error, "ping_err", perr)
			return Finish{Result: runs.ResultError, Error: ErrorDockerWentAway}
		}
	}
	if streamErr != nil {
		if runCtx.Err() != nil {
			return systemErr("run", streamErr)
		}
		if d.err != nil {
			log.Warn("run output refused; container killed", "err", d.err)
			return Finish{Result: runs.ResultError, Error: "the run's output broke the protocol and was refused"}
		}
		return systemErr("run", streamErr)
	}
	if d.err != nil {
		log.Warn("run output refused", "err", d.err, "exit_code", exit)
		return Finish{Result: runs.ResultError, Error: "the run's output broke the protocol and was refused"}
	}
	if d.res.Error != "" {
		cut := Cut{Stdout: d.res.StdoutTruncated, Stderr: d.res.StderrTruncated, StdoutDropped: d.res.StdoutDropped, StderrDropped: d.res.StderrDropped}
		return Finish{Result: runs.ResultError, Error: "the sandbox could not run the command: " + d.res.Error, Cut: cut}
	}
	if earlyFin != nil {
		return *earlyFin
	}
	f, err := k.resultFinish(p, d.res, d.artifacts, began)
	if err != nil {
		log.Warn("run artifacts refused", "err", err)
		return Finish{Result: runs.ResultError, Error: "the run's artifacts were refused"}
	}
	return f
}

// resultFinish is the finish of a supervisor's result without an error:
// ok or failed, with its exit code, failed setup, checked artifacts and
// cut; an error when the artifacts are refused.
func (k *Kind) resultFinish(p runs.Params, res wire.Result, artifacts []runs.Artifact, began time.Time) (Finish, error) {
	rc := k.cfg.Runs
	cut := Cut{Stdout: res.StdoutTruncated, Stderr: res.StderrTruncated, StdoutDropped: res.StdoutDropped, StderrDropped: res.StderrDropped}
	arts, err := runs.CheckArtifacts(p.Artifacts, artifacts, rc.MaxArtifactBytes, rc.MaxArtifactTotalBytes)
	if err != nil {
		return Finish{}, err
	}
	code := res.ExitCode
	f := Finish{Result: runs.ResultOK, ExitCode: &code, FailedSetup: res.FailedSetup, Artifacts: arts, Duration: time.Since(began), Cut: cut}
	if code != 0 || res.FailedSetup != 0 {
		f.Result = runs.ResultFailed
	}
	return f, nil
}

// runSpec is a run's toolbox container under handle t: as uid, the
// workspace bound read-only, setup's capabilities and gate when setup.
func (k *Kind) runSpec(t *sandbox.Handle, uid int, workspace, gate string, setup bool, labels map[string]string) sandbox.ContainerSpec {
	rc := k.cfg.Runs
	return sandbox.ContainerSpec{
		Name: t.Container, Image: rc.Image, UID: uid, GID: uid,
		WorkspaceDir: workspace, TurnDir: t.Dir,
		MemoryMB: rc.MemoryMB, CPUs: rc.CPUs, Pids: rc.Pids, TmpfsMB: rc.TmpfsMB,
		Runtime: k.cfg.Runtime, LogTag: "sandbox/" + t.Tag,
		Labels: labels,
		Run:    &sandbox.RunContainer{Setup: setup, GateDir: gate, OutputMB: rc.OutputMB, Command: []string{layout.ToolboxWorker, "run-supervise"}},
	}
}

// ErrorDockerWentAway is a run's error when the Docker daemon stopped
// answering during the run (restarted, stopped or crashed).
const ErrorDockerWentAway = "docker went away during the run (the Docker daemon stopped answering); the host log has details"

// dockerProbeTimeout bounds the ping that decides whether Docker went away.
const dockerProbeTimeout = 5 * time.Second

// dockerGone pings the daemon: nil when it answers.
func (k *Kind) dockerGone(rc sandbox.RunContainers) error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerProbeTimeout)
	defer cancel()
	return rc.Ping(ctx)
}

// decode reads the supervisor's frames: output to the run's record and
// the journal, artifacts collected, until the result.
func (k *Kind) decode(r *Run, dec *wire.Decoder, journal io.Writer) (wire.Result, []runs.Artifact, error) {
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

// prepareBroker gives an approved network run its broker: a turn
// directory, an egress-only policy (egress.allow, the default grant with
// exactly the approved credentialed destinations, the run's deadline; no
// model or tool) and the socket unit. credset copies only the
// credentials those destinations name.
func (k *Kind) prepareBroker(ctx context.Context, t *sandbox.Handle, creds []string) error {
	c := k.cfg
	var err error
	if t.Dir, err = layout.TurnDir(c.RunRoot, t.ID); err != nil {
		return err
	}
	if t.Policy, err = layout.PolicyFile(c.PolicyDir, t.ID); err != nil {
		return err
	}
	g := policy.DefaultEgress()
	if g.Credentials, g.TestRootCA, err = k.cfg.CredentialGrant(creds); err != nil {
		return err
	}
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
	if err := k.life.MakeTurnDir(t); err != nil {
		return err
	}
	if err := k.life.WritePolicyFile(t, data); err != nil {
		return err
	}
	t.UnitTried = true
	return k.life.Units().StartBroker(ctx, t.ID)
}

// credentialVariables are the variables (egress.credentials[].env, or
// its default) of the names: every credential of a run is intercepted and
// reached by its https URL with the placeholder in that variable.
func (k *Kind) credentialVariables(names []string) map[string]string {
	m := map[string]string{}
	for _, n := range names {
		if e, ok := k.cfg.EgressCredential(n); ok {
			m[n] = e.EnvName()
		}
	}
	return m
}

// DeadlineBound is the latest a run's objects may live: its start plus
// its timeout, or, before it started, now plus the approval wait and the
// timeout.
func (k *Kind) DeadlineBound(r *Run) time.Time {
	p, st := r.Params(), r.Summary()
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if st.StartedAt != nil {
		return st.StartedAt.Add(timeout)
	}
	return k.now().Add(time.Duration(k.cfg.Runs.ApprovalTimeoutSeconds)*time.Second + timeout)
}

// job is what the run's supervisor is asked to do, as uid.
func (k *Kind) job(p runs.Params, uid int) wire.Job {
	rc := k.cfg.Runs
	job := wire.Job{
		Setup: p.Setup, UID: uid, GID: uid, Proxy: p.Network, Artifacts: p.Artifacts,
		Placeholders:   len(k.credentialVariables(p.Credentials)) > 0,
		MaxOutputBytes: rc.MaxOutputBytes, MaxArtifactBytes: rc.MaxArtifactBytes, MaxArtifactTotalBytes: rc.MaxArtifactTotalBytes,
	}
	if p.Mode() == runs.ModeShell {
		job.Command = p.Command
	} else {
		job.Argv = append([]string{p.Executable}, p.Args...)
	}
	return job
}
