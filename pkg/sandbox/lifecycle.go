package sandbox

import (
	"context"
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

// TurnDirMode lets the guest uid traverse its turn directory to the broker
// socket (SocketMode=0666 in sandbox-broker@.socket), nothing more.
const TurnDirMode = 0o711

// RemoveAttempts bounds the removals of one container, the first included:
// a daemon that is restarting (Docker down for seconds) must not leave a
// Dead container behind until the next reaper pass.
const RemoveAttempts = 6

const maxRemoveRetryDelay = 2 * time.Second

// Options configure a Lifecycle; the durations have defaults (New).
type Options struct {
	Containers Containers
	Units      Units
	Logger     *slog.Logger
	// WorkerLogs receives each container's stderr (bounded, to journald).
	WorkerLogs *workerlog.Forwarder
	// ChownTree hands a workspace to its guest (ChownTree by default).
	ChownTree func(dir string, uid, gid int) error
	// BrokerGID is the group of policy files (_sandbox-broker); 0 = as is.
	BrokerGID        int
	RemoveTimeout    time.Duration // bound of each removal and unit stop, 5 s
	SecondRemoval    time.Duration // bound of each retried removal, 2 s
	RemoveRetryDelay time.Duration // first pause between removals (doubling to 2 s), 100 ms
	RemoveRetryTotal time.Duration // bound of a container's removal retries, 15 s
	// UnitStopTimeout bounds each attempt to stop a turn's broker units,
	// 20 s: above the broker service's TimeoutStopSec=10s, which systemd
	// may spend, plus the job's wait in a busy systemd's queue.
	UnitStopTimeout time.Duration
	// ObservePhase records a phase's duration (metrics); nil = none.
	ObservePhase func(phase string, took time.Duration)
	// CleanupFailed counts one failed cleanup step (stage: container,
	// units, turn_dir, policy) of a sandbox of kind (the name For gave the
	// lifecycle; "" for the host's own); nil = none.
	CleanupFailed func(kind, stage string)
}

// Lifecycle makes, runs and cleans up sandboxes of any kind.
type Lifecycle struct {
	o Options
	// kind names whose sandboxes these are, in CleanupFailed (For).
	kind string
	// cleanupCtx ends container removal retries when a shutdown runs out
	// of time (Abandon); cleanup otherwise never gives up early.
	cleanupCtx context.Context
	abandon    context.CancelCauseFunc
}

// New fills the defaults of o.
func New(o Options) *Lifecycle {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.WorkerLogs == nil {
		o.WorkerLogs = workerlog.New(workerlog.DefaultLimits(), nil, nil)
	}
	if o.ChownTree == nil {
		o.ChownTree = ChownTree
	}
	if o.RemoveTimeout == 0 {
		o.RemoveTimeout = 5 * time.Second
	}
	if o.SecondRemoval == 0 {
		o.SecondRemoval = 2 * time.Second
	}
	if o.RemoveRetryDelay == 0 {
		o.RemoveRetryDelay = 100 * time.Millisecond
	}
	if o.RemoveRetryTotal == 0 {
		o.RemoveRetryTotal = 15 * time.Second
	}
	if o.UnitStopTimeout == 0 {
		o.UnitStopTimeout = DefaultUnitStopTimeout
	}
	l := &Lifecycle{o: o}
	l.cleanupCtx, l.abandon = context.WithCancelCause(context.Background())
	return l
}

// Containers is the driver the lifecycle was given.
func (l *Lifecycle) Containers() Containers { return l.o.Containers }

// Units is the systemd side the lifecycle was given.
func (l *Lifecycle) Units() Units { return l.o.Units }

// WorkerLogs is the forwarder of containers' stderr.
func (l *Lifecycle) WorkerLogs() *workerlog.Forwarder { return l.o.WorkerLogs }

// RemoveTimeout bounds one removal or unit stop.
func (l *Lifecycle) RemoveTimeout() time.Duration { return l.o.RemoveTimeout }

// Abandon stops container removal retries from now on (a shutdown out of
// time): each cleanup then ends within one bounded operation, leaving what
// it could not remove to sandbox-reaper.
func (l *Lifecycle) Abandon(cause error) { l.abandon(cause) }

// Handle is one sandbox's objects: what a kind named and what it tried to
// make, so Cleanup undoes exactly that.
type Handle struct {
	ID, Channel, Tag string
	Deadline         time.Time

	Container, ContainerID string
	Workspace, Dir, Policy string
	Guest                  int // the guest uid and gid

	MadeDir, MadePolicy, UnitTried, CreateTried bool

	// Quiet keeps this sandbox's phases out of the turn phase metrics (a
	// standby's own preparation, a run, a precheck).
	Quiet bool

	mu     sync.Mutex
	phases []slog.Attr
}

// Phase records how long phase name took since since.
func (b *Handle) Phase(l *Lifecycle, name string, since time.Time) {
	took := time.Since(since)
	b.mu.Lock()
	b.phases = append(b.phases, slog.Int64(name+"_us", took.Microseconds()))
	b.mu.Unlock()
	if b.Quiet || l.o.ObservePhase == nil {
		return
	}
	l.o.ObservePhase(name, took)
}

// Phases are the recorded phase durations, as log attributes.
func (b *Handle) Phases() []slog.Attr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]slog.Attr(nil), b.phases...)
}

