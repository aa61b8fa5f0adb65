// Package kind is the contract between the host and its kinds of sandbox
// (DESIGN.md section 16): a kind registers itself with a Registration (its
// name, its constructor, its error statuses and path parameters), is made
// from Deps (what the host hands every kind, never the host itself), and
// tells the host what it has to say through the optional interfaces below,
// which it implements only when it has something to say, as containerd's
// plugins and nomad's runner hooks do. The host keeps one table of
// registrations and loops over the kinds for everything else (routes, the
// /v1/turns listing, channel modes and turns, channel status, fleet start,
// warm-up, stop).
// Guarantee: a kind reaches the host only through Host, the narrow
// interface of what the host offers every kind; it never imports the host
// or another kind.
package kind

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/wsarchive"
)

// A Registration is how a kind registers itself: each kind package exports
// one (its Registration variable) and the host's table lists them.
type Registration struct {
	// Name is the kind's name (its package's), for logs and tests.
	Name string
	// New makes the kind from what the host hands every kind.
	New func(Deps) (Kind, error)
	// Zero is the kind's zero value (a nil pointer of its type): the host
	// asks it for its routes' endpoints before any kind is made.
	Zero Kind
	// Statuses are the rows of the host's one error-to-status table that
	// the kind's error categories need.
	Statuses []api.Status
	// Params are the path parameters of the kind's routes.
	Params []api.Param
}

// A Kind is one kind of sandbox as the host drives it. Stop lets go of
// what outlives the kind's work (after the host's turns); the rest is said
// through the optional interfaces.
type Kind interface {
	Stop()
}

// Host is what the host offers every kind; each kind keeps the part it
// needs behind a narrow interface of its own.
type Host interface {
	// Admit runs create under the host's admission lock unless the host
	// is stopping (then sandbox.ErrShuttingDown), and counts the work
	// until done is called, so a shutdown waits for it.
	Admit(create func() error) (done func(), err error)
	// Slot waits for a place under the global concurrency cap, queued
	// under key.
	Slot(ctx context.Context, key string) (release func(), err error)
	// Stopped ends, with cause sandbox.ErrShuttingDown, when the host stops.
	Stopped() context.Context
	// ChannelOn is nil when channel is in sandbox mode.
	ChannelOn(channel string) error
	// GuestFor is the channel's guest uid (the owner of an existing
	// workspace offered for adoption); GuestUID the one recorded for key.
	GuestFor(channel, workspace string) (int, error)
	GuestUID(key string) (int, error)
	// Accepting is false once the host stops.
	Accepting() bool
	// Waiting counts the channel's turns waiting in its queue; Queued
	// the waiting work of every channel.
	Waiting(channel string) int
	Queued() int
	// SpareSlot waits for a slot granted only when nothing waits for one,
	// then for a start slot; StartSlot for a start slot alone.
	SpareSlot(ctx context.Context) (release func(), err error)
	StartSlot(ctx context.Context) (release func(), err error)
}

// Deps is what the host hands every kind's constructor.
type Deps struct {
	Config    *config.Config
	Lifecycle *sandbox.Lifecycle
	Host      Host
	Logger    *slog.Logger
	Now       func() time.Time
	NewID     func() string
	// UID and GID are the host process's own ids.
	UID, GID int
	// Lchown changes one entry, never through a link.
	Lchown func(path string, uid, gid int) error
	// Tools and MCP are the public tool specs; Policy the host's policy
	// template (pkg/toolset).
	Tools  []protocol.ToolSpec
	MCP    []protocol.MCPServerSpec
	Policy policy.Policy
	// Registry receives the kind's metrics; Observe records a phase's
	// duration in the host's phase histogram.
	Registry *prometheus.Registry
	Observe  func(phase string, took time.Duration)
	// Fleet, in fleet mode, is the fleet (nil on a box alone).
	Fleet *fleet.Fleet
	// Tuning holds settings for particular kinds (tests): a kind takes
	// the value of its own type (TuningOf).
	Tuning []any
	// Made are the kinds made before this one, in the table's order: a
	// kind that needs another's service finds it here by interface.
	Made []Kind
}

// TuningOf is the value of type T (or *T) in d.Tuning (zero when none).
func TuningOf[T any](d Deps) T {
	for _, v := range d.Tuning {
		switch t := v.(type) {
		case T:
			return t
		case *T:
			return *t
		}
	}
	var zero T
	return zero
}

// Router serves routes of the host API (built on pkg/api); Routes must
// work on the kind's Zero value.
type Router interface {
	Routes() []api.Route
}

