// Package sealedturn is the sealed-turn kind (DESIGN.md sections 3 and 10):
// one turn of a channel in sandbox mode in a container of its own, its
// worker's stdin (the public tool specs, the message, the speaker), its
// broker policy (identity from the admitted request only, the credential
// from the configured rules), the cold path (directory, policy, broker
// units started while the container is created, stdin only after the unit
// job) and the warm path: per channel at most one standby prepared ahead of
// its turn (pkg/standby), bound by writing the turn's policy in place, the
// next one prepared as soon as a turn runs (so a conversation stays warm). A
// delegated job's research turn is a sealed turn with a Research of its
// own. It drives the lifecycle, reaches the host only through its narrow
// Host interface and imports no other kind.
// Guarantee: a worker's stdin never holds the principal, a URL or a
// credential name; a policy's identity is the admitted request's; a reply
// counts only when it is exactly one valid reply object from a worker that
// exited 0 within the deadline, or the worker's final frame holding such a
// reply (protocol.DecodeReplyFrame), taken before that exit; a reply is
// answered before the cleanup, and the cleanup ends before the channel's
// next turn starts; a standby serves only a turn of its own channel whose
// key (shape, guest uid, credential) it was made for.
package sealedturn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// Host is what a sealed turn needs of the host that made the kind.
type Host interface {
	// GuestFor is the channel's guest uid (the owner of an existing
	// workspace offered for adoption).
	GuestFor(channel, workspace string) (int, error)
	// Accepting is false once the host stops.
	Accepting() bool
	// ChannelOn is nil when channel is in sandbox mode.
	ChannelOn(channel string) error
	// Waiting counts the channel's turns waiting in its queue.
	Waiting(channel string) int
	// Queued counts the turns (and runs, prechecks, jobs) waiting for a
	// slot in every channel.
	Queued() int
	// SpareSlot waits for a slot of the global concurrency, granted only
	// when one is free and no turn waits for it, and then for a start
	// slot granted only when no turn's start waits: a standby's
	// preparation never takes the slot a waiting turn needs.
	SpareSlot(ctx context.Context) (release func(), err error)
	// StartSlot waits for a start slot (queue.startConcurrency): a cold
	// turn holds one from its broker units' and container's start until
	// its worker may have its stdin.
	StartSlot(ctx context.Context) (release func(), err error)
}

// Options make a Kind.
type Options struct {
	Config    *config.Config
	Lifecycle *sandbox.Lifecycle
	Host      Host
	Logger    *slog.Logger
	Now       func() time.Time
	NewID     func() string
	// Tools and MCP are the public tool specs; Policy the host's policy
	// template.
	Tools  []protocol.ToolSpec
	MCP    []protocol.MCPServerSpec
	Policy policy.Policy
	// StandbyEvent counts what the standby pool reports; Observe records a
	// standby's preparation time (metrics only).
	StandbyEvent func(event, reason string)
	Observe      func(phase string, took time.Duration)
}

// Kind is the host's sealed turns and their standbys.
type Kind struct {
	cfg      *config.Config
	life     *sandbox.Lifecycle
	host     Host
	log      *slog.Logger
	now      func() time.Time
	newID    func() string
	tools    []protocol.ToolSpec
	mcpSpecs []protocol.MCPServerSpec
	pol      policy.Policy
	event    func(event, reason string)
	observe  func(phase string, took time.Duration)

	// The warm path (nil standbys: every turn takes the cold path).
	standbys *standby.Pool
	warm     sandbox.WarmContainers
	shape    string // fingerprint of what shapes a standby

	// research: the tools and prompt of every research turn (register.go).
	research Research

	// held are the channels whose last turn's cleanup failed, with that
	// turn: the channel's next turn retries its cleanup first and is
	// refused while it fails (hold.go).
	heldMu sync.Mutex
	held   map[string]*Turn
}

