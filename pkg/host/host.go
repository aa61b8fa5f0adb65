// Package host is the sandbox-host daemon: the HTTP/JSON API on the host
// socket, admission (per-channel queues, the global cap, a channel's one
// running turn, fresh starts), channel state and the wiring of the kinds
// (pkg/sealedturn, pkg/coderun, pkg/richsession, pkg/precheckrun,
// pkg/delegationrun), each driving the one lifecycle (pkg/sandbox) and
// reaching the host only through the narrow interface it declares; every
// kind's error categories become a status in one place (statusOf).
// Guarantee: every turn it starts ends with its container removed, its broker
// units stopped and its turn directory and policy file removed, or with an
// error and a log line naming exactly what an operator must inspect.
// Docker and systemd are reached through the lifecycle's narrow interfaces.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/delegationrun"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
	"github.com/roundtable-sandbox/sandbox/pkg/toolset"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// The lifecycle's driver interfaces (pkg/sandbox), under the names the
// host's callers and adapters use.
type (
	ContainerSpec    = sandbox.ContainerSpec
	RunContainer     = sandbox.RunContainer
	RunContainers    = sandbox.RunContainers
	RunResult        = sandbox.RunResult
	Containers       = sandbox.Containers
	Units            = sandbox.Units
	WarmContainers   = sandbox.WarmContainers
	StartedContainer = sandbox.StartedContainer
)

// ChownTree hands a directory tree to a uid:gid without following a symlink
// (sandbox.ChownTree).
func ChownTree(dir string, uid, gid int) error { return sandbox.ChownTree(dir, uid, gid) }

// Options configure a Host.
type Options struct {
	Config     *config.Config
	Access     config.ResolvedAccess
	State      *State
	Containers Containers
	Units      Units
	Logger     *slog.Logger
	// Registry receives the metrics; a fresh registry when nil.
	Registry *prometheus.Registry
	// MCPTools replaces the declared tool specs of servers discovered at
	// startup (discover: true), keyed by server name.
	MCPTools map[string][]protocol.ToolSpec
	// Notify sends a systemd notification ("STOPPING=1"); nil = none.
	Notify func(state string)

	// The following have working defaults; tests replace them.
	UID, GID         int                                   // the process's ids; never a container's
	ChownTree        func(dir string, uid, gid int) error  // hands a workspace to its guest; ChownTree by default
	Lchown           func(path string, uid, gid int) error // one entry, never through a link (a run's gate); os.Lchown by default
	BrokerGID        int                                   // group of policy files (_sandbox-broker); 0 = leave as is
	PeerGroups       func(uid int) []int                   // supplementary groups of a peer uid
	Now              func() time.Time                      //
	NewTurnID        func() string                         //
	RemoveTimeout    time.Duration                         // bound of each removal and unit stop, 5 s
	SecondRemoval    time.Duration                         // bound of each retried removal, 2 s
	RemoveRetryDelay time.Duration                         // first pause between removals (doubling to 2 s), 100 ms
	RemoveRetryTotal time.Duration                         // bound of a container's removal retries, 15 s
	ShutdownTimeout  time.Duration                         // bound of the HTTP shutdown, 10 s
	ObservePhase     func(string, time.Duration)
	RichIdle         time.Duration // replaces rich.idleSeconds (tests); 0 = the configuration's
	// WorkerLogs forwards each turn's worker stderr to journald, bounded;
	// workerlog.New(workerlog.DefaultLimits(), nil, nil) when nil.
	WorkerLogs *workerlog.Forwarder
	// RichControl reaches rich channel brokers' control routes; HTTP on
	// the session's broker socket when nil.
	RichControl RichControl
}

// Host is one running sandbox-host.
type Host struct {
	routes  []route // the API (routes.go)
	opts    Options
	cfg     *config.Config
	log     *slog.Logger
	state   *State
	queue   *queue
	metrics *metrics
	reg     *prometheus.Registry

	tools    []protocol.ToolSpec
	mcpSpecs []protocol.MCPServerSpec
	pol      policy.Policy // the turn-independent part of every policy

	// Sealed turns and the warm path (nil standbys: every turn takes the
	// cold path).
	sealed   *sealedturn.Kind
	standbys *standby.Pool

	// Code runs (runs.go): the kind and its registry.
	coderun *coderun.Kind
	runs    *runs.Registry

	// Precheck scripts (prechecks.go).
	prechecks *precheckrun.Kind

	// Rich channel sessions (rich.go).
	rich    *richsession.Kind
	replies *replyBudget // reply packet bytes in flight (replyfiles.go)

	// Delegated jobs (delegations.go).
	delegations *delegationrun.Kind
	jobs        *delegation.Registry
	research    sealedturn.Research // tools and prompt of every research turn

	// life makes, runs and cleans up every kind's containers.
	life *sandbox.Lifecycle

	stopCtx  context.Context
	stopAll  context.CancelCauseFunc
	mu       sync.Mutex
	stopping bool
	turns    sync.WaitGroup
	active   map[string]*activeTurn // by channel
	fresh    map[string]uint64      // pending fresh start: channel -> generation
	freshGen uint64
}