// NameChannel names a channel's sandbox from its ID and Channel: its
// container, the channel's workspace, its turn directory and policy file
// (under the configured runRoot, workspaceRoot and policyDir). It returns
// the broker socket's path, refused when it would not fit a Unix socket
// address.
func (b *Handle) NameChannel(runRoot, workspaceRoot, policyDir string) (socket string, err error) {
	if b.Container, err = ids.ContainerName(b.Channel, b.ID); err != nil {
		return "", err
	}
	if b.Workspace, err = layout.WorkspaceDir(workspaceRoot, b.Channel); err != nil {
		return "", err
	}
	if b.Dir, err = layout.TurnDir(runRoot, b.ID); err != nil {
		return "", err
	}
	if b.Policy, err = layout.PolicyFile(policyDir, b.ID); err != nil {
		return "", err
	}
	if socket, err = layout.BrokerSocket(runRoot, b.ID); err != nil {
		return "", err
	}
	if len(socket) > layout.MaxSocketPath {
		return "", fmt.Errorf("broker socket path is %d characters, over %d", len(socket), layout.MaxSocketPath)
	}
	return socket, nil
}

// Labels are the labels the reaper reads on a container: its installation,
// turn, channel tag and deadline (unix seconds).
func Labels(installation, id, tag string, deadline time.Time) map[string]string {
	return map[string]string{
		layout.LabelInstallation: installation,
		layout.LabelTurn:         id,
		layout.LabelChannel:      tag,
		layout.LabelDeadline:     strconv.FormatInt(deadline.Unix(), 10),
	}
}

// MakeTurnDir makes the handle's turn directory. It exists before the
// socket unit starts, so systemd never makes a root-owned parent for the
// socket. It stays the host's (the reaper removes it) and is 0711 so the
// guest uid can reach the 0666 socket in it; runRoot (0700) keeps every
// other host user out, and a container sees only its own turn directory.
func (l *Lifecycle) MakeTurnDir(b *Handle) error {
	if err := os.Mkdir(b.Dir, TurnDirMode); err != nil {
		return fmt.Errorf("turn directory: %w", err)
	}
	b.MadeDir = true
	if err := os.Chmod(b.Dir, TurnDirMode); err != nil { // the unit's UMask=0077
		return fmt.Errorf("turn directory: %w", err)
	}
	return nil
}

// WritePolicyFile writes (binding a standby: replaces) the handle's policy
// file atomically, in the broker's group.
func (l *Lifecycle) WritePolicyFile(b *Handle, data []byte) error {
	b.MadePolicy = true // a failed write may leave nothing; removal tolerates that
	if err := atomicfile.WriteFile(b.Policy, data, 0o640); err != nil {
		return fmt.Errorf("policy file: %w", err)
	}
	if gid := l.o.BrokerGID; gid > 0 {
		// The packaged policyDir is setgid _sandbox-broker, so the group is
		// normally right already (and the host, not in that group, could
		// not chown to it); fix it only where it is not.
		st, err := os.Lstat(b.Policy)
		if err != nil {
			return fmt.Errorf("policy file: %w", err)
		}
		if g, ok := FileGroup(st); !ok || g != gid {
			if err := os.Lchown(b.Policy, -1, gid); err != nil {
				return fmt.Errorf("policy file group (make policyDir setgid %d): %w", gid, err)
			}
		}
	}
	return nil
}

// EnsureWorkspace makes a workspace 0700 and owned by its guest uid:gid,
// or accepts an existing directory (not a symlink) owned by them. A
// workspace of another owner (one made before guests had their own uids,
// or by an earlier guest range) is handed over whole, without following
// any symlink in it. The host never reads inside a workspace.
func (l *Lifecycle) EnsureWorkspace(dir string, guest int, tag string) error {
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
	owner, _ := FileOwner(st)
	group, _ := FileGroup(st)
	if owner == guest && group == guest {
		return nil
	}
	if err := l.o.ChownTree(dir, guest, guest); err != nil {
		return fmt.Errorf("give %s to guest uid %d (the host needs CAP_CHOWN, see sandbox-host.service; by hand: chown -R %d:%d %s): %w", dir, guest, guest, guest, dir, err)
	}
	if !made {
		l.o.Logger.Info("workspace handed to the channel's guest uid", "channel", tag, "workspace", dir, "from_uid", owner, "guest_uid", guest)
	}
	return nil
}

