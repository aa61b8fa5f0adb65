// Package fleetconn dials the fleet's NATS cluster for a box, a fleet
// client or the repair command (fleet.url, fleet.tls.*, fleet.nkeySeedFile;
// docs/fleet.md). Guarantee: it connects only over tls:// URLs (unless
// Insecure, which no config key sets), never with credentials in a URL,
// every attempt bounded; a lost connection is retried and logged naming
// the server with its URL redacted.
package fleetconn

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrInvalid: the connection settings are refused (the error names the key).
var ErrInvalid = errors.New("invalid")

// Options are a box's or a fleet client's way to the cluster
// (fleet.url, fleet.tls.*, fleet.nkeySeedFile).
type Options struct {
	URL  string // one or more comma-separated tls:// URLs
	Name string // the connection's name on the server (the box)
	// CAFile verifies the servers; CertFile and KeyFile are this box's
	// client certificate (both or neither).
	CAFile, CertFile, KeyFile string
	// NkeySeedFile holds this box's nkey seed (its NATS user).
	NkeySeedFile string
	// Insecure permits nats:// URLs without TLS: in-process tests only,
	// no config key sets it.
	Insecure bool
	// ConnectTimeout bounds each connection attempt (default 5 s).
	ConnectTimeout time.Duration
	Logger         *slog.Logger
}

// Connect dials the cluster. Every URL must be tls:// (guest text travels
// on this connection) unless Insecure; a lost connection is retried
// forever, each attempt bounded, and logged naming the server.
func Connect(o Options) (*nats.Conn, error) {
	if o.URL == "" {
		return nil, fmt.Errorf("fleet.url is empty: %w", ErrInvalid)
	}
	for _, raw := range strings.Split(o.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("fleet.url %q is not a URL: %w", raw, ErrInvalid)
		}
		if u.User != nil {
			return nil, fmt.Errorf("fleet.url must not carry credentials (use fleet.nkeySeedFile): %w", ErrInvalid)
		}
		if u.Scheme != "tls" && !o.Insecure {
			return nil, fmt.Errorf("fleet.url %s: the scheme must be tls:// (guest text travels on it): %w", u.Redacted(), ErrInvalid)
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fmt.Errorf("fleet.tls.cert and fleet.tls.key go together: %w", ErrInvalid)
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := baseOptions(o, log)
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	if o.NkeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("fleet.nkeySeedFile: %w", err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("fleet: connect to %s: %w", redactedURLs(o.URL), err)
	}
	return nc, nil
}

// PingInterval and MaxPingsOut bound how long a dead connection (a cut
// link, a paused server) is believed: about PingInterval x (MaxPingsOut+1),
// DeadAfter, which also bounds a blocked write (pkg/fleetnats sets the
// same pings on the servers' routes and clients).
const (
	PingInterval = 3 * time.Second
	MaxPingsOut  = 3
	DeadAfter    = PingInterval * (MaxPingsOut + 1)
)

// baseOptions are every connection's options but its TLS files and nkey.
func baseOptions(o Options, log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(o.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// A server behind a cut link answers nothing and closes nothing:
		// without pings the connection would be believed for minutes
		// (nats.go's default is 2 minutes x 2), and a frontend or box on
		// it would hear no reply meanwhile.
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		// The pings cannot tell while a write is blocked: nats.go holds the
		// connection's lock for the write, and a cut link fills the socket's
		// send buffer (a client reading its reply often fills it in
		// seconds). nats.go's default write timeout is a minute; a write
		// blocked longer than the pings' bound ends the connection too
		// (fleetbench: a frontend on a cut server believed it 70 s).
		nats.FlusherTimeout(DeadAfter),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			log.Warn("fleet: connection to the NATS server lost; reconnecting", "server", nc.ConnectedUrlRedacted(), "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("fleet: reconnected to the NATS server", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("fleet: NATS server reported an error", "err", err)
		}),
	}
}

func redactedURLs(s string) string {
	var out []string
	for _, raw := range strings.Split(s, ",") {
		if u, err := url.Parse(strings.TrimSpace(raw)); err == nil {
			out = append(out, u.Redacted())
		}
	}
	return strings.Join(out, ",")
}
