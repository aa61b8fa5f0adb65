package coderun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/gate"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// Run standbys (DESIGN.md section 10, runs.standby): per declared shape
// (project or none, setup or not) one toolbox container created and
// started ahead of its run, its supervisor blocked reading its job on
// stdin, under a run uid slot taken at preparation (and, for a setup
// shape, the slot's project gate handed to that uid). A run of that shape
// binds it: its job goes on stdin, so its first output needs no container
// start. Guarantees, as for turn standbys (package standby): a run standby
// serves one run, never two; it is discarded unused at its maximum age
// (and replaced), when found dead at bind time (the run then takes the
// cold path), and at host stop; host start removes every one left (the
// startup reap) before new ones are made. Network runs never use one.
//
// Reaper: the container carries the standby label with its expiry (also its
// deadline label) and a deadline record in the policy directory (a
// placeholder policy without credentials that no broker reads): binding
// rewrites the record with the run's deadline, which outranks the label, as
// a bound turn standby's policy does. The host lists a standby's id from
// before its preparation until the run that bound it has been cleaned up.

// runWarm is one ready run standby.
type runWarm struct {
	sandbox.Standby // Alive; Discard below frees the slot too
	k               *Kind
	h               *sandbox.Handle
	shape           config.RunShape
	slot            int
	uid             int
	started         sandbox.StreamStarted // Standby.Started, streaming
}

// Discard removes the standby as a run's cleanup removes a run, then frees
// its slot.
func (w *runWarm) Discard(reason string) {
	w.Standby.Discard(reason)
	w.k.slots.Give(w.slot)
}

// newStandbys makes the run standby pool when shapes are declared, runs
// are on and the driver can start a container apart from streaming it.
func (k *Kind) newStandbys(reg prometheus.Registerer) {
	c := k.cfg.Runs
	w, ok := k.life.Containers().(sandbox.WarmContainers)
	_, streams := k.life.Containers().(sandbox.RunContainers)
	if !ok || !streams || !c.Enabled || len(c.Standby.Shapes) == 0 || c.Standby.Max <= 0 {
		return
	}
	// The key fingerprints the whole configuration (image, limits, runtime,
	// projects): the host reads it once, so a change means a restart, which
	// discards every standby anyway; the key makes the fit a checked fact.
	data, err := json.Marshal(k.cfg)
	if err != nil {
		k.log.Warn("run standbys off: the configuration cannot be fingerprinted", "err", err)
		return
	}
	sum := sha256.Sum256(data)
	k.warm, k.standbyKey = w, hex.EncodeToString(sum[:])
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandbox_run_standby_events_total",
		Help: "Run standby events: hit, miss (reason), prepared, prepare_failed, discard (reason), capped.",
	}, []string{"event", "reason"})
	reg.MustRegister(events)
	k.standbys = standby.New(standby.Options{
		Max: c.Standby.Max, MaxAge: time.Duration(c.Standby.MaxAgeSeconds) * time.Second, Renew: true,
		Prepare: k.prepareStandby, NewTurnID: ids.NewTurnID, Now: k.now,
		Event: func(event, reason string) { events.WithLabelValues(event, reason).Inc() },
		Log:   k.log,
	})
}

// WarmUp prepares a standby of every declared shape, up to
// runs.standby.max. The host calls it once it serves: after its startup
// reap, which would remove anything made before.
func (k *Kind) WarmUp() {
	if k.standbys == nil {
		return
	}
	for _, s := range k.cfg.Runs.Standby.Shapes {
		k.standbys.Refill(s.Name(), k.standbyKey)
	}
}

// CloseStandbys discards every run standby and waits for it (host stop,
// after the runs ended).
func (k *Kind) CloseStandbys() {
	if k.standbys != nil {
		k.standbys.Close()
	}
}

// StandbyPool is the run standby pool (nil: none).
func (k *Kind) StandbyPool() *standby.Pool { return k.standbys }

// shapeNamed is the declared shape of a pool name.
func (k *Kind) shapeNamed(name string) (config.RunShape, bool) {
	for _, s := range k.cfg.Runs.Standby.Shapes {
		if s.Name() == name {
			return s, true
		}
	}
	return config.RunShape{}, false
}

