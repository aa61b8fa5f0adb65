// Package host is the sandbox-host daemon: the HTTP/JSON API on the host
// socket (the router, its own routes and each kind's), admission
// (per-channel queues, the global cap, a channel's one running turn, fresh
// starts), channel state and the wiring of the kinds (pkg/sealedturn,
// pkg/coderun, pkg/richsession, pkg/precheckrun, pkg/delegationrun), each
// driving the one lifecycle (pkg/sandbox). The host drives every kind
// through one interface (kind: its routes, its listing entries, a channel's
// new mode, stop); a kind reaches the host only through the narrow
// interface it declares itself (kinds.go); every kind's error categories
// become a status in one place (status.go).
// Guarantee: every turn it starts ends with its container removed, its broker
// units stopped and its turn directory and policy file removed, or with an
// error and a log line naming exactly what an operator must inspect.
// Docker and systemd are reached through the lifecycle's narrow interfaces.
package host

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegationrun"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
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

// The rich kind's names, as the host's callers use them.
type (
	// RichControl is the host's side of a rich channel broker's control
	// path (richsession.Control).
	RichControl = richsession.Control
	// ReserveFunc takes bytes of the rich reply budget for a packet.
	ReserveFunc = richsession.ReserveFunc
	// HTTPRichControl speaks it on a session's broker socket.
	HTTPRichControl = richsession.HTTPControl
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
	// Machine is what queue.globalConcurrency 0 is derived from;
	// config.ReadMachine() when nil.
	Machine *config.Machine
	// WorkerLogs forwards each turn's worker stderr to journald, bounded;
	// workerlog.New(workerlog.DefaultLimits(), nil, nil) when nil.
	WorkerLogs *workerlog.Forwarder
	// RichControl reaches rich channel brokers' control routes; HTTP on
	// the session's broker socket when nil.
	RichControl RichControl
	// Fleet, in fleet mode (fleet.enabled), is where sealed turns go
	// (fleet.go); nil on a box alone: turns run here, as always.
	Fleet *fleet.Fleet
	// RichReplyBudget replaces the rich reply budget (tests; 0 =
	// rich.replyBudgetBytes); RichBudgetWait hears of a packet
	// that waits for it.
	RichReplyBudget int64
	RichBudgetWait  func(n int64)
}

// Host is one running sandbox-host.
type Host struct {
	routes  []route // the API (routes.go): the host's routes and the kinds'
	kinds   []kind  // kindList, made once
	opts    Options
	cfg     *config.Config
	log     *slog.Logger
	state   *State
	queue   *admission.Queue
	starts  *admission.Starts // cold turns' and standbys' starts at once
	metrics *metrics
	reg     *prometheus.Registry

	// admission is the global concurrency in force (queue.go), startAdm
	// the bound on starts at once.
	admission, startAdm config.Concurrency

	tools    []protocol.ToolSpec
	mcpSpecs []protocol.MCPServerSpec
	pol      policy.Policy // the turn-independent part of every policy

	// Sealed turns and the warm path (nil standbys: every turn takes the
	// cold path).
	sealed   *sealedturn.Kind
	standbys *standby.Pool

	// The other kinds: code runs, precheck scripts, rich channel
	// sessions (their turns are admitted here, rich.go) and delegated jobs
	// (their research turns are sealed turns, research.go).
	coderun     *coderun.Kind
	prechecks   *precheckrun.Kind
	rich        *richsession.Kind
	delegations *delegationrun.Kind
	research    sealedturn.Research // tools and prompt of every research turn

	// life makes, runs and cleans up every kind's containers.
	life *sandbox.Lifecycle

	// fleet is Options.Fleet (nil: not in fleet mode), fl this host's
	// side of it (fleet.go).
	fleet *fleet.Fleet
	fl    *fleetside.Side

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

// A kind is one kind of sandbox as the host drives it (DESIGN.md section
// 16): the host serves its routes (and maps its errors to a status in
// statusOf), lists its sandboxes in GET /v1/turns, tells it of a channel's
// new mode, and stops it after the host's own turns. Each kind reaches the
// host only through the narrow interface it declares itself (kinds.go).
type kind interface {
	Routes() []api.Route
	Listed() []sandbox.Listed
	ChannelMode(channel, mode, profile string)
	Stop()
}

// kindList is every kind in the order the host stops them: rich sessions
// before the standbys (no turn takes either any more), then the kinds
// whose work the host's turn count already waited for. It is callable on
// a zero Host (Endpoints): each kind's Routes works on a nil kind.
func (h *Host) kindList() []kind {
	return []kind{h.rich, h.sealed, h.coderun, h.delegations, h.prechecks}
}

// CodeRuns is the code-run kind (integration tests drive runs without
// the API).
func (h *Host) CodeRuns() *coderun.Kind { return h.coderun }

func (h *Host) accepting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.stopping
}

// ObservePhase records one phase duration (also used for the container
// driver's own phases: attach, start, wait).
func (h *Host) ObservePhase(phase string, took time.Duration) {
	h.metrics.phases.WithLabelValues(phase).Observe(took.Seconds())
}

// HasCapChown reports whether the process may hand workspaces to guests
// (sandbox.HasCapChown).
func HasCapChown() (bool, error) { return sandbox.HasCapChown() }
