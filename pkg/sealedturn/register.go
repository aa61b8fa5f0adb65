package sealedturn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
)

// Registration registers the sealed turn with the host: it runs the turns
// of channels in sandbox mode (mode "on") and the research turns of
// delegated jobs.
var Registration = kind.Registration{Name: "sealedturn", New: register, Zero: (*Kind)(nil)}

func register(d kind.Deps) (kind.Kind, error) {
	m := newStandbyMetrics(d.Registry)
	k, err := New(Options{
		Config: d.Config, Lifecycle: d.Lifecycle, Host: d.Host, Logger: d.Logger, Now: d.Now, NewID: d.NewID,
		Tools: d.Tools, MCP: d.MCP, Policy: d.Policy, StandbyEvent: m.event, Observe: d.Observe,
	})
	if err != nil {
		return nil, err
	}
	if err := k.checkSample(); err != nil {
		return nil, err
	}
	if err := k.prepareResearch(); err != nil {
		return nil, err
	}
	return k, nil
}

// checkSample validates the policy and worker turn of a sample turn, now
// rather than at the first guest message.
func (k *Kind) checkSample() error {
	sample := &Turn{Handle: sandbox.Handle{ID: ids.NewTurnID(), Channel: ids.PreflightChannel}, Speaker: protocol.Speaker{ID: "preflight"}}
	p := k.PolicyFor(sample, k.now().Add(k.cfg.TurnDeadline()))
	if err := p.Validate(); err != nil {
		return fmt.Errorf("host: configuration makes an invalid broker policy: %w", err)
	}
	if _, err := k.TurnJSON(sample, false); err != nil {
		return fmt.Errorf("host: configuration makes an invalid worker turn: %w", err)
	}
	return nil
}

// Mode: a sealed turn serves channels in sandbox mode.
func (k *Kind) Mode() string { return chanstate.ModeOn }

// CheckMode: sandbox mode takes no profile.
func (k *Kind) CheckMode(profile string) error {
	if profile != "" {
		return errors.New(`profile is for mode "rich" only`)
	}
	return nil
}

// TurnTimeout is the turn deadline (turnTimeoutSeconds).
func (k *Kind) TurnTimeout(string) (time.Duration, error) { return k.cfg.TurnDeadline(), nil }

// RunChannelTurn runs one admitted turn to the end of its cleanup: on the
// channel's standby when one is ready (the turn then runs under the
// standby's id), else on the cold path; the channel's next standby is
// prepared once this turn runs. A successful reply is answered (Answer)
// before the cleanup; a failed cleanup holds the channel (hold.go).
func (k *Kind) RunChannelTurn(ctx context.Context, in *kind.Turn) kind.Outcome {
	// A channel whose previous turn's cleanup failed runs nothing beside
	// what it may have left (hold.go).
	if err := k.retryHeld(in.Channel); err != nil {
		return kind.Outcome{ID: in.ID, RunErr: err, Log: k.log.With("turn", in.ID, "channel", ids.ChannelTag(in.Channel)), Failed: "turn refused"}
	}
	t := &Turn{
		Handle:    sandbox.Handle{ID: in.ID, Channel: in.Channel, Tag: ids.ChannelTag(in.Channel), Deadline: in.Deadline},
		Speaker:   in.Speaker,
		Principal: in.Principal, Text: in.Text, Reset: in.Reset,
	}
	k.TakeStandby(ctx, t, func(id string) {
		in.Rebind(id)
		t.ID = id
	})
	log := k.log.With("turn", t.ID, "channel", t.Tag)
	o := kind.Outcome{Log: log, Failed: "turn failed"}
	reply, runErr := k.Execute(ctx, t)
	if runErr != nil && t.UnitTried {
		// A worker whose socket-activated broker never started sees only
		// a reset connection; systemd knows which unit failed and why.
		// Asked now: cleanup stops the units, and systemd forgets them.
		if _, ok := unitctl.AsUnitError(runErr); !ok {
			if why := k.life.ExplainUnits(t.ID); why != nil {
				runErr = fmt.Errorf("%w (worker: %w)", why, runErr)
			}
		}
	}
	if runErr == nil && in.Answer != nil {
		// The turn stays listed (its container and units still exist, the
		// reaper must keep them) but is no longer cancellable.
		since := time.Now()
		in.Answer(reply, t.ID)
		t.Phase(k.life, PhaseAnswer, since)
		o.Answered = true
	}
	// The next standby's preparation, if the turn ran and PrepareAfter did
	// not start it yet: only now, after the answer, so it never slows it.
	if t.prepareTimer != nil {
		k.prepareNow(t)
	}
	o.CleanupErr = k.Cleanup(t, log)
	if o.CleanupErr != nil {
		k.hold(t, log)
	}
	// The channel's next turn should find a standby: prepared while this
	// one ran, or now, in the background, if it never ran.
	k.Refill(t)
	var exit *ExitError
	if errors.As(runErr, &exit) {
		o.FailedAttrs = append(o.FailedAttrs, "exit_code", exit.Status, "worker_cause", exit.Cause)
	}
	if ue, ok := unitctl.AsUnitError(runErr); ok {
		o.FailedAttrs = append(o.FailedAttrs, "failed_unit", ue.Failed, "unit_result", ue.Result, "job_result", ue.JobResult, "unit_limit", ue.Limit)
	}
	o.ID, o.Reply, o.RunErr = t.ID, reply, runErr
	o.Done = []any{"standby", t.Warm()}
	o.Phases = t.Phases()
	return o
}

