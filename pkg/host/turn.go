package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Turn phases (sandbox.Phase*), under the names the host's callers use.
const (
	PhasePrepare   = sandbox.PhasePrepare
	PhaseUnitStart = sandbox.PhaseUnitStart
	PhaseCreate    = sandbox.PhaseCreate
	PhaseStdinGate = sandbox.PhaseStdinGate
	PhaseRun       = sandbox.PhaseRun
	PhaseRemove    = sandbox.PhaseRemove
	PhaseUnitStop  = sandbox.PhaseUnitStop
	PhaseFiles     = sandbox.PhaseFiles
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

// turn is a sealed turn: its sandbox's objects (the lifecycle's Handle)
// and what only a turn has.
type turn struct {
	sandbox.Handle
	speaker         protocol.Speaker
	principal, text string
	reset           bool
	freshGen        uint64

	// warm is the standby this turn bound (nil: the cold path).
	warm *warmTurn

	// research makes this a delegated job's research turn (delegations.go):
	// its own tools, prompt and scratch workspace, no MCP server.
	research *researchTurn
}

func (t *turn) phase(h *Host, name string, since time.Time) { t.Phase(h.life, name, since) }

// policyFor is the turn's broker policy: the identity comes from the admitted
// request only, the credential name from the configured rules.
func (h *Host) policyFor(t *turn, deadline time.Time) *policy.Policy {
	p := h.pol
	p.TurnID = t.ID
	p.Identity = policy.Identity{
		Channel: t.Channel, ChannelTag: ids.ChannelTag(t.Channel),
		SpeakerID: t.speaker.ID, SpeakerName: t.speaker.Name, PrincipalID: t.principal,
	}
	p.DeadlineUnixMs = deadline.UnixMilli()
	p.Model.Credential = h.cfg.SelectCredential(t.Channel, t.principal, t.speaker.ID)
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
		Handle:    sandbox.Handle{ID: h.opts.NewTurnID(), Channel: in.Channel, Tag: ids.ChannelTag(in.Channel), Deadline: start.Add(h.cfg.TurnDeadline())},
		speaker:   protocol.Speaker{ID: in.SpeakerID, Name: in.SpeakerName},
		principal: in.PrincipalID, text: in.Text,
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, t.Deadline, errCauseDeadline)
	defer cancelDeadline()

	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return nil, "", ErrShuttingDown
	}
	if _, busy := h.active[t.Channel]; busy { // the queue makes this impossible
		h.mu.Unlock()
		return nil, "", fmt.Errorf("channel already has a running turn: %w", ErrTurnFailed)
	}
	active := &activeTurn{id: t.ID, channel: t.Channel, deadline: t.Deadline, cancel: cancel}
	h.active[t.Channel] = active
	t.freshGen, t.reset = h.fresh[t.Channel]
	h.turns.Add(1)
	h.mu.Unlock()
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer func() {
		stopWatch()
		h.mu.Lock()
		delete(h.active, t.Channel)
		h.mu.Unlock()
		h.turns.Done()
	}()
	h.takeStandby(ctx, t, active)

	log := h.log.With("turn", t.ID, "channel", t.Tag)
	reply, runErr := h.execute(ctx, t)
	if runErr == nil && in.OnReply != nil {
		// The turn stays listed (its container and units still exist, the
		// reaper must keep them) but is no longer cancellable.
		h.mu.Lock()
		active.replied = true
		h.mu.Unlock()
		in.OnReply(reply, t.ID)
	}
	cleanupErr := h.cleanup(t, log)
	// The channel's next turn should find a standby: prepared now, in the
	// background, after this turn's container is gone.
	h.refillStandby(t.Channel, h.cfg.SelectCredential(t.Channel, t.principal, t.speaker.ID))

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
		if h.fresh[t.Channel] == t.freshGen {
			delete(h.fresh, t.Channel)
		}
		h.mu.Unlock()
	}
	took := time.Since(start)
	h.metrics.turns.WithLabelValues(result).Inc()
	h.metrics.duration.Observe(took.Seconds())
	attrs := append([]slog.Attr{slog.String("result", result), slog.Int64("total_us", took.Microseconds())}, t.Phases()...)
	log.LogAttrs(context.Background(), slog.LevelDebug, "turn phases", attrs...)
	if err != nil {
		return nil, t.ID, err
	}
	log.Info("turn done", "result", result, "duration_ms", took.Milliseconds(), "standby", t.warm != nil)
	return reply, t.ID, nil
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
	pol, err := h.policyFor(t, t.Deadline).Marshal()
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
	spec := h.containerSpec(t, t.Deadline, nil)
	var unitErr error
	unitDone := make(chan struct{})
	t.UnitTried, t.CreateTried = true, true
	go func() {
		defer close(unitDone)
		s := time.Now()
		unitErr = h.opts.Units.StartBroker(ctx, t.ID)
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
	t.ContainerID, createErr = h.opts.Containers.Create(ctx, spec)
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
	sink := h.opts.WorkerLogs.Turn(t.Tag, t.ID, t.Container)
	res, err := h.opts.Containers.Run(ctx, t.ContainerID, stdin, protocol.MaxReplyBytes, ready, sink)
	t.phase(h, PhaseRun, since)
	h.life.CloseSink(&t.Handle, sink)
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
	if t.Container, err = ids.ContainerName(t.Channel, t.ID); err != nil {
		return err
	}
	if t.Workspace, err = layout.WorkspaceDir(c.WorkspaceRoot, t.Channel); err != nil {
		return err
	}
	if t.Dir, err = layout.TurnDir(c.RunRoot, t.ID); err != nil {
		return err
	}
	if t.Policy, err = layout.PolicyFile(c.PolicyDir, t.ID); err != nil {
		return err
	}
	sock, _ := layout.BrokerSocket(c.RunRoot, t.ID)
	if len(sock) > layout.MaxSocketPath {
		return fmt.Errorf("broker socket path is %d characters, over %d", len(sock), layout.MaxSocketPath)
	}
	if t.Guest, err = h.guestFor(t.Channel, t.Workspace); err != nil {
		return fmt.Errorf("guest uid: %w", err)
	}
	if t.research != nil {
		// The channel's guest uid, a scratch workspace of its own.
		t.Workspace = t.research.scratch
	}
	if err := h.ensureWorkspace(t.Workspace, t.Guest, t.Tag); err != nil {
		return fmt.Errorf("workspace: %w", err)
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
		layout.LabelTurn:         t.ID,
		layout.LabelChannel:      t.Tag,
		layout.LabelDeadline:     strconv.FormatInt(deadline.Unix(), 10),
	}
	for k, v := range extra {
		labels[k] = v
	}
	return ContainerSpec{
		Name: t.Container, Image: c.Image, UID: t.Guest, GID: t.Guest,
		WorkspaceDir: t.Workspace, TurnDir: t.Dir,
		MemoryMB: c.Limits.MemoryMB, CPUs: c.Limits.CPUs, Pids: c.Limits.Pids, TmpfsMB: c.Limits.TmpfsMB,
		Runtime: c.Runtime, LogTag: ids.LogTag(t.Channel),
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
	return fmt.Sprintf("worker exited with status %d (%s); %s", e.status, sandbox.ExitMeaning(e.status), cause)
}

// TurnDirMode is sandbox.TurnDirMode.
const TurnDirMode = sandbox.TurnDirMode

// guestFor is the channel's guest uid from the state file. The owner of an
// existing workspace is offered for adoption, so a lost state file does not
// hand a channel's files to a new uid.
func (h *Host) guestFor(channel, workspace string) (int, error) {
	owner := -1
	if st, err := os.Lstat(workspace); err == nil && st.IsDir() {
		if o, ok := sandbox.FileOwner(st); ok {
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

// RemoveAttempts is sandbox.RemoveAttempts.
const RemoveAttempts = sandbox.RemoveAttempts

func (h *Host) makeTurnDir(t *turn) error               { return h.life.MakeTurnDir(&t.Handle) }
func (h *Host) writePolicyFile(t *turn, d []byte) error { return h.life.WritePolicyFile(&t.Handle, d) }
func (h *Host) cleanup(t *turn, log *slog.Logger) error { return h.life.Cleanup(&t.Handle, log) }
func (h *Host) ensureWorkspace(dir string, guest int, tag string) error {
	return h.life.EnsureWorkspace(dir, guest, tag)
}
