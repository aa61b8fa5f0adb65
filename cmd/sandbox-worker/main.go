// Command sandbox-worker is the per-turn agent inside the sealed container:
// one turn JSON on stdin, one reply JSON on stdout, JSON logs on stderr. Its
// only way out is the broker's Unix socket; see package worker.
//
// "sandbox-worker egress-bridge" is the in-container end of a granted
// egress route instead (package bridge): it listens on
// 127.0.0.1:3128 and relays each connection to the broker socket.
//
// "sandbox-worker run-supervise" is PID 1 of a code run's container
// (package supervisor): the job on stdin, frames on stdout, logs on stderr.
// It runs itself as "sandbox-worker run-supervise-kill <target>" to kill a
// guest uid's leftover processes with that uid.
//
// "sandbox-worker session <uid> <gid> [<work dir>]" is PID 1 of a session's container
// (package sessionsup): requests on stdin, events on stdout, logs on
// stderr, execs and file operations as the guest uid:gid. It kills
// leftovers through "run-supervise-kill" as a run's supervisor does.
//
// "sandbox-worker rich" is a rich channel's long-lived worker (package
// rich): it pulls turns from its channel broker's socket until SIGTERM.
//
// "sandbox-worker precheck" runs one precheck script instead (package
// precheck/runner): one job JSON on stdin, one result JSON on stdout, its MCP calls
// through the broker socket.
package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/roundtable-sandbox/sandbox/pkg/egress/bridge"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck/runner"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/rich"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionsup"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
	"github.com/roundtable-sandbox/sandbox/pkg/worker"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "sandbox-worker", "version", version.Version)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	var code int
	switch {
	case len(os.Args) == 2 && os.Args[1] == "egress-bridge":
		code = egressBridge(ctx, log.With("component", "sandbox-egress-bridge"))
	case len(os.Args) == 2 && os.Args[1] == "run-supervise":
		code = supervisor.Main(ctx, os.Stdin, os.Stdout, os.Stderr, supervisor.Options{
			BrokerSocket: protocol.BrokerSocketPath,
			Log:          log.With("component", "sandbox-run-supervisor"),
		})
	case len(os.Args) == 3 && os.Args[1] == supervisor.KillArg:
		// The supervisor's straggler killer, started by it as a guest uid.
		code = supervisor.KillMain(os.Args[2])
	case (len(os.Args) == 4 || len(os.Args) == 5) && os.Args[1] == "session":
		uid, uerr := strconv.Atoi(os.Args[2])
		gid, gerr := strconv.Atoi(os.Args[3])
		if uerr != nil || gerr != nil {
			log.Error("session: want a numeric uid and gid")
			code = 2
			break
		}
		o := sessionsup.Options{UID: uid, GID: gid, Log: log.With("component", "sandbox-session-supervisor")}
		if len(os.Args) == 5 {
			o.WorkDir = os.Args[4] // default sessionsup.DefaultWorkDir
		}
		code = sessionsup.Main(ctx, os.Stdin, os.Stdout, os.Stderr, o)
	case len(os.Args) == 2 && os.Args[1] == "rich":
		code = richWorker(ctx, log.With("component", "sandbox-rich-worker"))
	case len(os.Args) == 2 && os.Args[1] == "precheck":
		code = runner.Main(ctx, os.Stdin, os.Stdout, worker.NewUnixBroker(protocol.BrokerSocketPath, 0),
			log.With("component", "sandbox-precheck"))
	default:
		code = worker.Main(ctx, os.Stdin, os.Stdout, worker.Options{
			Broker:    worker.NewUnixBroker(protocol.BrokerSocketPath, 0),
			Workspace: protocol.WorkspacePath,
			Logger:    log,
		})
	}
	stop()
	os.Exit(code)
}

// richWorker serves a rich channel until a signal.
func richWorker(ctx context.Context, log *slog.Logger) int {
	b := rich.NewBroker(filepath.Join(protocol.BrokerDir, layout.BrokerSocketName), log)
	w, err := rich.New(rich.Options{Pull: b, Model: b, Tools: b, Compactor: b, Reporter: b, Attachments: b,
		Sessions: rich.WorkspaceSessions{Workspace: protocol.WorkspacePath}, Workspace: protocol.WorkspacePath, SkillsDir: rich.SkillsPath, Logger: log})
	if err != nil {
		log.Error("rich worker not started", "reason", err.Error())
		return 1
	}
	w.Serve(ctx)
	log.Info("rich worker stopped")
	return 0
}

// egressBridge serves the bridge on the container's loopback until a signal.
func egressBridge(ctx context.Context, log *slog.Logger) int {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(bridge.Port)))
	if err != nil {
		log.Error("bridge listen failed", "reason", err.Error())
		return 1
	}
	log.Info("bridge ready", "listen", ln.Addr().String(), "socket", protocol.BrokerSocketPath)
	b := &bridge.Bridge{Listener: ln, Dial: bridge.UnixDial(protocol.BrokerSocketPath), MaxConnections: bridge.MaxConnections, Log: log}
	if err := b.Serve(ctx); err != nil {
		log.Error("bridge failed", "reason", err.Error())
		return 1
	}
	return 0
}
