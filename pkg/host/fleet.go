package host

import (
	"context"
	"errors"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Fleet mode (docs/fleet.md, fleet.enabled): a sealed channel's
// admitted turn is published to the fleet instead of run here, the box
// pinned on its partition runs it (this one or another), and this host
// answers its frontend from the committed reply, so a frontend on
// host.sock sees what it always saw. This host is also a box: it takes the
// turns of the partitions it is pinned on and runs them through RunTurn.
// Rich channels stay local (a live session does not move). With
// fleet.enabled false none of this exists: no connection, no box.

// ConnectFleet dials the fleet with the fleet.* keys (Daemon.ConnectFleet's
// default).
var ConnectFleet = fleetside.Connect

// askFleet is handleTurn's fleet path for a sealed channel: publish, wait
// for the committed reply; the caller answers as for a local turn.
func (h *Host) askFleet(r *http.Request, channel string, req apiwire.TurnRequest) (*protocol.Reply, string, error) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer stop()
	rep, id, err := h.fl.Ask(ctx, channel, fleet.Speaker{ID: req.Speaker.ID, Name: req.Speaker.Name, PrincipalID: req.Speaker.PrincipalID}, req.Text)
	switch {
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrBusy):
		return nil, id, err // this box's queue for the channel (the 429s)
	case err != nil && errors.Is(context.Cause(ctx), ErrShuttingDown):
		return nil, id, ErrShuttingDown
	case err != nil && r.Context().Err() != nil:
		return nil, id, ErrClientGone
	case err != nil:
		h.log.Warn("fleet turn not answered: the fleet (NATS JetStream) failed or did not commit in time", "turn", id, "err", err)
		return nil, id, ErrTurnFailed
	case rep.Error != "":
		return nil, id, fleetReplyError(rep.Error)
	}
	return &protocol.Reply{OK: rep.OK, Text: rep.Text}, id, nil
}

func fleetReplyError(kind string) error {
	switch kind {
	case fleet.ErrorDeadline:
		return ErrDeadline
	case fleet.ErrorModeOff:
		return ErrModeOff
	case fleet.ErrorCancelled:
		return ErrCancelled
	}
	return ErrTurnFailed
}

// fleetHost is the host as its fleet side's Host (pkg/fleetside).
type fleetHost struct{ h *Host }

func (f fleetHost) Accepting() bool { return f.h.accepting() }

func (f fleetHost) Slot(ctx context.Context, channel string) (func(), error) {
	release, err := f.h.queue.Acquire(ctx, channel)
	if errors.Is(err, ErrShuttingDown) {
		return nil, fleet.ErrElsewhere
	}
	return release, err
}

func (f fleetHost) Run(ctx context.Context, t fleet.Turn) (bool, string, error) {
	reply, _, err := f.h.RunTurn(ctx, TurnInput{
		Channel: t.Channel, SpeakerID: t.Speaker.ID, SpeakerName: t.Speaker.Name, PrincipalID: t.Speaker.PrincipalID, Text: t.Text,
	})
	switch {
	case errors.Is(err, ErrShuttingDown):
		return false, "", fleet.ErrElsewhere
	case errors.Is(err, ErrDeadline):
		return false, "", &fleet.TurnError{Kind: fleet.ErrorDeadline, Err: err}
	case errors.Is(err, ErrCancelled):
		return false, "", &fleet.TurnError{Kind: fleet.ErrorCancelled, Err: err}
	case err != nil:
		return false, "", err
	}
	return reply.OK, reply.Text, nil
}

// fleetExecutorFor is the executor this binary's boxes use: the stub turn
// in a binary built with the fleetstub tag when SANDBOX_FLEET_STUB_TURN is
// set (fleet.StubFromEnv), the host's sealed turns otherwise.
func (h *Host) fleetExecutorFor() fleet.Executor {
	if ex := fleet.StubFromEnv(); ex != nil {
		h.log.Warn("fleet: stub turns in place of containers (a fleetstub test binary)")
		return ex
	}
	return h.fl
}