// CloseSink closes a container's worker log sink and logs the lines that
// were not forwarded.
func (l *Lifecycle) CloseSink(b *Handle, sink *workerlog.Sink) {
	if st := sink.Close(); st.Dropped > 0 || st.Truncated > 0 || st.SendErr != nil {
		l.o.Logger.Warn("worker log lines not forwarded in full", "turn", b.ID, "channel", b.Tag,
			"forwarded", st.Lines, "dropped", st.Dropped, "cut", st.Truncated, "stderr_bytes", st.Total, "journal_err", st.SendErr)
	}
}

// RemoveContainer force-removes a container: first by target (its id, or
// its name when create did not answer), then, when that fails, by name
// (which also covers the create/attach race) up to RemoveAttempts in all,
// pausing RemoveRetryDelay doubling to 2 s (100 ms, 200 ms, ... 1.6 s by
// default: about 3 s of pauses), starting no retry and ending none later
// than RemoveRetryTotal after the first removal.
// The first removal is always made; retries stop once the lifecycle is
// abandoned (Abandon). A container still there is logged for the operator
// and left to sandbox-reaper.
func (l *Lifecycle) RemoveContainer(target, name string, log *slog.Logger) error {
	o := l.o
	start := time.Now()
	attempt := func(ctx context.Context, d time.Duration, id string) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return o.Containers.Remove(ctx, id)
	}
	err := attempt(context.Background(), o.RemoveTimeout, target)
	if err == nil {
		return nil
	}
	log.Warn("container removal failed; retrying", "container", name, "err", err,
		"attempts_left", RemoveAttempts-1, "within_ms", o.RemoveRetryTotal.Milliseconds())
	delay, attempts, stopped := o.RemoveRetryDelay, 1, ""
	for attempts < RemoveAttempts {
		left := o.RemoveRetryTotal - time.Since(start) - delay
		if left <= 0 {
			stopped = "retry time used up"
			break
		}
		pause := time.NewTimer(delay)
		select {
		case <-l.cleanupCtx.Done():
			pause.Stop()
		case <-pause.C:
		}
		if l.cleanupCtx.Err() != nil {
			stopped = "host shutdown out of time"
			break
		}
		attempts++
		if err = attempt(l.cleanupCtx, min(o.SecondRemoval, left), name); err == nil {
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

// ExplainUnits asks systemd why sandbox id's broker units failed, when
// the Units can say (UnitExplainer), within a few seconds: nil when none
// failed or nobody can tell.
func (l *Lifecycle) ExplainUnits(id string) error {
	x, ok := l.o.Units.(UnitExplainer)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.RemoveTimeout)
	defer cancel()
	return x.ExplainBroker(ctx, id)
}

// Broker unit stops (StopUnits).
const (
	DefaultUnitStopTimeout = 20 * time.Second
	UnitStopAttempts       = 3
)

// StopUnits stops the broker units of sandbox id, each attempt bounded by
// UnitStopTimeout, up to UnitStopAttempts times: under load a stop can run
// out of time (the D-Bus call or the job waiting in systemd's queue), and
// a socket unit left listening would outlive its turn. A stop that still
// fails is left to sandbox-reaper, which stops the units of any turn the
// host no longer lists, and the log line says so. After Abandon (a shutdown
// out of time) it makes one attempt bounded by RemoveTimeout.
func (l *Lifecycle) StopUnits(id string, log *slog.Logger) error {
	o := l.o
	sockUnit, _ := ids.BrokerSocketUnit(id)
	svcUnit, _ := ids.BrokerServiceUnit(id)
	units := []string{sockUnit, svcUnit}
	start := time.Now()
	delay := o.RemoveRetryDelay
	var err error
	attempt := 0
	for attempt < UnitStopAttempts {
		attempt++
		bound := o.UnitStopTimeout
		abandoned := l.cleanupCtx.Err() != nil
		if abandoned {
			bound = min(bound, o.RemoveTimeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		err = o.Units.StopBroker(ctx, id)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("broker units stopped after retries", "units", units, "attempts", attempt,
					"took_ms", time.Since(start).Milliseconds())
			}
			return nil
		}
		if abandoned || attempt == UnitStopAttempts {
			break
		}
		log.Warn("broker unit stop failed; retrying", "units", units, "attempt", attempt,
			"attempts", UnitStopAttempts, "timeout_ms", bound.Milliseconds(), "err", err)
		pause := time.NewTimer(delay)
		select {
		case <-l.cleanupCtx.Done():
			pause.Stop()
		case <-pause.C:
		}
		delay = min(2*delay, maxRemoveRetryDelay)
	}
	log.Error("broker unit stop failed; left to sandbox-reaper, whose next pass stops the units of a turn the host no longer lists",
		"units", units, "attempts", attempt, "timeout_ms", o.UnitStopTimeout.Milliseconds(),
		"took_ms", time.Since(start).Milliseconds(), "err", err)
	return err
}

// Cleanup undoes whatever the handle tried: kill and force-remove the
// container (retried, see RemoveContainer), stop the broker units, remove
// the turn directory and the policy file. It never uses the sandbox's
// context, which may be over.
func (l *Lifecycle) Cleanup(b *Handle, log *slog.Logger) error {
	o := l.o
	var failed []string
	bounded := func(d time.Duration, f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return f(ctx)
	}
	if b.CreateTried {
		since := time.Now()
		target := b.ContainerID
		if target == "" {
			target = b.Container // create may have succeeded in the daemon anyway
		}
		if err := bounded(o.RemoveTimeout, func(ctx context.Context) error { return o.Containers.Kill(ctx, target) }); err != nil {
			log.Debug("kill before removal", "err", err) // usually: already exited
		}
		if err := l.RemoveContainer(target, b.Container, log); err != nil {
			failed = append(failed, "container")
		}
		b.Phase(l, PhaseRemove, since)
	}
	if b.UnitTried {
		since := time.Now()
		if err := l.StopUnits(b.ID, log); err != nil {
			failed = append(failed, "units")
		}
		b.Phase(l, PhaseUnitStop, since)
	}
	since := time.Now()
	if b.MadeDir {
		if err := os.RemoveAll(b.Dir); err != nil {
			failed = append(failed, "turn_dir")
			log.Error("turn directory removal failed", "err", err)
		}
	}
	if b.MadePolicy {
		if err := os.Remove(b.Policy); err != nil && !errors.Is(err, fs.ErrNotExist) {
			failed = append(failed, "policy")
			log.Error("policy file removal failed", "err", err)
		}
	}
	b.Phase(l, PhaseFiles, since)
	if len(failed) == 0 {
		return nil
	}
	if o.CleanupFailed != nil {
		for _, what := range failed {
			o.CleanupFailed(l.kind, what)
		}
	}
	sockUnit, _ := ids.BrokerSocketUnit(b.ID)
	svcUnit, _ := ids.BrokerServiceUnit(b.ID)
	log.Error("turn cleanup failed; operator must inspect and remove by hand (sandbox-reaper also sweeps these)",
		"failed", failed, "container", b.Container, "units", []string{sockUnit, svcUnit},
		"turn_dir", b.Dir, "policy_file", b.Policy)
	return fmt.Errorf("%v: %w", failed, ErrCleanup)
}

// CountCleanupFailure counts one failed cleanup step a kind does itself
// (a delegated job's scratch workspace).
func (l *Lifecycle) CountCleanupFailure(what string) {
	if l.o.CleanupFailed != nil {
		l.o.CleanupFailed(l.kind, what)
	}
}

// For is this lifecycle for the sandboxes of one kind: the same drivers,
// options and shutdown (Abandon reaches it), its cleanup failures counted
// under kind.
func (l *Lifecycle) For(kind string) *Lifecycle {
	c := *l
	c.kind = kind
	return &c
}

// Standby is what every kind's standby shares (pkg/standby's Warm): a
// prepared sandbox whose started container waits for the stdin of the
// work that binds it. Name ("standby", "run standby") words its messages.
type Standby struct {
	Life    *Lifecycle
	Warm    WarmContainers
	Handle  *Handle
	Started StartedContainer
	Log     *slog.Logger
	Name    string
}

// Alive: the container still runs (Docker restarted, OOM, killed by hand:
// the work then takes the cold path).
func (s *Standby) Alive(ctx context.Context) error {
	running, err := s.Warm.Running(ctx, s.Handle.ContainerID)
	if err != nil {
		return err
	}
	if !running {
		return errors.New(s.Name + " container is not running")
	}
	return nil
}

// Discard removes the standby unused, as the work's cleanup would.
func (s *Standby) Discard(reason string) {
	s.Started.Close()
	if err := s.Life.Cleanup(s.Handle, s.Log); err != nil {
		s.Log.Warn(s.Name+" discard incomplete", "reason", reason, "err", err)
	}
}
