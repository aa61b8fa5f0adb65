package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// Turn phases (label "phase" of sandbox_turn_phase_seconds).
const (
	PhasePrepare   = "prepare"    // workspace, turn directory, policy file
	PhaseUnitStart = "unit_start" // D-Bus start of the broker socket unit
	PhaseCreate    = "create"     // container create (concurrent with unit_start)
	PhaseStdinGate = "stdin_gate" // started container waits for the unit job
	PhaseRun       = "run"        // attach, start, stdin_gate, stdin, stdout, wait
	PhaseRemove    = "remove"     // kill and force-remove
	PhaseUnitStop  = "unit_stop"  // broker units stopped
	PhaseFiles     = "files"      // turn directory and policy removed
)

// TurnInput is an admitted request.
type TurnInput struct {
	Channel     string
	SpeakerID   string
	SpeakerName string
	PrincipalID string
	Text        string
	// Attachments are a rich turn's files (the API refuses them on a
	// sealed channel).
	Attachments []richproto.Attachment
	// OnReply, when set, receives the reply of a run that succeeded, in
	// RunTurn's goroutine, before cleanup starts; RunTurn returns only after
	// cleanup, so the caller keeps the channel's queue slot (and the host
	// its turn count) until then. Failed runs (deadline, cancel, worker
	// failure) never call it: their callers answer after cleanup, as before.
	// Trade-off: once OnReply ran, a cleanup failure can no longer change
	// that answer; RunTurn still logs it with what to inspect, counts it in
	// sandbox_cleanup_failures_total and returns ErrCleanup.
	OnReply func(reply *protocol.Reply, turnID string)
	// OnFiles, when set, receives a rich turn's reply files (bytes the
	// broker and the host validated; never a path) just before OnReply.
	OnFiles func(files []richproto.File)
}

type turn struct {
	id, channel, tag string
	speaker          protocol.Speaker
	principal, text  string
	deadline         time.Time
	reset            bool
	freshGen         uint64

	container, containerID string
	workspace, dir, policy string
	guest                  int // the channel's guest uid and gid

	madeDir, madePolicy, unitTried, createTried bool

	// warm is the standby this turn bound (nil: the cold path); quiet
	// keeps a standby's own preparation and discard out of the turn
	// phase metrics.
	warm  *warmTurn
	quiet bool

	// research makes this a delegated job's research turn (delegations.go):
	// its own tools, prompt and scratch workspace, no MCP server.
	research *researchTurn

	mu     sync.Mutex
	phases []slog.Attr
}

func (t *turn) phase(h *Host, name string, since time.Time) {
	took := time.Since(since)
	t.mu.Lock()
	t.phases = append(t.phases, slog.Int64(name+"_us", took.Microseconds()))
	t.mu.Unlock()
	if t.quiet {
		return
	}
	h.ObservePhase(name, took)
	if h.opts.ObservePhase != nil {
		h.opts.ObservePhase(name, took)
	}
}

// policyFor is the turn's broker policy: the identity comes from the admitted
// request only, the credential name from the configured rules.
func (h *Host) policyFor(t *turn, deadline time.Time) *policy.Policy {
	p := h.pol
	p.TurnID = t.id
	p.Identity = policy.Identity{
		Channel: t.channel, ChannelTag: ids.ChannelTag(t.channel),
		SpeakerID: t.speaker.ID, SpeakerName: t.speaker.Name, PrincipalID: t.principal,
	}
	p.DeadlineUnixMs = deadline.UnixMilli()
	p.Model.Credential = h.cfg.SelectCredential(t.channel, t.principal, t.speaker.ID)
	if t.research != nil {
		p.Tools, p.MCP = t.research.policy, nil
	}
	return &p
}

