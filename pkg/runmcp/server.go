// Package runmcp is the MCP server of code execution (DESIGN.md section 12):
// `sandbox_run`, with the seed's parameters, and beside it the session
// tools (sandbox_session_start, sandbox_exec, sandbox_write_file,
// sandbox_read_file, sandbox_session_close; DESIGN.md section 18) when the
// Runner also drives sessions, served over stdio or Streamable HTTP and
// backed by the host's API (pkg/client in production).
//
// Guarantee: arguments that do not map exactly onto runs.Params (unknown
// properties, wrong types) are refused before the Runner is called; a run
// with network is started only after the client's human accepted it through
// elicitation, and never when the client cannot ask or the server listens
// on a TCP port, which any local user reaches (no run, no container);
// a run whose tool call ends early (cancellation, a closed session, the
// server stopping, the wait bound) is cancelled on the host; tool errors
// carry the host's refusal of bad parameters or a generic reason, never a
// host path or a credential.
package runmcp

import (
	"context"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
)

// ToolName is the one tool this server exposes.
const ToolName = "sandbox_run"

// Runner is the part of the host API (pkg/client) the server drives.
type Runner interface {
	// StartRun submits a run; a network run comes back awaiting approval.
	StartRun(ctx context.Context, p runs.Params) (runs.Status, error)
	// RunEvents calls fn for each event (history replayed, then live) and
	// returns the run's status when the stream ends after the result event.
	RunEvents(ctx context.Context, id string, fn func(runs.Event) error) (runs.Status, error)
	// CancelRun stops a run in any state.
	CancelRun(ctx context.Context, id string) (runs.Status, error)
	// ApproveRun grants network to a run awaiting approval (admin role).
	ApproveRun(ctx context.Context, id string) (runs.Status, error)
	// Credentials lists what a run of project by this user may ask for,
	// with each placeholder's variable: the approval names them.
	Credentials(ctx context.Context, project string) ([]runs.Credential, error)
}

// Defaults applied by NewServer for zero Options fields.
const (
	DefaultApprovalTimeout  = 5 * time.Minute
	DefaultProgressInterval = 250 * time.Millisecond
	DefaultCancelTimeout    = 10 * time.Second
	DefaultWaitSlack        = 30 * time.Minute
)

// Options configures a server.
type Options struct {
	// Project is the operator-declared project every run of this server
	// sees at /workspace ("" = an empty read-only /workspace). Clients
	// never choose it.
	Project string
	// Logger receives the server's log lines (never a command, an output
	// or an argument). nil: discard.
	Logger *slog.Logger
	// Context, when set, bounds every tool call: when it ends (the server
	// is stopping), runs in flight are cancelled on the host.
	Context context.Context
	// ApprovalTimeout bounds the wait for the human's answer to the
	// network question; no answer in time means no run.
	ApprovalTimeout time.Duration
	// ProgressInterval is the least time between two progress
	// notifications of one call.
	ProgressInterval time.Duration
	// CancelTimeout bounds CancelRun when a call ends early.
	CancelTimeout time.Duration
	// WaitSlack is how long beyond the run's own timeout the server waits
	// for its result (queueing included) before cancelling it.
	WaitSlack time.Duration
	// TCP: the server listens on a TCP port, which every local user can
	// reach; whoever connects would answer the network approval question,
	// so network runs are refused before anything is asked or started
	// (also when the user's role changed after CheckTCPRole).
	TCP bool
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Context == nil {
		o.Context = context.Background()
	}
	if o.ApprovalTimeout <= 0 {
		o.ApprovalTimeout = DefaultApprovalTimeout
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.CancelTimeout <= 0 {
		o.CancelTimeout = DefaultCancelTimeout
	}
	if o.WaitSlack <= 0 {
		o.WaitSlack = DefaultWaitSlack
	}
	return o
}

// protocolVersions are the revisions the server negotiates: those with the
// initialize handshake. From 2026-07-28 on, a server may no longer send
// elicitation requests of its own and clients declare capabilities per
// request; network approval relies on both, so those revisions are refused
// (the SDK's clients then fall back to initialize).
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// server holds one NewServer's state; sessions share it.
type server struct {
	r    Runner
	o    Options
	logf *slog.Logger
}

// NewServer returns an MCP server exposing sandbox_run backed by r.
func NewServer(r Runner, o Options) *mcp.Server {
	o = o.withDefaults()
	s := &server{r: r, o: o, logf: o.Logger}
	srv := mcp.NewServer(&mcp.Implementation{
		Name:    "roundtable-sandbox",
		Title:   "roundtable-sandbox code execution",
		Version: version.Version,
	}, &mcp.ServerOptions{
		Logger:                    quieter(o.Logger),
		Instructions:              "sandbox_run executes code in a fresh, offline, disposable container; the project is read-only at /workspace and files come back from /output through `artifacts`.",
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		SupportedProtocolVersions: protocolVersions,
	})
	srv.AddTool(tool(o.Project), s.handle)
	if sr, ok := r.(SessionRunner); ok {
		s.addSessionTools(srv, sr)
	}
	return srv
}

// quieter passes the SDK's own lines from warnings up: its per-session
// info lines would drown ours.
func quieter(l *slog.Logger) *slog.Logger { return slog.New(minLevel{l.Handler(), slog.LevelWarn}) }

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(n string) slog.Handler { return minLevel{h.Handler.WithGroup(n), h.min} }