// ChannelReport is the channel's standby (none for a rich channel).
func (k *Kind) ChannelReport(channel, mode string) kind.Report {
	if k.standbys == nil || mode == chanstate.ModeRich {
		return kind.Report{}
	}
	sb := k.standbys.State(channel)
	return kind.Report{Standby: sb.State, StandbyExpires: sb.Expiry}
}

// prepareResearch takes the research tools of delegated jobs
// (delegation.*) and validates a sample research turn.
func (k *Kind) prepareResearch() error {
	d := k.cfg.Delegation
	if !d.Enabled {
		return nil
	}
	k.research.Prompt = d.Prompt
	for i, t := range k.cfg.Tools {
		if t.Name == d.FetchTool || (d.SearchTool != "" && t.Name == d.SearchTool) {
			k.research.Tools = append(k.research.Tools, k.tools[i])
			k.research.Policy = append(k.research.Policy, k.pol.Tools[i])
		}
	}
	if len(k.research.Tools) == 0 {
		return fmt.Errorf("host: delegation.fetchTool %q is not a configured tool", d.FetchTool)
	}
	r := k.research
	sample := &Turn{Handle: sandbox.Handle{ID: ids.NewTurnID(), Channel: ids.PreflightChannel}, Speaker: protocol.Speaker{ID: "preflight"}, Research: &r}
	if err := k.PolicyFor(sample, k.now().Add(time.Duration(d.TimeoutSeconds)*time.Second)).Validate(); err != nil {
		return fmt.Errorf("host: delegation makes an invalid broker policy: %w", err)
	}
	if _, err := k.TurnJSON(sample, true); err != nil {
		return fmt.Errorf("host: delegation makes an invalid worker turn: %w", err)
	}
	return nil
}

// Research runs a delegated job's research turn (DESIGN.md section 14): a
// sealed turn (its lifecycle, container, broker, confinement, guest uid,
// the author as the speaker) with only the fetch and search tools, no MCP
// server, the research prompt, the job's deadline and its scratch
// workspace, so a job never sees or changes the channel's memory or
// history; then its cleanup.
func (k *Kind) Research(ctx context.Context, j kind.ResearchJob, log *slog.Logger) kind.ResearchResult {
	r := k.research
	r.Scratch = j.Scratch
	t := &Turn{
		Handle:    sandbox.Handle{ID: j.ID, Channel: j.Channel, Tag: ids.ChannelTag(j.Channel), Deadline: j.Deadline, Quiet: true},
		Speaker:   protocol.Speaker{ID: j.Author.ID, Name: j.Author.Name},
		Principal: j.Author.PrincipalID, Text: j.Text,
		Reset: true, Research: &r,
	}
	var res kind.ResearchResult
	res.Reply, res.RunErr = k.Execute(ctx, t)
	var exit *ExitError
	if errors.As(res.RunErr, &exit) {
		res.Exited, res.ExitCode, res.WorkerCause = true, exit.Status, exit.Cause
	}
	res.CleanupErr = k.Cleanup(t, log)
	return res
}

// standbyMetrics count what the standby pool reports.
type standbyMetrics struct {
	takes, discards, prepares *prometheus.CounterVec
}

func newStandbyMetrics(reg prometheus.Registerer) *standbyMetrics {
	m := &standbyMetrics{
		takes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_standby_turns_total", Help: "Turns by whether they found a ready standby (result hit or miss; reason of a miss).",
		}, []string{"result", "reason"}),
		discards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_standby_discards_total", Help: "Standbys discarded unused, by reason.",
		}, []string{"reason"}),
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_standby_prepares_total", Help: "Standby preparations by result (ok, failed, capped: skipped at standby.max).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.takes, m.discards, m.prepares)
	return m
}

func (m *standbyMetrics) event(event, reason string) {
	switch event {
	case standby.EventHit:
		m.takes.WithLabelValues("hit", "").Inc()
	case standby.EventMiss:
		m.takes.WithLabelValues("miss", reason).Inc()
	case standby.EventDiscard:
		m.discards.WithLabelValues(reason).Inc()
	case standby.EventPrepared:
		m.prepares.WithLabelValues("ok").Inc()
	case standby.EventPrepareFailed:
		m.prepares.WithLabelValues("failed").Inc()
	case standby.EventCapped:
		m.prepares.WithLabelValues("capped").Inc()
	}
}