// turnJSON is the worker's stdin: public specs, message, speaker id/name.
// Never the principal, a URL or a credential name.
func (h *Host) turnJSON(t *turn, reset bool) ([]byte, error) {
	tt := protocol.Turn{
		Text:     t.text,
		Speaker:  protocol.Speaker{ID: t.speaker.ID, Name: t.speaker.Name},
		Model:    h.cfg.Model.Name,
		Prompt:   h.cfg.Prompt,
		TimeZone: h.cfg.TimeZone,
		Reset:    reset,
		Tools:    append([]protocol.ToolSpec{}, h.tools...),
		MCP:      append([]protocol.MCPServerSpec{}, h.mcpSpecs...),
	}
	if r := t.research; r != nil {
		tt.Prompt, tt.Tools, tt.MCP, tt.NoMemory = r.prompt, append([]protocol.ToolSpec{}, r.tools...), []protocol.MCPServerSpec{}, true
	}
	if err := tt.Validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(tt)
	if err != nil {
		return nil, err
	}
	if len(data) > protocol.MaxTurnBytes {
		return nil, fmt.Errorf("turn JSON is %d bytes, over %d: %w", len(data), protocol.MaxTurnBytes, protocol.ErrTooLarge)
	}
	return data, nil
}

var (
	errCauseDeadline = fmt.Errorf("deadline: %w", ErrDeadline)
	errCauseCancel   = fmt.Errorf("cancel: %w", ErrCancelled)
)

// RunTurn runs one admitted turn to the end (the caller holds the channel's
// queue slot). ctx is the caller's: its end cancels the turn.
func (h *Host) RunTurn(ctx context.Context, in TurnInput) (*protocol.Reply, string, error) {
	start := h.opts.Now()
	t := &turn{
		id: h.opts.NewTurnID(), channel: in.Channel, tag: ids.ChannelTag(in.Channel),
		speaker:   protocol.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		principal: in.PrincipalID, text: in.Text,
		deadline: start.Add(h.cfg.TurnDeadline()),
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, t.deadline, errCauseDeadline)
	defer cancelDeadline()

	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return nil, "", ErrShuttingDown
	}
	if _, busy := h.active[t.channel]; busy { // the queue makes this impossible
		h.mu.Unlock()
		return nil, "", fmt.Errorf("channel already has a running turn: %w", ErrTurnFailed)
	}
	active := &activeTurn{id: t.id, channel: t.channel, deadline: t.deadline, cancel: cancel}
	h.active[t.channel] = active
	t.freshGen, t.reset = h.fresh[t.channel]
	h.turns.Add(1)
	h.mu.Unlock()
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer func() {
		stopWatch()
		h.mu.Lock()
		delete(h.active, t.channel)
		h.mu.Unlock()
		h.turns.Done()
	}()
	h.takeStandby(ctx, t, active)

	log := h.log.With("turn", t.id, "channel", t.tag)
	reply, runErr := h.execute(ctx, t)
	if runErr == nil && in.OnReply != nil {
		// The turn stays listed (its container and units still exist, the
		// reaper must keep them) but is no longer cancellable.
		h.mu.Lock()
		active.replied = true
		h.mu.Unlock()
		in.OnReply(reply, t.id)
	}
	cleanupErr := h.cleanup(t, log)
	// The channel's next turn should find a standby: prepared now, in the
	// background, after this turn's container is gone.
	h.refillStandby(t.channel, h.cfg.SelectCredential(t.channel, t.principal, t.speaker.ID))

	result, err := resultOf(ctx, reply, runErr, cleanupErr)
	if runErr != nil {
		// Details stay here; the caller gets a generic reason.
		attrs := []any{"result", result, "err", runErr}
		var exit *workerExitError
		if errors.As(runErr, &exit) {
			attrs = append(attrs, "exit_code", exit.status, "worker_cause", exit.cause)
		}
		log.Warn("turn failed", attrs...)
	}
	if err == nil && reply.OK && t.reset {
		h.mu.Lock()
		if h.fresh[t.channel] == t.freshGen {
			delete(h.fresh, t.channel)
		}
		h.mu.Unlock()
	}
	took := time.Since(start)
	h.metrics.turns.WithLabelValues(result).Inc()
	h.metrics.duration.Observe(took.Seconds())
	t.mu.Lock()
	attrs := append([]slog.Attr{slog.String("result", result), slog.Int64("total_us", took.Microseconds())}, t.phases...)
	t.mu.Unlock()
	log.LogAttrs(context.Background(), slog.LevelDebug, "turn phases", attrs...)
	if err != nil {
		return nil, t.id, err
	}
	log.Info("turn done", "result", result, "duration_ms", took.Milliseconds(), "standby", t.warm != nil)
	return reply, t.id, nil
}

