package host

import (
	"context"
	"errors"
	"fmt"
	"github.com/roundtable-sandbox/sandbox/pkg/toolset"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Engine is the Docker side of the daemon: turns plus startup checks.
type Engine interface {
	Containers
	Ping(ctx context.Context) error
	ImagePresent(ctx context.Context, ref string) (bool, error)
	LoadImage(ctx context.Context, archivePath string) error
	// Observe receives the driver's own phase durations (attach, start, wait).
	Observe(func(phase string, took time.Duration))
	Close() error
}

// UnitManager is the systemd side of the daemon.
type UnitManager interface {
	Units
	Close()
}

// ErrStartup is the category of every refusal to start.
var ErrStartup = errors.New("sandbox-host cannot start")

// Daemon wires the startup sequence of `sandbox-host serve`, modeled on
// containerd: every subsystem is up (lock, state, Docker, image, D-Bus,
// startup reap) before READY=1, and they are closed in reverse order.
type Daemon struct {
	Config   *config.Config
	Env      config.Env
	Listener net.Listener
	Logger   *slog.Logger
	// Notify sends sd_notify states (READY=1, STOPPING=1, STATUS=...).
	Notify        func(state string)
	ConnectEngine func(ctx context.Context) (Engine, error)
	ConnectUnits  func(ctx context.Context) (UnitManager, error)
	// Reap removes everything of this installation left by a previous run;
	// at startup no turn is active.
	Reap func(ctx context.Context, e Engine, u UnitManager) error
	// DiscoverTools lists a discover: true server's tools (no credential).
	DiscoverTools func(ctx context.Context, s config.MCP) ([]protocol.ToolSpec, error)
	BrokerGID     int
	Registry      *prometheus.Registry
	// StartupTimeout bounds everything before READY (default 2 minutes).
	StartupTimeout time.Duration
	// Options are passed to New (tests set timings and fakes' ids there).
	Options Options
	// ConnectFleet dials the fleet when fleet.enabled (ConnectFleet by
	// default); never called otherwise.
	ConnectFleet func(ctx context.Context, f config.Fleet, log *slog.Logger) (*nats.Conn, error)
}

func startupErr(step string, err error) error {
	return fmt.Errorf("%s: %w (%w)", step, err, ErrStartup)
}

// Serve runs the daemon until ctx ends.
func (d *Daemon) Serve(ctx context.Context) (err error) {
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	notify := d.Notify
	if notify == nil {
		notify = func(string) {}
	}
	cfg := d.Config
	timeout := d.StartupTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if d.Env.UID == 0 || d.Env.GOOS != "linux" { // before creating anything
		return startupErr("configuration", cfg.CheckHost(d.Env))
	}
	if err := cfg.EnsureDirs(); err != nil {
		return startupErr("directories", err)
	}
	if err := cfg.CheckHost(d.Env); err != nil {
		return startupErr("configuration", err)
	}
	access, err := cfg.ResolveAccess(d.Env)
	if err != nil {
		return startupErr("api access", err)
	}
	if err := CheckPolicyGroup(cfg.PolicyDir, d.BrokerGID); err != nil {
		return startupErr("policyDir", err)
	}
	lock, err := AcquireLock(cfg.LockFile)
	if err != nil {
		return startupErr("lock", err)
	}
	defer lock.Release()
	state, seeded, err := LoadState(cfg.StateFile, cfg.InitialChannels)
	if err != nil {
		return startupErr("state", err)
	}
	if seeded {
		log.Info("state file created from initialChannels", "path", cfg.StateFile, "channels", len(cfg.InitialChannels))
	}

	notify("STATUS=connecting to Docker")
	engine, err := d.ConnectEngine(sctx)
	if err != nil {
		return startupErr("docker", err)
	}
	defer engine.Close()
	if err := engine.Ping(sctx); err != nil {
		return startupErr("docker ping", err)
	}
	if err := ensureImage(sctx, engine, cfg, log); err != nil {
		return startupErr("image", err)
	}

	notify("STATUS=connecting to systemd")
	units, err := d.ConnectUnits(sctx)
	if err != nil {
		return startupErr("systemd D-Bus", err)
	}
	defer units.Close()

	if d.Reap != nil {
		notify("STATUS=removing leftovers of earlier runs")
		if err := d.Reap(sctx, engine, units); err != nil {
			return startupErr("startup reap", err)
		}
	}
	discovered := map[string][]protocol.ToolSpec{}
	for _, s := range cfg.MCP {
		if !s.Discover {
			continue
		}
		if d.DiscoverTools == nil {
			return startupErr("mcp discovery", fmt.Errorf("mcp %s: discovery is not available", s.Name))
		}
		specs, err := toolset.Discovered(sctx, s, d.DiscoverTools)
		if err != nil {
			return startupErr("mcp discovery", err)
		}
		discovered[s.Name] = specs
	}

	opts := d.Options
	if cfg.Fleet.Enabled {
		notify("STATUS=joining the fleet")
		nc, f, err := d.joinFleet(sctx, cfg.Fleet, log)
		if err != nil {
			return startupErr("fleet", err)
		}
		defer nc.Close()
		opts.Fleet = f
	}
	opts.Config, opts.Access, opts.State = cfg, access, state
	opts.Containers, opts.Units, opts.Logger = engine, units, log
	opts.Registry, opts.BrokerGID, opts.MCPTools = d.Registry, d.BrokerGID, discovered
	opts.Notify = notify
	h, err := New(opts)
	if err != nil {
		return startupErr("host", err)
	}
	engine.Observe(h.ObservePhase)
	if opts.Fleet != nil {
		var peers []string
		for _, b := range cfg.Fleet.Server.Boxes {
			peers = append(peers, b.Name)
		}
		box, err := fleet.NewBox(opts.Fleet, fleet.BoxOptions{Name: cfg.Fleet.Box, Executor: h.fleetExecutorFor(), Logger: log, Peers: peers, OnEvent: h.fl.Event})
		if err != nil {
			return startupErr("fleet", err)
		}
		follow, stopFollow := context.WithCancel(ctx)
		defer stopFollow()
		if err := h.fl.Follow(sctx, follow); err != nil {
			return startupErr("fleet", err)
		}
		if err := box.Start(sctx); err != nil {
			return startupErr("fleet", err)
		}
		// The box leaves its partitions as soon as the host stops, so its
		// turns go to the other boxes rather than bounce off this one.
		defer box.Stop()
		defer context.AfterFunc(ctx, box.Stop)()
		var starters []fleetjobs.Starter
		for _, k := range h.kinds {
			if f, ok := k.(kind.FleetStarter); ok {
				starters = append(starters, f.StartFleet)
			}
		}
		stopJobs, err := fleetjobs.StartAll(sctx, h.queue.SpareYielding, starters...)
		if err != nil {
			return startupErr("fleet", err)
		}
		defer stopJobs()
	}

	notify("READY=1")
	notify("STATUS=serving")
	log.Info("sandbox-host ready", "installation", cfg.Installation, "image", cfg.Image, "pid", os.Getpid(),
		"guest_uids", fmt.Sprintf("%d..%d", cfg.Guests.UIDBase, cfg.Guests.UIDBase+cfg.Guests.UIDCount-1),
		"global_concurrency", h.admission.Cap, "global_concurrency_from", h.admission.Why,
		"start_concurrency", h.startAdm.Cap, "start_concurrency_from", h.startAdm.Why, "queue_max_wait_s", cfg.Queue.MaxWaitSeconds)
	if ok, err := HasCapChown(); err == nil && !ok {
		log.Warn("sandbox-host lacks CAP_CHOWN: a new channel's workspace cannot be handed to its guest uid, so its turns fail; the shipped unit grants it (AmbientCapabilities=CAP_CHOWN)")
	}
	return h.Run(ctx, d.Listener)
}

// joinFleet connects and ensures the fleet's resources (fleet.Open).
func (d *Daemon) joinFleet(ctx context.Context, fc config.Fleet, log *slog.Logger) (*nats.Conn, *fleet.Fleet, error) {
	connect := d.ConnectFleet
	if connect == nil {
		connect = ConnectFleet
	}
	nc, err := connect(ctx, fc, log)
	if err != nil {
		return nil, nil, err
	}
	f, err := fleet.Open(ctx, nc, fleetside.Layout(fc))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("fleet resources at %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	log.Info("fleet mode: joined", "box", fc.Box, "server", nc.ConnectedUrlRedacted(), "partitions", fc.Partitions, "replicas", fc.Replicas)
	return nc, f, nil
}

// ensureImage never pulls: the image must exist, or be loaded from the
// archive the package ships.
func ensureImage(ctx context.Context, e Engine, cfg *config.Config, log *slog.Logger) error {
	ok, err := e.ImagePresent(ctx, cfg.Image)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	if _, err := os.Stat(cfg.ImageArchive); err != nil {
		return fmt.Errorf("image %s is not present and imageArchive %s cannot be read (%v); add it with: docker load -i <worker-image.tar> (the package ships %s)", cfg.Image, cfg.ImageArchive, err, cfg.ImageArchive)
	}
	log.Info("loading worker image", "archive", cfg.ImageArchive)
	if err := e.LoadImage(ctx, cfg.ImageArchive); err != nil {
		return fmt.Errorf("load %s: %w", cfg.ImageArchive, err)
	}
	if ok, err := e.ImagePresent(ctx, cfg.Image); err != nil || !ok {
		return fmt.Errorf("image %s still missing after loading %s; the archive must carry that tag", cfg.Image, cfg.ImageArchive)
	}
	return nil
}

// CheckPolicyGroup requires policyDir to carry the broker's group (brokerGID;
// 0 = no such group, nothing to check) so the policy files written into it
// are readable by the broker: the package makes it setgid _sandbox-broker.
func CheckPolicyGroup(policyDir string, brokerGID int) error {
	if brokerGID <= 0 {
		return nil
	}
	st, err := os.Stat(policyDir)
	if err != nil {
		return err
	}
	if gid, ok := sandbox.FileGroup(st); !ok || gid != brokerGID {
		return fmt.Errorf("%s must belong to group %d (_sandbox-broker), setgid, so brokers can read their policies: chgrp _sandbox-broker %s && chmod 2750 %s", policyDir, brokerGID, policyDir, policyDir)
	}
	return nil
}
