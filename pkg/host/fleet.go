package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Fleet mode (DESIGN.md section 17, fleet.enabled): a sealed channel's
// admitted turn is published to the fleet instead of run here, the box
// pinned on its partition runs it (this one or another), and this host
// answers its frontend from the committed reply, so a frontend on
// host.sock sees what it always saw. This host is also a box: it takes the
// turns of the partitions it is pinned on and runs them through RunTurn.
// Rich channels stay local (a live session does not move). With
// fleet.enabled false none of this exists: no connection, no box.

// ConnectFleet dials the fleet with the fleet.* keys (Daemon.ConnectFleet's
// default).
func ConnectFleet(_ context.Context, f config.Fleet, log *slog.Logger) (*nats.Conn, error) {
	return fleet.Connect(fleet.ConnectOptions{
		URL: f.URL, Name: f.Box, CAFile: f.TLS.CA, CertFile: f.TLS.Cert, KeyFile: f.TLS.Key, NkeySeedFile: f.NkeySeedFile, Logger: log,
	})
}

// fleetLayout is the layout every box agrees on.
func fleetLayout(f config.Fleet) fleet.Layout {
	return fleet.Layout{Partitions: f.Partitions, Replicas: f.Replicas}
}

// askFleet is handleTurn's fleet path for a sealed channel: publish, wait
// for the committed reply; the caller answers as for a local turn.
func (h *Host) askFleet(r *http.Request, channel string, req TurnRequest) (*protocol.Reply, string, error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer stop()
	// The turn may wait behind the channel's earlier turns on its owner
	// box; the client's own deadline bounds that wait.
	deadline := h.opts.Now().Add(h.cfg.TurnDeadline() + fleetTurnSlack)
	t := fleet.Turn{
		ID: h.opts.NewTurnID(), Channel: channel, Text: req.Text, From: h.cfg.Fleet.Box,
		Speaker:        fleet.Speaker{ID: req.Speaker.ID, Name: req.Speaker.Name, PrincipalID: req.Speaker.PrincipalID},
		DeadlineUnixMs: deadline.UnixMilli(),
	}
	ctx, cancelDeadline := context.WithDeadline(ctx, deadline.Add(fleetTurnSlack))
	defer cancelDeadline()
	rep, _, err := h.fleet.Ask(ctx, t)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrShuttingDown) {
			return nil, t.ID, ErrShuttingDown
		}
		if ctx.Err() != nil && r.Context().Err() != nil {
			return nil, t.ID, ErrClientGone
		}
		h.log.Warn("fleet turn not answered: the fleet (NATS JetStream) failed or did not commit in time", "turn", t.ID, "err", err)
		return nil, t.ID, ErrTurnFailed
	}
	if rep.Error != "" {
		return nil, t.ID, fleetReplyError(rep.Error)
	}
	return &protocol.Reply{OK: rep.OK, Text: rep.Text}, t.ID, nil
}

// fleetTurnSlack covers the engine's own time around a turn (publication,
// failover to another box, commit).
const fleetTurnSlack = time.Minute

func fleetReplyError(kind string) error {
	switch kind {
	case fleet.ErrorDeadline:
		return ErrDeadline
	case fleet.ErrorModeOff:
		return ErrModeOff
	case fleetErrorCancelled:
		return ErrCancelled
	}
	return ErrTurnFailed
}

const fleetErrorCancelled = "cancelled"

// fleetExecutor runs a fleet turn on this box through the host's own
// admission and sealed-turn kind.
type fleetExecutor struct{ h *Host }

// Execute takes the channel's queue slot (this box's admission), then runs
// the sealed turn. The channel's workspace stays on this box: its snapshot
// is not yet committed to the fleet (Output.Workspace nil).
func (e fleetExecutor) Execute(ctx context.Context, in fleet.Input) (fleet.Output, error) {
	h := e.h
	if !h.accepting() {
		return fleet.Output{}, fleet.ErrElsewhere
	}
	// The admitting box checked the channel's mode (channel state is still
	// each box's own): a channel unknown or off here runs. A channel rich
	// here is refused: its workspace is a rich session's, not a sealed one's.
	if h.state.Mode(in.Turn.Channel) == ModeRich {
		return fleet.Output{}, &fleet.TurnError{Kind: fleet.ErrorModeOff, Err: ErrModeOff}
	}
	release, err := h.queue.Acquire(ctx, in.Turn.Channel)
	if err != nil {
		if errors.Is(err, ErrShuttingDown) {
			return fleet.Output{}, fleet.ErrElsewhere
		}
		return fleet.Output{}, fmt.Errorf("admission: %w", err)
	}
	defer release()
	reply, _, err := h.RunTurn(ctx, TurnInput{
		Channel: in.Turn.Channel, SpeakerID: in.Turn.Speaker.ID, SpeakerName: in.Turn.Speaker.Name,
		PrincipalID: in.Turn.Speaker.PrincipalID, Text: in.Turn.Text,
	})
	switch {
	case errors.Is(err, ErrShuttingDown):
		return fleet.Output{}, fleet.ErrElsewhere
	case errors.Is(err, ErrDeadline):
		return fleet.Output{}, &fleet.TurnError{Kind: fleet.ErrorDeadline, Err: err}
	case errors.Is(err, ErrCancelled):
		return fleet.Output{}, &fleet.TurnError{Kind: fleetErrorCancelled, Err: err}
	case err != nil:
		return fleet.Output{}, err
	}
	return fleet.Output{OK: reply.OK, Text: reply.Text}, nil
}

// fleetExecutorFor is the executor this binary's boxes use: the stub turn
// in a binary built with the fleetstub tag when SANDBOX_FLEET_STUB_TURN is
// set (fleet.StubFromEnv), the host's sealed turns otherwise.
func (h *Host) fleetExecutorFor() fleet.Executor {
	if ex := fleet.StubFromEnv(); ex != nil {
		h.log.Warn("fleet: stub turns in place of containers (a fleetstub test binary)")
		return ex
	}
	return fleetExecutor{h}
}