// takeStandby hands a run its shape's ready standby, if any (never for a
// network run), and starts preparing the shape's next one at once. The
// lease must be released after the run's cleanup.
func (k *Kind) takeStandby(ctx context.Context, project string, setup, network bool) (*runWarm, *standby.Lease) {
	if k.standbys == nil || network {
		return nil, nil
	}
	shape, ok := k.cfg.Runs.RunStandbyShape(project, setup)
	if !ok {
		return nil, nil
	}
	lease, _ := k.standbys.Take(ctx, shape.Name(), k.standbyKey)
	if k.host.Stopped().Err() == nil {
		k.standbys.Refill(shape.Name(), k.standbyKey)
	}
	if lease == nil {
		return nil, nil
	}
	return lease.Warm.(*runWarm), lease
}

// prepareStandby is standby.PrepareFunc: the cold path's preparation up to
// a started container, under a slot of its own and with the deadline
// record in place. Whatever fails is removed, and the slot freed.
func (k *Kind) prepareStandby(ctx context.Context, name, _, id string, expiry time.Time) (_ standby.Warm, err error) {
	shape, ok := k.shapeNamed(name)
	if !ok {
		return nil, fmt.Errorf("run shape %s is not declared", name)
	}
	// A global slot for the preparation's work (Docker), granted only when
	// nothing waits for one; the ready standby holds none.
	release, err := k.host.SpareSlot(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for a spare slot: %w", err)
	}
	defer release()
	h := &sandbox.Handle{ID: id, Channel: ids.RunName(id), Tag: ids.RunName(id), Deadline: expiry, Quiet: true}
	log := k.log.With("run_standby", id, "shape", name)
	slot := k.slots.Take()
	var started sandbox.StartedContainer
	defer func() {
		if err == nil {
			return
		}
		if started != nil {
			started.Close()
		}
		if cerr := k.life.Cleanup(h, log); cerr != nil {
			err = errors.Join(err, cerr)
		}
		k.slots.Give(slot)
	}()
	if h.Container, err = ids.ContainerName(h.Channel, id); err != nil {
		return nil, err
	}
	uid, err := k.host.GuestUID(ids.RunSlot(slot))
	if err != nil {
		return nil, fmt.Errorf("guest uid: %w", err)
	}
	workspace, err := k.Workspace(shape.Project)
	if err != nil {
		return nil, fmt.Errorf("project: %w", err)
	}
	gateDir := ""
	if shape.Setup {
		if gateDir, err = gate.Prepare(k.cfg.WorkspaceRoot, slot, uid, k.lchown); err != nil {
			return nil, fmt.Errorf("project gate: %w", err)
		}
	}
	if h.Policy, err = layout.PolicyFile(k.cfg.PolicyDir, id); err != nil {
		return nil, err
	}
	if err := k.writeDeadline(h, expiry); err != nil {
		return nil, err
	}
	labels := sandbox.Labels(k.cfg.Installation, id, h.Tag, expiry)
	labels[layout.LabelStandby] = strconv.FormatInt(expiry.Unix(), 10)
	spec := k.runSpec(h, uid, workspace, gateDir, shape.Setup, labels)
	h.CreateTried = true
	if h.ContainerID, err = k.life.Containers().Create(ctx, spec); err != nil {
		return nil, fmt.Errorf("container create: %w", err)
	}
	if started, err = k.warm.Start(ctx, h.ContainerID); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	streamer, ok := started.(sandbox.StreamStarted)
	if !ok {
		return nil, errors.New("the driver's started container cannot stream a run")
	}
	log.Debug("run standby ready", "expires", expiry.UTC().Format(time.RFC3339))
	return &runWarm{k: k, h: h, shape: shape, slot: slot, uid: uid, started: streamer, Standby: sandbox.Standby{
		Life: k.life, Warm: k.warm, Handle: h, Started: streamer, Log: log, Name: "run standby",
	}}, nil
}

// writeDeadline writes (binding: rewrites) the standby's deadline record.
func (k *Kind) writeDeadline(h *sandbox.Handle, deadline time.Time) error {
	data, err := (&policy.Pending{Version: policy.Version, TurnID: h.ID, Pending: true, DeadlineUnixMs: deadline.UnixMilli()}).Marshal()
	if err != nil {
		return fmt.Errorf("deadline record: %w", err)
	}
	return k.life.WritePolicyFile(h, data)
}

// streamFunc runs a run's job in its container: Stream of a started
// standby, or RunContainers.Stream (attach and start) on the cold path.
type streamFunc func(ctx context.Context, stdin []byte, stdout, stderr io.Writer) (int64, error)