// resultOf classifies a finished turn: a cleanup failure outranks everything,
// then why the turn's context ended.
func resultOf(ctx context.Context, reply *protocol.Reply, runErr, cleanupErr error) (string, error) {
	if cleanupErr != nil {
		return resultCleanup, cleanupErr
	}
	if runErr == nil {
		if reply.OK {
			return resultOK, nil
		}
		return resultNotOK, nil
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrDeadline):
		return resultDeadline, ErrDeadline
	case errors.Is(cause, ErrCancelled):
		return resultCancelled, ErrCancelled
	case errors.Is(cause, ErrShuttingDown):
		return resultShutdown, ErrShuttingDown
	case cause != nil:
		return resultGone, ErrClientGone
	}
	return resultFailed, ErrTurnFailed
}

// execute prepares and runs the turn; cleanup is the caller's, always.
func (h *Host) execute(ctx context.Context, t *turn) (*protocol.Reply, error) {
	if t.warm != nil {
		return h.bindStandby(ctx, t)
	}
	since := time.Now()
	if err := h.turnPaths(t); err != nil {
		return nil, err
	}
	stdin, err := h.turnJSON(t, t.reset)
	if err != nil {
		return nil, fmt.Errorf("turn JSON: %w", err)
	}
	pol, err := h.policyFor(t, t.deadline).Marshal()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := h.makeTurnDir(t); err != nil {
		return nil, err
	}
	if err := h.writePolicyFile(t, pol); err != nil {
		return nil, err
	}
	t.phase(h, PhasePrepare, since)

	// The broker units start while the container is created, attached and
	// started; the worker's stdin (its turn, and so its first broker call)
	// is written only once the unit job succeeded. A failed unit job kills
	// the started container and fails the turn; cleanup is unchanged.
	spec := h.containerSpec(t, t.deadline, nil)
	var unitErr error
	unitDone := make(chan struct{})
	t.unitTried, t.createTried = true, true
	go func() {
		defer close(unitDone)
		s := time.Now()
		unitErr = h.opts.Units.StartBroker(ctx, t.id)
		t.phase(h, PhaseUnitStart, s)
	}()
	// Whatever the path, the start job has ended before execute returns:
	// cleanup's StopBroker must never run before the start it undoes.
	// StartBroker honours ctx, so this wait is bounded by the turn's.
	defer func() { <-unitDone }()
	unitResult := func() error {
		<-unitDone
		if unitErr != nil {
			return fmt.Errorf("broker units: %w", unitErr)
		}
		return nil
	}

	since = time.Now()
	var createErr error
	t.containerID, createErr = h.opts.Containers.Create(ctx, spec)
	t.phase(h, PhaseCreate, since)
	if createErr != nil {
		return nil, errors.Join(createErr, unitResult())
	}

	gated := false
	ready := func(ctx context.Context) error {
		gated = true // called in Run's goroutine, before Run returns
		s := time.Now()
		select {
		case <-unitDone:
		case <-ctx.Done():
			return ctx.Err()
		}
		t.phase(h, PhaseStdinGate, s)
		return unitResult()
	}
	since = time.Now()
	sink := h.opts.WorkerLogs.Turn(t.tag, t.id, t.container)
	res, err := h.opts.Containers.Run(ctx, t.containerID, stdin, protocol.MaxReplyBytes, ready, sink)
	t.phase(h, PhaseRun, since)
	h.closeSink(t, sink.Close())
	if err != nil {
		if !gated {
			// Run failed before the gate: the unit job's own failure, if
			// any, is still worth reporting.
			err = errors.Join(err, unitResult())
		}
		return nil, fmt.Errorf("run: %w", err)
	}
	return readReply(ctx, res)
}

// closeSink logs a turn's worker log lines that were not forwarded.
func (h *Host) closeSink(t *turn, st workerlog.Stats) {
	if st.Dropped > 0 || st.Truncated > 0 || st.SendErr != nil {
		h.log.Warn("worker log lines not forwarded in full", "turn", t.id, "channel", t.tag,
			"forwarded", st.Lines, "dropped", st.Dropped, "cut", st.Truncated, "stderr_bytes", st.Total, "journal_err", st.SendErr)
	}
}

