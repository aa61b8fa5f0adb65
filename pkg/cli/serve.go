package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/mcp"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/reaper"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
)

func serveCmd(g *globals) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the host daemon (started by sandbox-host.socket/.service)",
		Long: "serve takes the API socket from systemd socket activation, or listens on --listen when none is passed.\n" +
			"Before it reports READY it takes the lock, loads the state, reaches Docker and the worker image, connects to D-Bus and removes leftovers of earlier runs.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), g, listen)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "listen on this Unix socket path when systemd passes none (development and tests)")
	return cmd
}

func newLogger(g *globals, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(g.in.Stderr, &slog.HandlerOptions{Level: l}))
}

// listener picks the socket-activated listener (exactly one) or --listen.
func listener(g *globals, listen string) (net.Listener, error) {
	ls, err := g.in.Listeners, g.in.ListenersErr
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	switch {
	case len(ls) == 1 && ls[0] != nil:
		return ls[0], nil
	case len(ls) > 1:
		return nil, fmt.Errorf("socket activation passed %d sockets; sandbox-host.socket must pass exactly one", len(ls))
	case len(ls) == 1:
		return nil, errors.New("socket activation passed a socket that is not a listening stream socket")
	}
	if listen == "" {
		return nil, errors.New("no socket from systemd: start sandbox-host.socket, or pass --listen PATH")
	}
	if st, err := os.Lstat(listen); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("--listen %s exists and is not a socket", listen)
		}
		os.Remove(listen) // a stale socket of an earlier run; the lock guards live ones
	}
	ln, err := net.Listen("unix", listen)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(listen, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// dockerEngine adapts *container.Driver to host.Engine and host.WarmContainers.
type dockerEngine struct{ d *container.Driver }

func (e dockerEngine) Create(ctx context.Context, s host.ContainerSpec) (string, error) {
	spec := container.Spec{
		Name: s.Name, Image: s.Image, UID: s.UID, GID: s.GID, WorkspaceDir: s.WorkspaceDir, TurnDir: s.TurnDir,
		MemoryMB: s.MemoryMB, CPUs: s.CPUs, Pids: s.Pids, TmpfsMB: s.TmpfsMB, Runtime: s.Runtime, LogTag: s.LogTag, Labels: s.Labels,
		Precheck: s.Precheck, Rich: s.Rich, SkillsDir: s.SkillsDir,
	}
	if r := s.Run; r != nil {
		spec.Run = &container.RunOptions{Setup: r.Setup, GateDir: r.GateDir, OutputMB: r.OutputMB, Command: r.Command}
	}
	if x := s.Session; x != nil {
		spec.Session = &container.SessionOptions{WorkMB: x.WorkMB, OutputMB: x.OutputMB, Command: x.Command}
	}
	return e.d.Create(ctx, spec)
}

// Stream makes the driver a host.RunContainers (code runs).
func (e dockerEngine) Stream(ctx context.Context, id string, stdin []byte, stdout, stderr io.Writer) (int64, error) {
	s, err := e.d.Start(ctx, id)
	if err != nil {
		return -1, err
	}
	defer s.Close()
	return s.Stream(ctx, stdin, stdout, stderr)
}

func (e dockerEngine) Run(ctx context.Context, id string, stdin []byte, max int64, ready func(context.Context) error, stderr io.Writer) (host.RunResult, error) {
	r, err := e.d.RunLogged(ctx, id, stdin, max, ready, stderr)
	return runResult(r), err
}

// RunFramed makes the driver a sandbox.FramedContainers (the reply leaves
// at the worker's final frame).
func (e dockerEngine) RunFramed(ctx context.Context, id string, stdin []byte, max int64, ready func(context.Context) error, stderr io.Writer, accept func([]byte) bool) (host.RunResult, error) {
	r, err := e.d.RunFramed(ctx, id, stdin, max, ready, stderr, accept)
	return runResult(r), err
}

func runResult(r container.Result) host.RunResult {
	return host.RunResult{Stdout: r.Stdout, ExitCode: r.ExitCode, Truncated: r.Truncated, StderrRefused: r.StderrRefused, Framed: r.Framed, Tail: r.Tail}
}

// Start and Running make the driver a host.WarmContainers (standbys).
func (e dockerEngine) Start(ctx context.Context, id string) (host.StartedContainer, error) {
	s, err := e.d.Start(ctx, id)
	if err != nil {
		return nil, err
	}
	return startedContainer{s}, nil
}
func (e dockerEngine) Running(ctx context.Context, id string) (bool, error) {
	return e.d.Running(ctx, id)
}

type startedContainer struct{ s *container.Started }

func (c startedContainer) Finish(ctx context.Context, stdin []byte, max int64, stderr io.Writer) (host.RunResult, error) {
	r, err := c.s.Finish(ctx, stdin, max, stderr)
	return runResult(r), err
}

// FinishFramed makes a started container a sandbox.FramedStarted.
func (c startedContainer) FinishFramed(ctx context.Context, stdin []byte, max int64, stderr io.Writer, accept func([]byte) bool) (host.RunResult, error) {
	r, err := c.s.FinishFramed(ctx, stdin, max, stderr, accept)
	return runResult(r), err
}
func (c startedContainer) Close() { c.s.Close() }

// Stream makes a started toolbox container a host.StreamStarted (run standbys).
func (c startedContainer) Stream(ctx context.Context, stdin []byte, stdout, stderr io.Writer) (int64, error) {
	return c.s.Stream(ctx, stdin, stdout, stderr)
}

// Attach, Pause and Unpause make the driver a sandbox.SessionContainers
// (without them the session kind refuses every create).
var _ sandbox.SessionContainers = dockerEngine{}

func (e dockerEngine) Attach(ctx context.Context, id string, stdout, stderr io.Writer) (sandbox.SessionStream, error) {
	s, err := e.d.Start(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.Duplex(stdout, stderr), nil
}
func (e dockerEngine) Pause(ctx context.Context, id string) error   { return e.d.Pause(ctx, id) }
func (e dockerEngine) Unpause(ctx context.Context, id string) error { return e.d.Unpause(ctx, id) }

func (e dockerEngine) Kill(ctx context.Context, id string) error   { return e.d.Kill(ctx, id) }
func (e dockerEngine) Remove(ctx context.Context, id string) error { return e.d.Remove(ctx, id) }
func (e dockerEngine) Ping(ctx context.Context) error              { return e.d.Ping(ctx) }
func (e dockerEngine) ImagePresent(ctx context.Context, ref string) (bool, error) {
	return e.d.ImagePresent(ctx, ref)
}
func (e dockerEngine) LoadImage(ctx context.Context, p string) error { return e.d.LoadImage(ctx, p) }
func (e dockerEngine) Observe(f func(string, time.Duration))         { e.d.Observe = f }
func (e dockerEngine) Close() error                                  { return e.d.Close() }

func lookupGID(name string) int {
	gid, err := config.ProcessEnv().LookupGroup(name)
	if err != nil {
		return 0
	}
	return gid
}

func serve(ctx context.Context, g *globals, listen string) error {
	cfg, err := config.Load(g.config)
	if err != nil {
		return &exitError{code: ExitConfig, err: err}
	}
	log := newLogger(g, cfg.LogLevel)
	slog.SetDefault(log)
	ln, err := listener(g, listen)
	if err != nil {
		return err
	}
	defer ln.Close()

	var driver *container.Driver
	var units *unitctl.Manager
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	brokerGID := lookupGID(layout.BrokerUser)
	if brokerGID == 0 {
		log.Warn("group not found; policy files keep policyDir's group", "group", layout.BrokerUser)
	}
	d := &host.Daemon{
		Config: cfg, Env: config.ProcessEnv(), Listener: ln, Logger: log, Registry: reg, BrokerGID: brokerGID,
		Notify: func(state string) {
			if _, err := daemon.SdNotify(false, state); err != nil {
				log.Warn("sd_notify failed", "err", err)
			}
		},
		ConnectEngine: func(ctx context.Context) (host.Engine, error) {
			var err error
			driver, err = container.New(cfg.DockerHost)
			if err != nil {
				return nil, err
			}
			return dockerEngine{driver}, nil
		},
		ConnectUnits: func(ctx context.Context) (host.UnitManager, error) {
			var err error
			// The connection lives as long as the daemon: pass the root ctx.
			units, err = unitctl.Connect(context.WithoutCancel(ctx))
			return units, err
		},
		Reap: func(ctx context.Context, _ host.Engine, _ host.UnitManager) error {
			r := &reaper.Reaper{
				Installation: cfg.Installation, RunRoot: cfg.RunRoot, PolicyDir: cfg.PolicyDir,
				Grace:      time.Duration(cfg.Reaper.GraceSeconds) * time.Second,
				Containers: driver, Units: units, Log: log,
				// At startup nothing is live: an empty, known set.
				Active: func(context.Context) (map[string]bool, bool, error) { return map[string]bool{}, true, nil },
			}
			sum, err := r.Reap(ctx)
			log.Info("startup reap finished", "summary", sum)
			return err
		},
		DiscoverTools: func(ctx context.Context, s config.MCP) ([]protocol.ToolSpec, error) {
			tools, err := mcp.ListTools(ctx, mcpServer(s), "", mcp.Options{})
			if err != nil {
				return nil, err
			}
			out := make([]protocol.ToolSpec, 0, len(tools))
			for _, t := range tools {
				out = append(out, protocol.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
			}
			return out, nil
		},
	}
	return d.Serve(ctx)
}

func mcpServer(s config.MCP) policy.MCPServer {
	names := make([]string, 0, len(s.Tools))
	for _, t := range s.Tools {
		names = append(names, t.Name)
	}
	return policy.MCPServer{Name: s.Name, URL: s.URL, Credential: s.Credential, Session: s.Session, Tools: names, AllowHTTP: s.AllowInsecureLoopbackHTTP}
}

var _ = strconv.Itoa

var _ host.WarmContainers = dockerEngine{}
