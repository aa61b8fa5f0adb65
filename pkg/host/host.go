// Package host is the sandbox-host daemon: the HTTP/JSON API on the host
// socket (the router, its own routes and each kind's), admission
// (per-channel queues, the global cap, a channel's one running turn, fresh
// starts), channel state and the wiring of the kinds, each driving the one
// lifecycle (pkg/sandbox). The kinds register themselves: the host keeps
// one table of their registrations (registry.go, the only file that names
// one) and loops over the kinds through the optional interfaces of
// pkg/kind (routes, listing entries, channel modes and turns, channel
// status, fleet start, warm-up, stop); a kind reaches the host only through
// kind.Host (kinds.go); every kind's error categories become a status in
// one place (status.go), only the rows come from the kinds.
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
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
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
	// Machine is what queue.globalConcurrency 0 is derived from;
	// config.ReadMachine() when nil.
	Machine *config.Machine
	// WorkerLogs forwards each turn's worker stderr to journald, bounded;
	// workerlog.New(workerlog.DefaultLimits(), nil, nil) when nil.
	WorkerLogs *workerlog.Forwarder
	// Fleet, in fleet mode (fleet.enabled), is where sealed turns go
	// (fleet.go); nil on a box alone: turns run here, as always.
	Fleet *fleet.Fleet
	// Tuning holds settings of particular kinds (tests): each kind takes
	// the value of its own type (kind.TuningOf), for example the rich
	// sessions' control path and idle time.
	Tuning []any
}

// Host is one running sandbox-host.
type Host struct {
	routes  []route // the API (routes.go): the host's routes and the kinds'
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

	// kinds are the registry's kinds, made in its order; turnKinds those
	// that run channel turns, by mode.
	kinds     []kind.Kind
	turnKinds map[string]kind.ChannelTurns

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

// Kind is the host's kind of type T (tests and integration tests drive a
// kind without the API), or T's zero value when none is.
func Kind[T any](h *Host) T {
	for _, k := range h.kinds {
		if t, ok := k.(T); ok {
			return t
		}
	}
	var zero T
	return zero
}

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