// readReply judges a finished run: exactly one valid reply object from a
// worker that exited 0, within the deadline.
func readReply(ctx context.Context, res RunResult) (*protocol.Reply, error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if res.Truncated {
		return nil, errors.New("worker stdout over its bound")
	}
	if res.StderrRefused {
		return nil, errors.New("worker stderr over its bound")
	}
	if res.ExitCode != 0 {
		exit := &workerExitError{status: res.ExitCode}
		// A failed worker still prints its reply; DecodeReply admits only a
		// cause from protocol's fixed list, so nothing else reaches the log.
		if r, err := protocol.DecodeReply(res.Stdout); err == nil && !r.OK {
			exit.cause = r.Cause
		}
		return nil, exit
	}
	reply, err := protocol.DecodeReply(res.Stdout)
	if err != nil {
		// The decoder's message can quote guest output: log only its size.
		return nil, fmt.Errorf("worker stdout (%d bytes) is not exactly one valid reply object", len(res.Stdout))
	}
	return reply, nil
}

// turnPaths names the turn's container, workspace, directory and policy
// file, and readies the channel's guest uid and workspace.
func (h *Host) turnPaths(t *turn) error {
	c := h.cfg
	var err error
	if t.container, err = ids.ContainerName(t.channel, t.id); err != nil {
		return err
	}
	if t.workspace, err = layout.WorkspaceDir(c.WorkspaceRoot, t.channel); err != nil {
		return err
	}
	if t.dir, err = layout.TurnDir(c.RunRoot, t.id); err != nil {
		return err
	}
	if t.policy, err = layout.PolicyFile(c.PolicyDir, t.id); err != nil {
		return err
	}
	sock, _ := layout.BrokerSocket(c.RunRoot, t.id)
	if len(sock) > layout.MaxSocketPath {
		return fmt.Errorf("broker socket path is %d characters, over %d", len(sock), layout.MaxSocketPath)
	}
	if t.guest, err = h.guestFor(t.channel, t.workspace); err != nil {
		return fmt.Errorf("guest uid: %w", err)
	}
	if t.research != nil {
		// The channel's guest uid, a scratch workspace of its own.
		t.workspace = t.research.scratch
	}
	if err := h.ensureWorkspace(t.workspace, t.guest, t.tag); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// makeTurnDir makes the turn's directory. It exists before the socket
// unit starts, so systemd never makes a root-owned parent for the socket.
// It stays the host's (the reaper removes it) and is 0711 so the guest uid
// can reach the 0666 socket in it; runRoot (0700) keeps every other host
// user out, and a container sees only its own turn directory.
func (h *Host) makeTurnDir(t *turn) error {
	if err := os.Mkdir(t.dir, TurnDirMode); err != nil {
		return fmt.Errorf("turn directory: %w", err)
	}
	t.madeDir = true
	if err := os.Chmod(t.dir, TurnDirMode); err != nil { // the unit's UMask=0077
		return fmt.Errorf("turn directory: %w", err)
	}
	return nil
}

// writePolicyFile writes (binding a standby: replaces) the turn's policy
// file atomically, in the broker's group.
func (h *Host) writePolicyFile(t *turn, data []byte) error {
	t.madePolicy = true // a failed write may leave nothing; removal tolerates that
	if err := atomicfile.WriteFile(t.policy, data, 0o640); err != nil {
		return fmt.Errorf("policy file: %w", err)
	}
	if h.opts.BrokerGID > 0 {
		// The packaged policyDir is setgid _sandbox-broker, so the group is
		// normally right already (and the host, not in that group, could
		// not chown to it); fix it only where it is not.
		st, err := os.Lstat(t.policy)
		if err != nil {
			return fmt.Errorf("policy file: %w", err)
		}
		if gid, ok := fileGroup(st); !ok || gid != h.opts.BrokerGID {
			if err := os.Lchown(t.policy, -1, h.opts.BrokerGID); err != nil {
				return fmt.Errorf("policy file group (make policyDir setgid %d): %w", h.opts.BrokerGID, err)
			}
		}
	}
	return nil
}

// containerSpec is the turn's container; deadline is its deadline label
// (a standby's expiry: labels cannot change once it binds), extra adds
// labels.
func (h *Host) containerSpec(t *turn, deadline time.Time, extra map[string]string) ContainerSpec {
	c := h.cfg
	labels := map[string]string{
		layout.LabelInstallation: c.Installation,
		layout.LabelTurn:         t.id,
		layout.LabelChannel:      t.tag,
		layout.LabelDeadline:     strconv.FormatInt(deadline.Unix(), 10),
	}
	for k, v := range extra {
		labels[k] = v
	}
	return ContainerSpec{
		Name: t.container, Image: c.Image, UID: t.guest, GID: t.guest,
		WorkspaceDir: t.workspace, TurnDir: t.dir,
		MemoryMB: c.Limits.MemoryMB, CPUs: c.Limits.CPUs, Pids: c.Limits.Pids, TmpfsMB: c.Limits.TmpfsMB,
		Runtime: c.Runtime, LogTag: ids.LogTag(t.channel),
		Labels: labels,
	}
}

// workerExitError is a worker that exited non-zero: its status and the
// failure cause its reply named (a protocol Cause constant), if any.
type workerExitError struct {
	status int64
	cause  string
}

func (e *workerExitError) Error() string {
	cause := "the worker reported no cause"
	if e.cause != "" {
		cause = "the worker reports: " + e.cause
	}
	return fmt.Sprintf("worker exited with status %d (%s); %s", e.status, exitMeaning(e.status), cause)
}

// exitMeaning reads a container's exit status.
func exitMeaning(status int64) string {
	switch {
	case status == 1:
		return "turn failed"
	case status == 2:
		return "worker crashed"
	case status == 128+9:
		return "killed by SIGKILL: memory limit or forced stop"
	case status == 128+15:
		return "stopped by SIGTERM"
	case status > 128 && status <= 128+64:
		return fmt.Sprintf("killed by signal %d", status-128)
	case status < 0:
		return "status unknown"
	}
	return "unexpected status"
}

// TurnDirMode lets the guest uid traverse its turn directory to the broker
// socket (SocketMode=0666 in sandbox-broker@.socket), nothing more.
const TurnDirMode = 0o711

// guestFor is the channel's guest uid from the state file. The owner of an
// existing workspace is offered for adoption, so a lost state file does not
// hand a channel's files to a new uid.
func (h *Host) guestFor(channel, workspace string) (int, error) {
	owner := -1
	if st, err := os.Lstat(workspace); err == nil && st.IsDir() {
		if o, ok := fileOwner(st); ok {
			owner = o
		}
	}
	uid, err := h.state.GuestUID(channel, h.cfg.Guests, owner)
	if err != nil {
		return 0, err
	}
	if uid == h.opts.UID || uid == h.opts.GID || uid <= 0 { // config and state checks make this unreachable
		return 0, fmt.Errorf("guest uid %d is the host's own or root", uid)
	}
	return uid, nil
}

// ensureWorkspace makes the channel's workspace 0700 and owned by its guest
// uid:gid, or accepts an existing directory (not a symlink) owned by them.
// A workspace of another owner (one made before guests had their own uids,
// or by an earlier guest range) is handed over whole, without following any
// symlink in it. The host never reads inside a workspace.
func (h *Host) ensureWorkspace(dir string, guest int, tag string) error {
	err := os.Mkdir(dir, 0o700)
	made := err == nil
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() || st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is not a directory", dir)
	}
	owner, _ := fileOwner(st)
	group, _ := fileGroup(st)
	if owner == guest && group == guest {
		return nil
	}
	if err := h.opts.ChownTree(dir, guest, guest); err != nil {
		return fmt.Errorf("give %s to guest uid %d (the host needs CAP_CHOWN, see sandbox-host.service; by hand: chown -R %d:%d %s): %w", dir, guest, guest, guest, dir, err)
	}
	if !made {
		h.log.Info("workspace handed to the channel's guest uid", "channel", tag, "workspace", dir, "from_uid", owner, "guest_uid", guest)
	}
	return nil
}