// New makes the kind and, when standbys are enabled and the driver can
// start a container apart from running it, its standby pool.
func New(o Options) (*Kind, error) {
	k := &Kind{cfg: o.Config, life: o.Lifecycle, host: o.Host, log: o.Logger, now: o.Now, newID: o.NewID,
		tools: o.Tools, mcpSpecs: o.MCP, pol: o.Policy, event: o.StandbyEvent, observe: o.Observe,
		held: map[string]*Turn{}}
	if err := k.newStandbys(); err != nil {
		return nil, err
	}
	return k, nil
}

// Pool is the standby pool (nil when standbys are off).
func (k *Kind) Pool() *standby.Pool { return k.standbys }

// Research is what makes a turn a delegated job's research turn: its own
// tools (in the worker's turn and in the broker's policy), prompt and
// scratch workspace, no MCP server.
type Research struct {
	Tools   []protocol.ToolSpec
	Policy  []policy.Tool
	Prompt  string
	Scratch string
}

// Turn is a sealed turn: its sandbox's objects (the lifecycle's Handle)
// and what only a turn has.
type Turn struct {
	sandbox.Handle
	Speaker         protocol.Speaker
	Principal, Text string
	Reset           bool
	// Research makes this a research turn (nil: the channel's own).
	Research *Research

	// warm is the standby this turn bound (nil: the cold path).
	warm *warmTurn
	// next is the key the channel's next standby is prepared under once
	// this turn runs (set by TakeStandby; "" for research turns and when
	// standbys are off); asked: prepareNext asked the pool for it.
	next  string
	asked bool
	// prepareOnce runs prepareNext once: PrepareAfter past the worker's
	// stdin (prepareTimer) or at the turn's answer, whichever first.
	prepareOnce  sync.Once
	prepareTimer *time.Timer
	// tail finishes a framed run after its reply left: it waits for the
	// worker's streams' end (their last log lines) and closes the log
	// sink. Cleanup runs it first, before the container's kill.
	tail func(log *slog.Logger)
}

// Warm reports whether the turn bound a standby.
func (t *Turn) Warm() bool { return t.warm != nil }

// Cleanup removes whatever the turn made (sandbox.Lifecycle.Cleanup),
// after the tail of a run that returned at its final frame: the worker's
// last log lines are read and its sink closed before its container is
// killed, so answering at the frame loses none of them.
func (k *Kind) Cleanup(t *Turn, log *slog.Logger) error {
	if tail := t.tail; tail != nil {
		t.tail = nil
		tail(log)
	}
	return k.life.Cleanup(&t.Handle, log)
}

// finishRun closes the run's log sink now, or, when the run returned at
// its final frame with streams still being read, leaves that and the sink
// to the cleanup (Cleanup): the reply does not wait for them.
func (k *Kind) finishRun(t *Turn, sink *workerlog.Sink, res sandbox.RunResult) {
	if res.Tail == nil {
		k.life.CloseSink(&t.Handle, sink)
		return
	}
	t.tail = func(log *slog.Logger) {
		if err := res.Tail(); err != nil {
			// The reply already left; what came after it is the worker's
			// misbehaviour, the container is killed next.
			log.Warn("worker streams after its reply frame", "err", err)
		}
		k.life.CloseSink(&t.Handle, sink)
	}
}

// PolicyFor is the turn's broker policy: the identity comes from the admitted
// request only, the credential name from the configured rules.
func (k *Kind) PolicyFor(t *Turn, deadline time.Time) *policy.Policy {
	p := k.pol
	p.TurnID = t.ID
	p.Identity = policy.Identity{
		Channel: t.Channel, ChannelTag: ids.ChannelTag(t.Channel),
		SpeakerID: t.Speaker.ID, SpeakerName: t.Speaker.Name, PrincipalID: t.Principal,
	}
	p.DeadlineUnixMs = deadline.UnixMilli()
	p.Model.Credential = k.cfg.SelectCredential(t.Channel, t.Principal, t.Speaker.ID)
	if t.Research != nil {
		p.Tools, p.MCP = t.Research.Policy, nil
	}
	return &p
}

