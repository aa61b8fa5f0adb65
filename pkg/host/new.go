package host

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/toolset"
)

// New checks the options and prepares the turn-independent parts of every
// policy and turn, validating them now rather than at the first guest message.
// The lifecycle fills its own options' defaults (removal bounds, worker
// logs, ChownTree).
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
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 10 * time.Second
	}
	if o.Machine == nil {
		m := config.ReadMachine()
		o.Machine = &m
	}
	adm, starts := o.Config.GlobalConcurrency(*o.Machine), o.Config.StartConcurrency(*o.Machine)
	h := &Host{
		opts: o, cfg: o.Config, log: o.Logger, state: o.State, reg: o.Registry,
		queue: admission.New(o.Config.Queue.Depth, adm.Cap, ErrShuttingDown), admission: adm,
		starts: admission.NewStarts(starts.Cap, ErrShuttingDown), startAdm: starts,
		active: map[string]*activeTurn{}, fresh: map[string]uint64{},
		fleet: o.Fleet,
	}
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
		CleanupFailed: func(kind, stage string) { h.metrics.cleanupFailures.WithLabelValues(kind, stage).Inc() },
	})
	if err := h.prepareStatic(); err != nil {
		return nil, err
	}
	if err := h.makeKinds(); err != nil {
		return nil, err
	}
	if o.Fleet != nil {
		// A fleet turn's workspace moves through the kind that runs
		// sealed turns (kind.WorkspaceMover).
		ws := Kind[kind.WorkspaceMover](h)
		if ws == nil {
			return nil, errors.New("host: fleet mode needs a kind that moves a channel's workspace")
		}
		h.fl = fleetside.New(fleetside.Options{Fleet: o.Fleet, Host: fleetHost{h}, Workspaces: ws, Config: o.Config, Closed: ErrShuttingDown, State: o.State,
			ChannelMode: h.channelMode, Registry: o.Registry, Logger: o.Logger, Now: o.Now, NewTurnID: o.NewTurnID})
	}
	h.routes = h.routeTable()
	return h, nil
}

// prepareStatic builds the public tool specs and the policy template
// (pkg/toolset; the sealed turn validates both with a sample turn).
func (h *Host) prepareStatic() error {
	set, err := toolset.New(h.cfg, h.opts.MCPTools)
	if err != nil {
		return err
	}
	h.tools, h.mcpSpecs, h.pol = set.Tools, set.MCP, set.Policy
	return nil
}

// makeKinds makes every kind of the registry, in its order, from what the
// host hands every kind.
func (h *Host) makeKinds() error {
	o := h.opts
	d := kind.Deps{
		Config: h.cfg, Lifecycle: h.life, Host: kindHost{h}, Logger: h.log, Now: o.Now, NewID: o.NewTurnID,
		UID: o.UID, GID: o.GID, Lchown: o.Lchown, Tools: h.tools, MCP: h.mcpSpecs, Policy: h.pol,
		Registry: h.reg, Observe: h.ObservePhase, Fleet: h.fleet, Tuning: o.Tuning,
	}
	h.turnKinds = map[string]kind.ChannelTurns{}
	for _, r := range registry {
		d.Lifecycle = h.life.For(r.Name) // its cleanup failures counted under its name
		k, err := r.New(d)
		if err != nil {
			return err
		}
		h.kinds = append(h.kinds, k)
		d.Made = h.kinds
		if t, ok := k.(kind.ChannelTurns); ok {
			h.turnKinds[t.Mode()] = t
		}
	}
	return nil
}