// RemoveAttempts bounds the removals of one container, the first included:
// a daemon that is restarting (Docker down for seconds) must not leave a
// Dead container behind until the next reaper pass.
const RemoveAttempts = 6

const maxRemoveRetryDelay = 2 * time.Second

// removeContainer force-removes the turn's container: first by target (its
// id, or its name when create did not answer), then, when that fails, by
// name (which also covers the create/attach race) up to RemoveAttempts in
// all, pausing RemoveRetryDelay doubling to 2 s (100 ms, 200 ms, ... 1.6 s
// by default: about 3 s of pauses), starting no retry and ending none
// later than RemoveRetryTotal after the first removal.
// The first removal is always made; retries stop when the host abandons
// cleanup (a shutdown out of time, see ShutdownContext). A container still
// there is logged for the operator and left to sandbox-reaper.
func (h *Host) removeContainer(target, name string, log *slog.Logger) error {
	start := time.Now()
	attempt := func(ctx context.Context, d time.Duration, id string) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return h.opts.Containers.Remove(ctx, id)
	}
	err := attempt(context.Background(), h.opts.RemoveTimeout, target)
	if err == nil {
		return nil
	}
	log.Warn("container removal failed; retrying", "container", name, "err", err,
		"attempts_left", RemoveAttempts-1, "within_ms", h.opts.RemoveRetryTotal.Milliseconds())
	delay, attempts, stopped := h.opts.RemoveRetryDelay, 1, ""
	for attempts < RemoveAttempts {
		left := h.opts.RemoveRetryTotal - time.Since(start) - delay
		if left <= 0 {
			stopped = "retry time used up"
			break
		}
		pause := time.NewTimer(delay)
		select {
		case <-h.cleanupCtx.Done():
			pause.Stop()
		case <-pause.C:
		}
		if h.cleanupCtx.Err() != nil {
			stopped = "host shutdown out of time"
			break
		}
		attempts++
		if err = attempt(h.cleanupCtx, min(h.opts.SecondRemoval, left), name); err == nil {
			log.Info("container removed after retries", "container", name, "attempts", attempts,
				"took_ms", time.Since(start).Milliseconds())
			return nil
		}
		log.Debug("container removal retry failed", "container", name, "attempt", attempts, "err", err)
		delay = min(2*delay, maxRemoveRetryDelay)
	}
	if stopped == "" {
		stopped = "attempts used up"
	}
	log.Error("container removal failed; left to sandbox-reaper", "container", name, "err", err,
		"attempts", attempts, "took_ms", time.Since(start).Milliseconds(), "stopped", stopped)
	return err
}