// Lister lists the kind's sandboxes in GET /v1/turns (the reaper keeps
// what is listed).
type Lister interface {
	Listed() []apiwire.Turn
}

// ModeWatcher hears of a channel's new mode (and rich profile).
type ModeWatcher interface {
	ChannelMode(channel, mode, profile string)
}

// Warmer prepares ahead once the host serves (after its startup reap).
type Warmer interface {
	WarmUp()
}

// FleetStarter starts the kind's fleet workers (fleet mode only).
type FleetStarter interface {
	StartFleet(ctx context.Context, slot fleetjobs.SlotFunc) (stop func(), err error)
}

// Reporter adds to a channel's status (GET /v1/channels/{channel}).
type Reporter interface {
	ChannelReport(channel, mode string) Report
}

// A Report is what a kind adds to a channel's status.
type Report struct {
	// Standby is the channel's standby state ("" none), StandbyExpires
	// its expiry.
	Standby        string
	StandbyExpires time.Time
	// Session is a rich channel's session.
	Session *SessionStatus
}

// SessionStatus is a rich channel's session as its status shows it (the
// API's body, pkg/apiwire).
type SessionStatus = apiwire.RichSession

// ChannelTurns runs the turns of channels in one mode: the host admits a
// turn (the channel's queue slot, its one running turn, fresh start),
// classifies its result and answers it; the kind runs it.
type ChannelTurns interface {
	// Mode is the channel mode whose turns the kind runs.
	Mode() string
	// CheckMode is nil when a channel may be put in the kind's mode with
	// profile; else a reason the caller reads.
	CheckMode(profile string) error
	// TurnTimeout is how long a turn of a channel in the kind's mode with
	// profile may take, or an error when such a turn cannot run now.
	TurnTimeout(profile string) (time.Duration, error)
	// RunChannelTurn runs an admitted turn to the end of its cleanup.
	RunChannelTurn(ctx context.Context, t *Turn) Outcome
}

// A Turn is an admitted channel turn as the host hands it to its kind.
type Turn struct {
	ID              string
	Channel         string
	Profile         string
	Speaker         protocol.Speaker
	Principal, Text string
	Attachments     []richproto.Attachment
	Deadline        time.Time
	// Reset: a fresh start was pending, the turn starts without history.
	Reset bool
	// Rebind tells the host the turn now runs under id (a bound standby's).
	Rebind func(id string)
	// Answer, when set, answers a successful run before its cleanup (the
	// host marks the turn no longer cancellable); a kind that does not
	// call it is answered by the host after the turn.
	Answer func(reply *protocol.Reply, id string)
}

// An Outcome is a finished channel turn.
type Outcome struct {
	// ID is the turn's final id (a bound standby's).
	ID                 string
	Reply              *protocol.Reply
	Files              []richproto.File
	RunErr, CleanupErr error
	// Answered: the kind called Turn.Answer.
	Answered bool
	// Log is the turn's logger; Failed names a failed run in its log line
	// with FailedAttrs, Done the attributes of the "turn done" line.
	Log         *slog.Logger
	Failed      string
	FailedAttrs []any
	Done        []any
	// Phases are logged at debug level with the result.
	Phases []slog.Attr
	// Count hears of the turn's result (the kind's own metrics); Release
	// gives back what the reply holds once it is written. Either may be nil.
	Count   func(result string)
	Release func()
}

// WorkspaceMover packs and restores a sealed channel's workspace (the
// fleet moves it between boxes).
type WorkspaceMover interface {
	PackWorkspace(channel string, limits wsarchive.Limits) ([]byte, error)
	RestoreWorkspace(channel string, data []byte, limits wsarchive.Limits) error
}

// Researcher runs a delegated job's research turn in its scratch
// workspace and cleans it up (the sealed turn offers it to the
// delegation kind).
type Researcher interface {
	Research(ctx context.Context, j ResearchJob, log *slog.Logger) ResearchResult
}

// A ResearchJob is a delegated job's research turn.
type ResearchJob struct {
	ID, Channel string
	Author      delegation.Author
	Text        string
	Deadline    time.Time
	Scratch     string
}

// ResearchResult is a research turn's outcome: the reply, the run's error
// (with the worker's exit status and fixed cause when it exited non-zero)
// and the turn's cleanup error.
type ResearchResult struct {
	Reply       *protocol.Reply
	RunErr      error
	Exited      bool
	ExitCode    int64
	WorkerCause string
	CleanupErr  error
}
