package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
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
	if o.Fleet != nil {
		h.fl = fleetside.New(fleetside.Options{Fleet: o.Fleet, Host: fleetHost{h}, Config: o.Config, Closed: ErrShuttingDown, State: o.State,
			ChannelMode: h.channelMode, Registry: o.Registry, Logger: o.Logger, Now: o.Now, NewTurnID: o.NewTurnID})
	}
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
		Config: o.Config, Lifecycle: h.life, Host: kindHost{h}, Logger: o.Logger, Now: o.Now, Lchown: o.Lchown, Registry: o.Registry, Fleet: o.Fleet, Box: o.Config.Fleet.Box,
	})
	if err := h.prepareStatic(); err != nil {
		return nil, err
	}
	h.rich = richsession.New(richsession.Options{
		Config: o.Config, Lifecycle: h.life, Host: kindHost{h}, Logger: o.Logger, Now: o.Now, NewID: o.NewTurnID,
		Tools: h.tools, MCP: h.mcpSpecs, Policy: h.pol, Control: o.RichControl, Idle: o.RichIdle, Registry: o.Registry,
		ReplyBudget: cmp.Or(o.RichReplyBudget, o.Config.Rich.ReplyBudgetBytes), BudgetWait: o.RichBudgetWait,
	})
	h.prechecks = precheckrun.New(precheckrun.Options{
		Config: o.Config, Lifecycle: h.life, Host: kindHost{h}, Logger: o.Logger, Now: o.Now, NewID: o.NewTurnID,
		Policy: h.pol, Registry: o.Registry, Fleet: o.Fleet, Box: o.Config.Fleet.Box,
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
	h.kinds = h.kindList()
	h.routes = h.routeTable()
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