// cleanup runs whatever happened before: kill and force-remove the container
// (retried, see removeContainer), stop the broker units, remove the turn
// directory and the policy file. It never uses the turn's context, which
// may be over.
func (h *Host) cleanup(t *turn, log *slog.Logger) error {
	var failed []string
	bounded := func(d time.Duration, f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return f(ctx)
	}
	if t.createTried {
		since := time.Now()
		target := t.containerID
		if target == "" {
			target = t.container // create may have succeeded in the daemon anyway
		}
		if err := bounded(h.opts.RemoveTimeout, func(ctx context.Context) error { return h.opts.Containers.Kill(ctx, target) }); err != nil {
			log.Debug("kill before removal", "err", err) // usually: already exited
		}
		if err := h.removeContainer(target, t.container, log); err != nil {
			failed = append(failed, "container")
		}
		t.phase(h, PhaseRemove, since)
	}
	if t.unitTried {
		since := time.Now()
		if err := bounded(h.opts.RemoveTimeout, func(ctx context.Context) error { return h.opts.Units.StopBroker(ctx, t.id) }); err != nil {
			failed = append(failed, "units")
			log.Error("broker unit stop failed", "err", err)
		}
		t.phase(h, PhaseUnitStop, since)
	}
	since := time.Now()
	if t.madeDir {
		if err := os.RemoveAll(t.dir); err != nil {
			failed = append(failed, "turn_dir")
			log.Error("turn directory removal failed", "err", err)
		}
	}
	if t.madePolicy {
		if err := os.Remove(t.policy); err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed = append(failed, "policy")
			log.Error("policy file removal failed", "err", err)
		}
	}
	t.phase(h, PhaseFiles, since)
	if len(failed) == 0 {
		return nil
	}
	for _, what := range failed {
		h.metrics.cleanupFailures.WithLabelValues(what).Inc()
	}
	sockUnit, _ := ids.BrokerSocketUnit(t.id)
	svcUnit, _ := ids.BrokerServiceUnit(t.id)
	log.Error("turn cleanup failed; operator must inspect and remove by hand (sandbox-reaper also sweeps these)",
		"failed", failed, "container", t.container, "units", []string{sockUnit, svcUnit},
		"turn_dir", t.dir, "policy_file", t.policy)
	return fmt.Errorf("%v: %w", failed, ErrCleanup)
}
