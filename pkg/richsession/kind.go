package richsession

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// Registration registers rich sessions with the host: they run the turns
// of channels in mode rich.
var Registration = kind.Registration{Name: "richsession", New: register, Zero: (*Kind)(nil)}

// Tuning replaces the kind's settings (tests; kind.Deps.Tuning).
type Tuning struct {
	// Control reaches the brokers' control routes; HTTPControl when nil.
	Control Control
	// Idle replaces rich.idleSeconds; 0 = the configuration's.
	Idle time.Duration
	// ReplyBudget replaces DefaultReplyBudget (0 = it); BudgetWait hears
	// of a packet that waits for it.
	ReplyBudget int64
	BudgetWait  func(n int64)
}

func register(d kind.Deps) (kind.Kind, error) {
	t := kind.TuningOf[Tuning](d)
	k := New(Options{
		Config: d.Config, Lifecycle: d.Lifecycle, Host: d.Host, Logger: d.Logger, Now: d.Now, NewID: d.NewID,
		Tools: d.Tools, MCP: d.MCP, Policy: d.Policy, Control: t.Control, Idle: t.Idle, Registry: d.Registry,
		ReplyBudget: cmp.Or(t.ReplyBudget, d.Config.Rich.ReplyBudgetBytes), BudgetWait: t.BudgetWait,
	})
	k.LogConfig()
	return k, nil
}

// ErrUnavailable: the channel is in mode rich but rich channels are
// disabled or its profile is not configured (any more).
var ErrUnavailable = errors.New("rich channel unavailable: rich.enabled is off or the channel's profile is not configured")

// Mode: sessions serve channels in mode rich.
func (k *Kind) Mode() string { return chanstate.ModeRich }

// CheckMode: mode rich needs rich.enabled and a configured profile.
func (k *Kind) CheckMode(profile string) error {
	if !k.cfg.Rich.Enabled {
		return errors.New("rich channels are disabled (rich.enabled)")
	}
	if _, ok := k.cfg.Profile(profile); !ok {
		return errors.New("profile must name a configured profile")
	}
	return nil
}

// TurnTimeout is a rich turn's bound, or ErrUnavailable.
func (k *Kind) TurnTimeout(profile string) (time.Duration, error) {
	if _, ok := k.cfg.Profile(profile); !ok || !k.cfg.Rich.Enabled {
		return 0, ErrUnavailable
	}
	return k.cfg.RichTurnTimeout(), nil
}

// RunChannelTurn runs one admitted turn of a rich channel (the host holds
// the channel's queue slot): it takes the channel's session (starting one
// when there is none or it cannot serve), hands the turn over the control
// route and returns the worker's reply. A failed turn stops the session, so
// the next turn starts with a new broker and a new container.
func (k *Kind) RunChannelTurn(ctx context.Context, t *kind.Turn) kind.Outcome {
	prof, _ := k.cfg.Profile(t.Profile) // TurnTimeout found it
	log := k.log.With("turn", t.ID, "channel", ids.ChannelTag(t.Channel), "profile", prof.Name)
	o := k.Turn(ctx, t.ID, Input{
		Channel: t.Channel, SpeakerID: t.Speaker.ID, SpeakerName: t.Speaker.Name, PrincipalID: t.Principal,
		Text: t.Text, Attachments: t.Attachments,
	}, prof, t.Deadline, t.Reset, log)
	warm := o.Warm
	return kind.Outcome{
		ID: t.ID, Reply: o.Reply, Files: o.Files, RunErr: o.RunErr, CleanupErr: o.CleanupErr,
		Log: log, Failed: "rich turn failed", Done: []any{"rich", true, "warm", warm},
		Count:   func(result string) { k.CountTurn(result, warm) },
		Release: o.Release,
	}
}

// ChannelReport is a rich channel's session.
func (k *Kind) ChannelReport(channel, mode string) kind.Report {
	if mode != chanstate.ModeRich {
		return kind.Report{}
	}
	return kind.Report{Session: k.Status(channel)}
}

// ChannelMode stops the channel's session when it changed mode or
// profile (a running turn keeps it until it settles, then the next turn
// starts anew).
func (k *Kind) ChannelMode(channel, mode, profile string) {
	k.StopIdle(channel, mode, profile, mode == chanstate.ModeRich)
}

// Stop stops every session (after the host's turns: no turn takes one any
// more).
func (k *Kind) Stop() { k.StopAll("host stop") }
