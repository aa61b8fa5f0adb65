package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetconn"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// FleetOptions connect a frontend that lives on no box straight to the
// fleet (docs/fleet.md): the fleet.* keys of the boxes' sandbox.yaml
// name the same things.
type FleetOptions struct {
	URL                       string // fleet.url: tls:// URLs, comma-separated
	CAFile, CertFile, KeyFile string // fleet.tls.*
	NkeySeedFile              string // this frontend's own NATS user
	Name                      string // the connection's name on the server
	Partitions                int    // fleet.partitions: the boxes' value
	// TurnTimeout bounds RunTurn (DefaultTurnTimeout when zero); a turn
	// carries it as its deadline, so a box never starts it later.
	TurnTimeout    time.Duration
	ConnectTimeout time.Duration // DefaultConnectTimeout when zero
	// Conn, when set, is used instead of dialing (tests; the caller closes it).
	Conn *nats.Conn
}

// FleetClient runs turns through the fleet: the turn goes to its
// partition's box and the reply comes from the reply bucket. Channel
// control (mode, fresh, cancel) stays on a box's host.sock.
type FleetClient struct {
	nc    *nats.Conn
	own   bool
	f     *fleet.Fleet
	opts  FleetOptions
	newID func() string
}

// DialFleet connects to the fleet and binds its turns stream and buckets
// (never creating them: the boxes do).
func DialFleet(ctx context.Context, o FleetOptions) (*FleetClient, error) {
	if o.TurnTimeout <= 0 {
		o.TurnTimeout = DefaultTurnTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.Partitions < 1 {
		return nil, fmt.Errorf("sandbox fleet: partitions must be the boxes' fleet.partitions (got %d)", o.Partitions)
	}
	c := &FleetClient{nc: o.Conn, opts: o, newID: ids.NewTurnID}
	if c.nc == nil {
		nc, err := fleetconn.Connect(fleetconn.Options{URL: o.URL, Name: o.Name, CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile,
			NkeySeedFile: o.NkeySeedFile, ConnectTimeout: o.ConnectTimeout})
		if err != nil {
			return nil, fmt.Errorf("sandbox fleet: %w", err)
		}
		c.nc, c.own = nc, true
	}
	bctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	// Only what a frontend's own NATS user may use (fleet.server.frontends).
	f, err := fleet.BindFrontend(bctx, c.nc, o.Partitions)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("sandbox fleet: %w (are the boxes in fleet mode?)", err)
	}
	c.f = f
	return c, nil
}

// Close closes the connection DialFleet made.
func (c *FleetClient) Close() {
	if c.own {
		c.nc.Close()
	}
}

// RunTurn runs one guest message in channel through the fleet and waits
// for its committed reply, failing as Client.RunTurn does (*Error with
// the status a box's host would answer, ErrTimeout when the deadline
// passed).
func (c *FleetClient) RunTurn(ctx context.Context, channel string, speaker apiwire.Speaker, text string) (apiwire.Reply, error) {
	if speaker.ID == "" {
		return apiwire.Reply{}, &Error{Status: http.StatusBadRequest, Reason: "speaker.id is required"}
	}
	if err := ids.ValidChannel(channel); err != nil {
		return apiwire.Reply{}, &Error{Status: http.StatusBadRequest, Reason: "invalid channel"}
	}
	terr := &timeoutError{op: "fleet turn", after: c.opts.TurnTimeout}
	ctx, cancel := context.WithTimeoutCause(ctx, c.opts.TurnTimeout, terr)
	defer cancel()
	t := fleet.Turn{ID: c.newID(), Channel: channel, Text: text, From: "",
		Speaker:        fleet.Speaker{ID: speaker.ID, Name: speaker.Name, PrincipalID: speaker.PrincipalID},
		DeadlineUnixMs: time.Now().Add(c.opts.TurnTimeout).UnixMilli()}
	rep, _, err := c.f.Ask(ctx, t)
	if err != nil {
		if errors.Is(context.Cause(ctx), ErrTimeout) {
			return apiwire.Reply{}, terr
		}
		if errors.Is(err, fleet.ErrInvalid) {
			return apiwire.Reply{}, &Error{Status: http.StatusBadRequest, Reason: "invalid turn"}
		}
		return apiwire.Reply{}, fmt.Errorf("sandbox fleet: turn %s: %w", t.ID, err)
	}
	switch rep.Error {
	case "":
		return apiwire.Reply{OK: rep.OK, Text: rep.Text, TurnID: t.ID}, nil
	case fleet.ErrorDeadline:
		return apiwire.Reply{}, &Error{Status: http.StatusGatewayTimeout, Reason: "turn deadline exceeded"}
	case fleet.ErrorModeOff:
		return apiwire.Reply{}, &Error{Status: http.StatusConflict, Reason: "channel is not in sandbox mode"}
	default:
		return apiwire.Reply{}, &Error{Status: http.StatusInternalServerError, Reason: "turn failed"}
	}
}