type activeTurn struct {
	id, channel string
	deadline    time.Time
	cancel      context.CancelCauseFunc
	// replied: the client has its answer and only cleanup remains, which
	// a cancel could not shorten (h.mu).
	replied bool
}

// New checks the options and prepares the turn-independent parts of every
// policy and turn, validating them now rather than at the first guest message.
func New(o Options) (*Host, error) {
	if o.Config == nil || o.State == nil || o.Containers == nil || o.Units == nil {
		return nil, errors.New("host: config, state, containers and units are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.UID == 0 && o.GID == 0 {
		o.UID, o.GID = os.Getuid(), os.Getgid()
	}
	if o.WorkerLogs == nil {
		o.WorkerLogs = workerlog.New(workerlog.DefaultLimits(), nil, nil)
	}
	if o.ChownTree == nil {
		o.ChownTree = ChownTree
	}
	if o.Lchown == nil {
		o.Lchown = os.Lchown
	}
	if o.PeerGroups == nil {
		o.PeerGroups = SupplementaryGroups
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewTurnID == nil {
		o.NewTurnID = ids.NewTurnID
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
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	h := &Host{
		opts: o, cfg: o.Config, log: o.Logger, state: o.State, reg: o.Registry,
		queue:  newQueue(o.Config.Queue.Depth, o.Config.Queue.GlobalConcurrency),
		active: map[string]*activeTurn{}, fresh: map[string]uint64{},
		replies: newReplyBudget(replyBudgetBytes, o.Logger),
	}
	h.routes = h.routeTable()
	h.metrics = newMetrics(o.Registry, h.queue)
	h.stopCtx, h.stopAll = context.WithCancelCause(context.Background())
	h.life = sandbox.New(sandbox.Options{
		Containers: o.Containers, Units: o.Units, Logger: o.Logger, WorkerLogs: o.WorkerLogs,
		ChownTree: o.ChownTree, BrokerGID: o.BrokerGID,
		RemoveTimeout: o.RemoveTimeout, SecondRemoval: o.SecondRemoval,
		RemoveRetryDelay: o.RemoveRetryDelay, RemoveRetryTotal: o.RemoveRetryTotal,
		ObservePhase: func(name string, took time.Duration) {
			h.ObservePhase(name, took)
			if o.ObservePhase != nil {
				o.ObservePhase(name, took)
			}
		},
		CleanupFailed: func(what string) { h.metrics.cleanupFailures.WithLabelValues(what).Inc() },
	})
	h.coderun = coderun.New(coderun.Options{
		Config: o.Config, Lifecycle: h.life, Host: kindHost{h}, Logger: o.Logger, Now: o.Now, Lchown: o.Lchown, Registry: o.Registry,
	})
	h.runs = h.coderun.Registry()
	if err := h.prepareStatic(); err != nil {
		return nil, err
	}
	h.rich = richsession.New(richsession.Options{
		Config: o.Config, Lifecycle: h.life, Host: kindHost{h}, Logger: o.Logger, Now: o.Now, NewID: o.NewTurnID,
		Tools: h.tools, MCP: h.mcpSpecs, Policy: h.pol, Control: o.RichControl, Idle: o.RichIdle, Registry: o.Registry,
	})
	h.prechecks = precheckrun.New(precheckrun.Options{
		Config: o.Config, Lifecycle: h.life, Host: kindHost{h}, Logger: o.Logger, Now: o.Now, NewID: o.NewTurnID,
		Policy: h.pol, Registry: o.Registry,
	})
	sealed, err := sealedturn.New(sealedturn.Options{
		Config: o.Config, Lifecycle: h.life, Host: kindHost{h}, Logger: o.Logger, Now: o.Now, NewID: o.NewTurnID,
		Tools: h.tools, MCP: h.mcpSpecs, Policy: h.pol, StandbyEvent: h.metrics.standbyEvent, Observe: h.ObservePhase,
	})
	if err != nil {
		return nil, err
	}
	h.sealed, h.standbys = sealed, sealed.Pool()
	if err := h.checkSample(); err != nil {
		return nil, err
	}
	if err := h.newDelegation(); err != nil {
		return nil, err
	}
	h.rich.LogConfig()
	return h, nil
}

// prepareStatic builds the public tool specs and the policy template
// (pkg/toolset; checkSample validates both once the sealed turns exist).
func (h *Host) prepareStatic() error {
	set, err := toolset.New(h.cfg, h.opts.MCPTools)
	if err != nil {
		return err
	}
	h.tools, h.mcpSpecs, h.pol = set.Tools, set.MCP, set.Policy
	return nil
}

// checkSample validates the policy and worker turn of a sample turn.
func (h *Host) checkSample() error {
	sample := &sealedturn.Turn{Handle: sandbox.Handle{ID: ids.NewTurnID(), Channel: ids.PreflightChannel}, Speaker: protocol.Speaker{ID: "preflight"}}
	p := h.sealed.PolicyFor(sample, h.opts.Now().Add(h.cfg.TurnDeadline()))
	if err := p.Validate(); err != nil {
		return fmt.Errorf("host: configuration makes an invalid broker policy: %w", err)
	}
	if _, err := h.sealed.TurnJSON(sample, false); err != nil {
		return fmt.Errorf("host: configuration makes an invalid worker turn: %w", err)
	}
	return nil
}

// Handler is the API (exported for tests that want httptest).
func (h *Host) Handler() http.Handler { return http.HandlerFunc(h.route) }

// Run serves the API on ln until ctx ends, then stops admitting (503),
// cancels running and waiting turns, waits for their cleanup, sends
// STOPPING=1 and closes the server.
func (h *Host) Run(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           h.Handler(),
		ConnContext:       h.connContext,
		ReadHeaderTimeout: 10 * time.Second,
		// No ReadTimeout: a turn's request lasts minutes; decodeBody
		// bounds the body read with its own deadline instead.
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	// Run standbys are made once the host serves: after its startup reap.
	h.coderun.WarmUp()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(&steadyListener{Listener: ln, log: h.log, closed: make(chan struct{})}) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
		h.log.Error("API server stopped", "err", serveErr)
	}
	// Leave time under the unit's TimeoutStopSec=60s for the HTTP shutdown
	// and the exit: retries still running after this are left to the reaper.
	cctx, ccancel := context.WithTimeout(context.Background(), ShutdownCleanupTimeout)
	h.ShutdownContext(cctx)
	ccancel()
	if h.opts.Notify != nil {
		h.opts.Notify("STOPPING=1")
	}
	sctx, cancel := context.WithTimeout(context.Background(), h.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// steadyListener never lets an accept error end the server: a process of
// the host's uid that cannot register one more socket (ENOSPC once the uid's
// epoll watches are used up, EMFILE, ENFILE, ENOBUFS) is a reason to log,
// back off (5 ms doubling to 1 s) and try again, not to stop serving and
// cancel every channel's turn. Only closing the listener ends Accept.
type steadyListener struct {
	net.Listener
	log       *slog.Logger
	closeOnce sync.Once
	closed    chan struct{}
}

// Accept retries until a connection arrives or the listener is closed.
func (l *steadyListener) Accept() (net.Conn, error) {
	delay := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return c, nil
		}
		select {
		case <-l.closed:
			return nil, err
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		l.log.Warn("API accept failed; retrying (the host keeps serving)", "err", err, "retry_in_ms", delay.Milliseconds())
		t := time.NewTimer(delay)
		select {
		case <-l.closed:
			t.Stop()
			return nil, net.ErrClosed
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// Close ends a pending backoff at once.
func (l *steadyListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// ShutdownCleanupTimeout bounds how long Run's shutdown lets container
// removal retries go on.
const ShutdownCleanupTimeout = 40 * time.Second

// Shutdown stops admitting, cancels every turn and waits until each has
// finished its cleanup.
func (h *Host) Shutdown() { h.ShutdownContext(context.Background()) }

// ShutdownContext is Shutdown that, once ctx ends, stops container removal
// retries (each turn's cleanup then ends within one bounded operation,
// leaving what it could not remove to sandbox-reaper) and still waits for
// every turn's cleanup to finish.
func (h *Host) ShutdownContext(ctx context.Context) {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	h.queue.close()
	h.stopAll(ErrShuttingDown)
	done := make(chan struct{})
	go func() { h.turns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		h.life.Abandon(context.Cause(ctx))
		<-done
	}
	// After the turns: no turn takes a rich session any more.
	richDone := make(chan struct{})
	go func() { h.rich.StopAll("host stop"); close(richDone) }()
	select {
	case <-richDone:
	case <-ctx.Done():
		h.life.Abandon(context.Cause(ctx))
		<-richDone
	}
	// After the turns and runs: no turn or run binds a standby any more,
	// and none refills.
	if h.standbys != nil || h.coderun.StandbyPool() != nil {
		closed := make(chan struct{})
		go func() {
			if h.standbys != nil {
				h.standbys.Close()
			}
			h.coderun.CloseStandbys()
			close(closed)
		}()
		select {
		case <-closed:
		case <-ctx.Done():
			h.life.Abandon(context.Cause(ctx))
			<-closed
		}
	}
}

func (h *Host) accepting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.stopping
}

// HasCapChown reports whether the process may hand workspaces to guests
// (sandbox.HasCapChown).
func HasCapChown() (bool, error) { return sandbox.HasCapChown() }