// TurnJSON is the worker's stdin: public specs, message, speaker id/name.
// Never the principal, a URL or a credential name.
func (k *Kind) TurnJSON(t *Turn, reset bool) ([]byte, error) {
	tt := protocol.Turn{
		Text:     t.Text,
		Speaker:  protocol.Speaker{ID: t.Speaker.ID, Name: t.Speaker.Name},
		Model:    k.cfg.Model.Name,
		Prompt:   k.cfg.Prompt,
		TimeZone: k.cfg.TimeZone,
		Reset:    reset,
		Tools:    append([]protocol.ToolSpec{}, k.tools...),
		MCP:      append([]protocol.MCPServerSpec{}, k.mcpSpecs...),
	}
	if r := t.Research; r != nil {
		tt.Prompt, tt.Tools, tt.MCP, tt.NoMemory = r.Prompt, append([]protocol.ToolSpec{}, r.Tools...), []protocol.MCPServerSpec{}, true
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

// Execute prepares and runs the turn; cleanup is the caller's, always.
func (k *Kind) Execute(ctx context.Context, t *Turn) (*protocol.Reply, error) {
	if t.warm != nil {
		return k.bindStandby(ctx, t)
	}
	// Starts are CPU-bound and thrash when many run at once: the turn
	// waits for a start slot, held until its worker may have its stdin
	// (the ready gate below) or until Execute fails before that.
	since := time.Now()
	releaseStart, err := k.host.StartSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer releaseStart() // idempotent; the gate releases it first
	t.Phase(k.life, PhaseStartWait, since)
	since = time.Now()
	if err := k.turnPaths(t); err != nil {
		return nil, err
	}
	stdin, err := k.TurnJSON(t, t.Reset)
	if err != nil {
		return nil, fmt.Errorf("turn JSON: %w", err)
	}
	pol, err := k.PolicyFor(t, t.Deadline).Marshal()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if err := k.life.MakeTurnDir(&t.Handle); err != nil {
		return nil, err
	}
	if err := k.life.WritePolicyFile(&t.Handle, pol); err != nil {
		return nil, err
	}
	t.Phase(k.life, sandbox.PhasePrepare, since)

	// The broker units start while the container is created, attached and
	// started; the worker's stdin (its turn, and so its first broker call)
	// is written only once the unit job succeeded. A failed unit job kills
	// the started container and fails the turn; cleanup is unchanged.
	spec := k.containerSpec(t, t.Deadline, nil)
	var unitErr error
	unitDone := make(chan struct{})
	t.UnitTried, t.CreateTried = true, true
	go func() {
		defer close(unitDone)
		s := time.Now()
		unitErr = k.life.Units().StartBroker(ctx, t.ID)
		t.Phase(k.life, sandbox.PhaseUnitStart, s)
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
	t.ContainerID, createErr = k.life.Containers().Create(ctx, spec)
	t.Phase(k.life, sandbox.PhaseCreate, since)
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
		t.Phase(k.life, sandbox.PhaseStdinGate, s)
		if err := unitResult(); err != nil {
			return err
		}
		releaseStart() // started: the next turn's start may begin
		// The turn's own Docker and systemd work is done: the next
		// standby is prepared while the model answers (armPrepare).
		k.armPrepare(t)
		return nil
	}
	since = time.Now()
	sink := k.life.WorkerLogs().Turn(t.Tag, t.ID, t.Container)
	var res sandbox.RunResult
	if fc, ok := k.life.Containers().(sandbox.FramedContainers); ok {
		res, err = fc.RunFramed(ctx, t.ContainerID, stdin, protocol.MaxReplyBytes, ready, sink, acceptFrame)
	} else {
		res, err = k.life.Containers().Run(ctx, t.ContainerID, stdin, protocol.MaxReplyBytes, ready, sink)
	}
	t.Phase(k.life, sandbox.PhaseRun, since)
	k.finishRun(t, sink, res)
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

// acceptFrame takes a worker's final frame that is a whole reply it exits 0
// with (protocol.DecodeReplyFrame): the run returns there and the reply
// leaves before the worker's exit, Docker's wait and the cleanup
// (docs/sealed-turns.md, "The reply leaves before the cleanup"). A failed
// worker's frame is refused, so its exit status is read as before.
func acceptFrame(frame []byte) bool {
	_, err := protocol.DecodeReplyFrame(frame)
	return err == nil
}

// readReply judges a finished run: exactly one valid reply object from a
// worker that exited 0, or its accepted final frame (Framed: the same
// reply, taken before the exit), within the deadline.
func readReply(ctx context.Context, res sandbox.RunResult) (*protocol.Reply, error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if res.Framed {
		reply, err := protocol.DecodeReplyFrame(res.Stdout)
		if err != nil { // the driver took only a frame acceptFrame took
			return nil, fmt.Errorf("worker reply frame (%d bytes) is not a whole reply", len(res.Stdout))
		}
		return reply, nil
	}
	if res.Truncated {
		return nil, errors.New("worker stdout over its bound")
	}
	if res.StderrRefused {
		return nil, errors.New("worker stderr over its bound")
	}
	if res.ExitCode != 0 {
		exit := &ExitError{Status: res.ExitCode}
		// A failed worker still prints its reply; DecodeReply admits only a
		// cause from protocol's fixed list, so nothing else reaches the log.
		if r, err := protocol.DecodeReply(res.Stdout); err == nil && !r.OK {
			exit.Cause = r.Cause
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
func (k *Kind) turnPaths(t *Turn) error {
	c := k.cfg
	var err error
	if _, err = t.NameChannel(c.RunRoot, c.WorkspaceRoot, c.PolicyDir); err != nil {
		return err
	}
	if t.Guest, err = k.host.GuestFor(t.Channel, t.Workspace); err != nil {
		return fmt.Errorf("guest uid: %w", err)
	}
	if t.Research != nil {
		// The channel's guest uid, a scratch workspace of its own.
		t.Workspace = t.Research.Scratch
	}
	if err := k.life.EnsureWorkspace(t.Workspace, t.Guest, t.Tag); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// containerSpec is the turn's container; deadline is its deadline label
// (a standby's expiry: labels cannot change once it binds), extra adds
// labels.
func (k *Kind) containerSpec(t *Turn, deadline time.Time, extra map[string]string) sandbox.ContainerSpec {
	c := k.cfg
	labels := map[string]string{
		layout.LabelInstallation: c.Installation,
		layout.LabelTurn:         t.ID,
		layout.LabelChannel:      t.Tag,
		layout.LabelDeadline:     strconv.FormatInt(deadline.Unix(), 10),
	}
	for k, v := range extra {
		labels[k] = v
	}
	return sandbox.ContainerSpec{
		Name: t.Container, Image: c.Image, UID: t.Guest, GID: t.Guest,
		WorkspaceDir: t.Workspace, TurnDir: t.Dir,
		MemoryMB: c.Limits.MemoryMB, CPUs: c.Limits.CPUs, Pids: c.Limits.Pids, TmpfsMB: c.Limits.TmpfsMB,
		Runtime: c.Runtime, LogTag: ids.LogTag(t.Channel),
		Labels: labels,
	}
}

// ExitError is a worker that exited non-zero: its status and the
// failure cause its reply named (a protocol Cause constant), if any.
type ExitError struct {
	Status int64
	Cause  string
}

func (e *ExitError) Error() string {
	cause := "the worker reported no cause"
	if e.Cause != "" {
		cause = "the worker reports: " + e.Cause
	}
	return fmt.Sprintf("worker exited with status %d (%s); %s", e.Status, sandbox.ExitMeaning(e.Status), cause)
}

// Phases of the warm path (label "phase" of sandbox_turn_phase_seconds).
const (
	PhaseStandbyPrepare = "standby_prepare" // a standby made ready, in the background
	PhaseStandbyBind    = "standby_bind"    // the turn's policy and stdin prepared for a standby
	PhaseStandbyTake    = "standby_take"    // the ready standby taken from the pool (its liveness check included)
	PhaseStartWait      = "start_wait"      // a cold turn waited for a start slot (queue.startConcurrency)
	PhaseAnswer         = "answer"          // the reply written to its client (before the cleanup)
)

// standbyBrokerSlack is how long a standby's broker waits for its policy
// past the standby's expiry: the host discards the standby at its expiry,
// so the broker's own exit never races a binding turn.
const standbyBrokerSlack = 30 * time.Second

// warmTurn is one ready standby: a turn's objects (directory, placeholder
// policy, broker units, started container) without a turn yet.
type warmTurn struct {
	sandbox.Standby // Alive, Discard
	k               *Kind
	t               *Turn
	key             string
}

// overwriteFile replaces path's content in place (same inode, never
// following a symlink) and syncs it.
func overwriteFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newStandbys makes the pool when standbys are enabled and the driver can
// start a container apart from running it.
func (k *Kind) newStandbys() error {
	c := k.cfg
	w, ok := k.life.Containers().(sandbox.WarmContainers)
	if !ok || !c.Standby.Enabled || c.Standby.Max <= 0 {
		return nil
	}
	key, err := k.shapeKey()
	if err != nil {
		return fmt.Errorf("host: standby key: %w", err)
	}
	k.warm, k.shape = w, key
	k.standbys = standby.New(standby.Options{
		Max: c.Standby.Max, MaxAge: c.StandbyMaxAge(),
		Prepare: k.prepareStandby, NewTurnID: k.newID, Now: k.now,
		Event: k.event, Log: k.log,
	})
	return nil
}

// shapeKey fingerprints everything of this process that shapes a standby
// (the whole configuration: image, limits, runtime, prompt, tools, MCP
// servers, and the specs and policy template derived from them). The host
// reads its configuration once, so a change means a restart, which discards
// every standby anyway; the key makes a standby's fit a checked fact
// rather than an assumption.
func (k *Kind) shapeKey() (string, error) {
	data, err := json.Marshal(struct {
		Config any
		Tools  []protocol.ToolSpec
		MCP    []protocol.MCPServerSpec
		Policy policy.Policy
	}{k.cfg, k.tools, k.mcpSpecs, k.pol})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// standbyKey is a standby's key: the process's shape, the channel's guest
// uid and the model credential its turn uses (the standby's broker holds
// only the credentials of its turn's policy, so a turn that selects another
// cannot use it). The credential name comes last: credential names hold
// no ":".
func (k *Kind) standbyKey(channel, credential string) (string, error) {
	ws, err := layout.WorkspaceDir(k.cfg.WorkspaceRoot, channel)
	if err != nil {
		return "", err
	}
	uid, err := k.host.GuestFor(channel, ws)
	if err != nil {
		return "", err
	}
	return k.shape + ":" + strconv.Itoa(uid) + ":" + credential, nil
}

// keyCredential is the model credential a key was made for.
func keyCredential(key string) string { return key[strings.LastIndexByte(key, ':')+1:] }

// TakeStandby binds t to channel's ready standby, when there is one: t
// takes the standby's turn id (through rebind, which the host runs under its lock, so its
// active entry changes too, before the pool stops listing it). Otherwise t stays on the cold path.
func (k *Kind) TakeStandby(ctx context.Context, t *Turn, rebind func(id string)) {
	if k.standbys == nil {
		return
	}
	key, err := k.standbyKey(t.Channel, k.cfg.SelectCredential(t.Channel, t.Principal, t.Speaker.ID))
	if err != nil {
		return // the cold path reports it
	}
	t.next = key
	since := time.Now()
	lease, _ := k.standbys.Take(ctx, t.Channel, key)
	if lease == nil {
		return
	}
	t.Phase(k.life, PhaseStandbyTake, since)
	rebind(lease.TurnID)
	lease.Release()
	t.warm = lease.Warm.(*warmTurn)
}

// PrepareAfter is how long after a running turn's stdin its channel's next
// standby's preparation starts, unless the turn's answer comes first (then
// it starts at the answer). The preparation (broker units through systemd,
// a container's create and start through Docker) takes the CPUs for
// hundreds of milliseconds: started with the worker's stdin it slowed a
// fast turn's own reply (docs/sealed-turns.md, "The warm path"). A turn
// that answers within PrepareAfter (a fake model's, median 20 ms) pays
// none of it; a model that thinks longer (a conversation's, seconds) still
// has its next standby made while it thinks, PrepareAfter later.
var PrepareAfter = 50 * time.Millisecond

// armPrepare starts t's next standby's preparation PrepareAfter from now
// or at prepareNow, whichever comes first (once).
func (k *Kind) armPrepare(t *Turn) {
	if t.next == "" {
		return
	}
	t.prepareTimer = time.AfterFunc(PrepareAfter, func() { t.prepareOnce.Do(func() { k.prepareNext(t) }) })
}

// prepareNow runs t's prepareNext now unless it ran (once per turn; its
// effects on t are visible once prepareNow returns).
func (k *Kind) prepareNow(t *Turn) {
	if t.prepareTimer != nil {
		t.prepareTimer.Stop()
	}
	t.prepareOnce.Do(func() { k.prepareNext(t) })
}

// prepareNext starts preparing the channel's next standby once t runs (a
// standby bound, or the cold path's container started and its broker up):
// a conversation sends its next message as soon as this reply comes back,
// before a standby prepared after cleanup could be ready. For a moment the
// channel has two containers; the pool's cap (standby.max) counts every
// standby, preparing ones included, and a standby is still single-use and
// its channel's only. Unlike Refill it ignores turns waiting in the channel:
// the next of them starts only after this turn ends, and the model's answer
// is time enough to prepare. Once per turn.
func (k *Kind) prepareNext(t *Turn) {
	key := t.next
	t.next = ""
	if key == "" || k.standbys == nil || !k.host.Accepting() || k.host.ChannelOn(t.Channel) != nil {
		return
	}
	t.asked = true
	k.standbys.Refill(t.Channel, key)
}

// Refill prepares, after t's cleanup, its channel's next standby in the
// background, for a turn that selects the credential t did (the same
// speaker, most often), unless t already asked for one while it ran
// (prepareNext: whatever came of it, a preparation that failed under load
// is not retried at once). So it covers a turn that never ran (its
// container or broker failed to start). Not while the channel has turns
// waiting: the next one starts now, before a standby could be ready, and
// would only share Docker with its preparation (it prepares one itself
// once it runs).
func (k *Kind) Refill(t *Turn) {
	channel := t.Channel
	credential := k.cfg.SelectCredential(t.Channel, t.Principal, t.Speaker.ID)
	if t.asked || k.Held(channel) || k.standbys == nil || !k.host.Accepting() || k.host.ChannelOn(channel) != nil || k.host.Waiting(channel) > 0 {
		return
	}
	if k.host.Queued() > 0 { // a burst: the slots go to the waiting turns
		return
	}
	key, err := k.standbyKey(channel, credential)
	if err != nil {
		return
	}
	k.standbys.Refill(channel, key)
}

// Drop discards channel's standby (the channel left sandbox mode).
func (k *Kind) Drop(channel, reason string) {
	if k.standbys != nil {
		k.standbys.Drop(channel, reason)
	}
}

// prepareStandby is standby.PrepareFunc: the cold path's preparation up to
// a started container, with a placeholder policy (policy.Pending) in place
// of the turn's. Whatever fails is removed as a turn's cleanup removes it.
func (k *Kind) prepareStandby(ctx context.Context, channel, key, turnID string, expiry time.Time) (standby.Warm, error) {
	// A global slot for the preparation's work (units, Docker), granted
	// only when no turn waits for one; the ready standby holds none.
	release, err := k.host.SpareSlot(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for a spare slot: %w", err)
	}
	defer release()
	start := time.Now()
	t := &Turn{Handle: sandbox.Handle{ID: turnID, Channel: channel, Tag: ids.ChannelTag(channel), Deadline: expiry, Quiet: true}}
	log := k.log.With("turn", turnID, "channel", t.Tag, "standby", true)
	started, err := k.startStandby(ctx, t, keyCredential(key))
	if err != nil {
		if cerr := k.life.Cleanup(&t.Handle, log); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	k.observe(PhaseStandbyPrepare, time.Since(start))
	log.Debug("standby ready", "prepare_ms", time.Since(start).Milliseconds(), "expires", expiry.UTC().Format(time.RFC3339))
	return &warmTurn{k: k, t: t, key: key, Standby: sandbox.Standby{
		Life: k.life, Warm: k.warm, Handle: &t.Handle, Started: started, Log: log, Name: "standby",
	}}, nil
}

func (k *Kind) startStandby(ctx context.Context, t *Turn, credential string) (sandbox.StartedContainer, error) {
	if err := k.turnPaths(t); err != nil {
		return nil, err
	}
	// The names the turn's policy will hold: sandbox-credset gives the
	// standby's broker exactly these.
	shape := k.pol
	shape.Model.Credential = credential
	pending, err := (&policy.Pending{Version: policy.Version, TurnID: t.ID, Pending: true,
		DeadlineUnixMs: t.Deadline.Add(standbyBrokerSlack).UnixMilli(), Credentials: shape.CredentialNames()}).Marshal()
	if err != nil {
		return nil, fmt.Errorf("pending policy: %w", err)
	}
	if err := k.life.MakeTurnDir(&t.Handle); err != nil {
		return nil, err
	}
	if err := k.life.WritePolicyFile(&t.Handle, pending); err != nil {
		return nil, err
	}
	t.UnitTried = true
	if err := k.life.Units().StartBroker(ctx, t.ID); err != nil {
		return nil, fmt.Errorf("broker units: %w", err)
	}
	// Off the reply path, so wait for the broker itself: one that failed to
	// start (a credential set that timed out under load, say) would fail the
	// turn that binds this standby; failing here leaves that turn the cold path.
	if err := k.life.Units().StartBrokerService(ctx, t.ID); err != nil {
		return nil, fmt.Errorf("broker service: %w", err)
	}
	expiry := strconv.FormatInt(t.Deadline.Unix(), 10)
	spec := k.containerSpec(t, t.Deadline, map[string]string{layout.LabelStandby: expiry})
	t.CreateTried = true
	if t.ContainerID, err = k.life.Containers().Create(ctx, spec); err != nil {
		return nil, err
	}
	started, err := k.warm.Start(ctx, t.ContainerID)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return started, nil
}

// bindStandby runs t on its standby: the turn's policy replaces the
// placeholder, then the worker gets its stdin. From there it is the
// ordinary turn, cleanup included: t owns the standby's objects. The policy
// is written in place, not by rename: the broker unit binds the file as it
// was when the broker started (it sees only its own policy), and the
// broker reads it at its first connection, which comes only after stdin.
func (k *Kind) bindStandby(ctx context.Context, t *Turn) (*protocol.Reply, error) {
	w := t.warm
	s := w.t
	t.Container, t.ContainerID, t.Workspace, t.Dir, t.Policy, t.Guest = s.Container, s.ContainerID, s.Workspace, s.Dir, s.Policy, s.Guest
	t.MadeDir, t.MadePolicy, t.UnitTried, t.CreateTried = true, true, true, true
	defer w.Started.Close()
	since := time.Now()
	stdin, err := k.TurnJSON(t, t.Reset)
	if err != nil {
		return nil, fmt.Errorf("turn JSON: %w", err)
	}
	pol, err := k.PolicyFor(t, t.Deadline).Marshal()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if p := k.PolicyFor(t, t.Deadline); p.Model.Credential != keyCredential(w.key) {
		// takeStandby's key makes this unreachable; never serve a turn a
		// broker without its credential.
		return nil, fmt.Errorf("standby made for credential %q, turn needs %q", keyCredential(w.key), p.Model.Credential)
	}
	if err := overwriteFile(t.Policy, pol); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	t.Phase(k.life, PhaseStandbyBind, since)
	k.armPrepare(t)
	since = time.Now()
	sink := k.life.WorkerLogs().Turn(t.Tag, t.ID, t.Container)
	var res sandbox.RunResult
	if fs, ok := w.Started.(sandbox.FramedStarted); ok {
		res, err = fs.FinishFramed(ctx, stdin, protocol.MaxReplyBytes, sink, acceptFrame)
	} else {
		res, err = w.Started.Finish(ctx, stdin, protocol.MaxReplyBytes, sink)
	}
	t.Phase(k.life, sandbox.PhaseRun, since)
	k.finishRun(t, sink, res)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	return readReply(ctx, res)
}
