package turns

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// EngineRunner runs one turn container exactly as the host's container
// driver does (pkg/container: create, attach, start, stdin, stdout, wait,
// remove) with no D-Bus, no broker unit and no API in front, and records the
// driver's own phase durations per run. It separates Docker's share of a
// host turn from the host's orchestration.
type EngineRunner struct {
	Label   string
	Driver  *container.Driver
	Spec    container.Spec // Name and Labels are filled per run
	Channel string
	Stdin   []byte
	// Starter, when set, makes this the pre-started variant: a container is
	// created and started off the clock (its worker blocks reading stdin)
	// and a run times only what a turn would still pay: attach, write stdin,
	// read the reply, wait. Removal and the next standby are off the clock.
	Starter func(ctx context.Context, id string) error

	mu      sync.Mutex
	phases  map[string][]float64
	standby string
}

// Engine phases besides the driver's own.
const (
	EnginePhaseCreate = "create"
	EnginePhaseRemove = "remove"
)

// Name is the series name.
func (r *EngineRunner) Name() string { return r.Label }

// ResetPhases drops the phases recorded so far (after warm-up).
func (r *EngineRunner) ResetPhases() {
	r.mu.Lock()
	r.phases = nil
	r.mu.Unlock()
}

// Phases returns the recorded phase durations (ms) of successful runs.
func (r *EngineRunner) Phases() map[string][]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phases
}

// nextSpec is the spec of a fresh container (new turn id and name).
func (r *EngineRunner) nextSpec() (container.Spec, error) {
	turn := ids.NewTurnID()
	name, err := ids.ContainerName(r.Channel, turn)
	if err != nil {
		return container.Spec{}, err
	}
	spec := r.Spec
	spec.Name = name
	spec.LogTag = ids.LogTag(r.Channel)
	spec.Labels = map[string]string{
		layout.LabelInstallation: "bench",
		layout.LabelTurn:         turn,
		layout.LabelChannel:      ids.ChannelTag(r.Channel),
		layout.LabelDeadline:     strconv.FormatInt(time.Now().Add(10*time.Minute).Unix(), 10),
	}
	return spec, nil
}

// prestart creates and starts a standby container.
func (r *EngineRunner) prestart(ctx context.Context, spec container.Spec) (string, error) {
	id, err := r.Driver.Create(ctx, spec)
	if err != nil {
		return "", err
	}
	if err := r.Starter(ctx, id); err != nil {
		rmCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.Driver.Remove(rmCtx, id)
		cancel()
		return "", err
	}
	return id, nil
}

// Close removes a standby container left by the pre-started variant.
func (r *EngineRunner) Close() {
	if r.standby != "" {
		rmCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = r.Driver.Remove(rmCtx, r.standby)
		cancel()
		r.standby = ""
	}
}

// Run runs one container.
func (r *EngineRunner) Run(ctx context.Context, _ int) (time.Duration, error) {
	spec, err := r.nextSpec()
	if err != nil {
		return 0, err
	}
	local := map[string]float64{}
	r.Driver.Observe = func(phase string, took time.Duration) { local[phase] = stats.Ms(took) }
	var id string
	var d time.Duration
	var runErr, rmErr error
	var res container.Result
	if r.Starter != nil {
		if r.standby == "" {
			if r.standby, err = r.prestart(ctx, spec); err != nil {
				return 0, fmt.Errorf("%s: %v", r.Label, err)
			}
		}
		id, r.standby = r.standby, ""
		start := time.Now()
		// The container runs already: the driver's start is a no-op (304).
		res, runErr = r.Driver.Run(ctx, id, r.Stdin, protocol.MaxReplyBytes)
		d = time.Since(start)
		rmCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rmErr = r.Driver.Remove(rmCtx, id)
		cancel()
		if next, err := r.nextSpec(); err == nil {
			r.standby, _ = r.prestart(ctx, next)
		}
	} else {
		start := time.Now()
		t := start
		id, err = r.Driver.Create(ctx, spec)
		if err != nil {
			return time.Since(start), fmt.Errorf("%s: %v", r.Label, err)
		}
		local[EnginePhaseCreate] = stats.Ms(time.Since(t))
		res, runErr = r.Driver.Run(ctx, id, r.Stdin, protocol.MaxReplyBytes)
		t = time.Now()
		rmCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rmErr = r.Driver.Remove(rmCtx, id)
		cancel()
		local[EnginePhaseRemove] = stats.Ms(time.Since(t))
		d = time.Since(start)
	}
	if runErr != nil || rmErr != nil {
		return d, fmt.Errorf("%s: run: %v, remove: %v", r.Label, runErr, rmErr)
	}
	if res.ExitCode != 0 {
		return d, fmt.Errorf("%s: worker exit %d: %w", r.Label, res.ExitCode, ErrReply)
	}
	rep, err := protocol.DecodeReply(res.Stdout)
	if err != nil || !rep.OK {
		return d, fmt.Errorf("%s: reply %v: %w", r.Label, err, ErrReply)
	}
	r.mu.Lock()
	if r.phases == nil {
		r.phases = map[string][]float64{}
	}
	for k, v := range local {
		r.phases[k] = append(r.phases[k], v)
	}
	r.mu.Unlock()
	return d, nil
}
