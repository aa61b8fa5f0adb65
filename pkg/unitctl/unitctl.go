// Package unitctl starts, stops and lists the per-turn broker units over the
// system D-Bus. Guarantee: it only ever addresses unit names built by package
// ids (sandbox-broker@<turn>.socket|service) plus reads of the host
// service's state and of a turn's sandbox-credset@ unit's properties, every
// job's result is checked (anything but "done" is a *UnitError naming the
// unit that failed and the limit it hit), and a dropped bus connection is
// redialled.
package unitctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// Error categories.
var (
	// ErrJob: systemd finished a job with a result other than "done".
	ErrJob = errors.New("systemd job failed")
	// ErrBus: the D-Bus call itself failed.
	ErrBus = errors.New("systemd d-bus call failed")
)

const (
	jobDone   = "done"
	noSuchErr = "org.freedesktop.systemd1.NoSuchUnit"
)

// conn is the part of *sddbus.Conn this package uses, so tests can fake it.
type conn interface {
	StartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	ListUnitsByPatternsContext(ctx context.Context, states, patterns []string) ([]sddbus.UnitStatus, error)
	ListUnitsByNamesContext(ctx context.Context, units []string) ([]sddbus.UnitStatus, error)
	GetUnitTypePropertyContext(ctx context.Context, unit, unitType, propertyName string) (*sddbus.Property, error)
	Connected() bool
	Close()
}

type dialFunc func(ctx context.Context) (conn, error)

func dialSystem(ctx context.Context) (conn, error) {
	return sddbus.NewSystemConnectionContext(ctx)
}

// Manager holds one system-bus connection.
type Manager struct {
	// life is the connection's lifetime (go-systemd keeps the ctx given to
	// the dial for as long as the connection lives).
	life context.Context
	dial dialFunc

	mu sync.Mutex
	c  conn
}

// Connect dials the system bus. ctx is the lifetime of the connection (and
// of every redial): pass the daemon's root context, not a request's.
func Connect(ctx context.Context) (*Manager, error) {
	return connect(ctx, dialSystem)
}

func connect(ctx context.Context, dial dialFunc) (*Manager, error) {
	m := &Manager{life: ctx, dial: dial}
	if _, err := m.conn(); err != nil {
		return nil, err
	}
	return m, nil
}

// conn returns a connected bus connection, redialling when the old one
// dropped (go-systemd never reconnects by itself).
func (m *Manager) conn() (conn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c != nil && m.c.Connected() {
		return m.c, nil
	}
	if m.c != nil {
		m.c.Close()
		m.c = nil
	}
	if err := m.life.Err(); err != nil {
		return nil, fmt.Errorf("system bus: %w", err)
	}
	c, err := m.dial(m.life)
	if err != nil {
		return nil, fmt.Errorf("connect to the system bus: %v: %w", err, ErrBus)
	}
	// No Manager.Subscribe: systemd sends a job's JobRemoved to the client
	// that queued it (the job tracks its requester on the bus), and the
	// library matches JobRemoved on its own. A subscriber makes PID 1 send
	// every unit's and job's change signals on the system bus for as long
	// as it is connected, three broker units' worth a turn and every other
	// unit's besides, which the host never reads (issue 25: cost per turn).
	m.c = c
	return c, nil
}

// Close closes the connection.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.c != nil {
		m.c.Close()
		m.c = nil
	}
}

type jobFunc func(ctx context.Context, name, mode string, ch chan<- string) (int, error)

// runJob queues a job and waits for its result. The channel is buffered: the
// library delivers results from its signal loop, which must never block. A
// job that did not end "done" is a *UnitError naming the unit that failed
// and the limit it hit (explainJob).
func (m *Manager) runJob(ctx context.Context, c conn, verb string, job jobFunc, unit, mode string) error {
	ch := make(chan string, 1)
	if _, err := job(ctx, unit, mode, ch); err != nil {
		return fmt.Errorf("%s %s: %w", verb, unit, busErr(err))
	}
	select {
	case result := <-ch:
		if result != jobDone {
			return m.explainJob(ctx, c, verb, unit, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s %s: waiting for the job: %w", verb, unit, ctx.Err())
	}
}

func busErr(err error) error {
	return fmt.Errorf("%w: %w", err, ErrBus)
}

// notLoaded reports systemd's "Unit x not loaded." (NoSuchUnit).
func notLoaded(err error) bool {
	var e dbus.Error
	if errors.As(err, &e) && e.Name == noSuchErr {
		return true
	}
	var pe *dbus.Error
	if errors.As(err, &pe) && pe.Name == noSuchErr {
		return true
	}
	// Transports that lose the error name keep systemd's message.
	return err != nil && strings.Contains(err.Error(), " not loaded")
}

// brokerUnits names a turn's socket and service units (through pkg/ids, so
// an invalid id never reaches the bus) and returns a live connection.
func (m *Manager) brokerUnits(turnID string) (sock, svc string, c conn, err error) {
	if sock, err = ids.BrokerSocketUnit(turnID); err != nil {
		return "", "", nil, err
	}
	if svc, err = ids.BrokerServiceUnit(turnID); err != nil {
		return "", "", nil, err
	}
	if c, err = m.conn(); err != nil {
		return "", "", nil, err
	}
	return sock, svc, c, nil
}

// StartBroker starts the turn's broker and waits until it is ready: one
// StartUnit of sandbox-broker@<turn>.service (mode "fail"). The unit's
// Requires= and After= pull sandbox-broker@<turn>.socket and
// sandbox-credset@<turn>.service into the same transaction, so the job ends
// "done" once the socket listens, the credential set is copied and the
// broker reported READY; any of the three failing ends it otherwise
// ("dependency" for the socket or the credential set), and the error names
// the service.
//
// It used to be two calls: the socket's start, waited for, then the
// service's, queued. Each call is a D-Bus round trip and, for the host's
// user, a polkit check inside systemd; measured (make bench, "starting a
// turn's broker units") one call instead of two on the cold path and of
// three for a standby. The listening fd still comes from the socket unit,
// so the broker is given what it was given before; only the host's wait
// ends at READY instead of at the socket listening, which on the cold path
// overlaps the container's start.
func (m *Manager) StartBroker(ctx context.Context, turnID string) error {
	_, svc, c, err := m.brokerUnits(turnID)
	if err != nil {
		return err
	}
	return m.runJob(ctx, c, "start", c.StartUnitContext, svc, "fail")
}

// StartBrokerService starts sandbox-broker@<turn>.service and waits for the
// job's result. Since StartBroker waits for the same job it is a second
// check (one round trip; a service already running answers "done" at once):
// a standby's broker must be known to run before a turn binds it, because
// the unit allows one start a turn.
func (m *Manager) StartBrokerService(ctx context.Context, turnID string) error {
	_, svc, c, err := m.brokerUnits(turnID)
	if err != nil {
		return err
	}
	return m.runJob(ctx, c, "start", c.StartUnitContext, svc, "fail")
}

// StopBroker stops the turn's socket (first, so nothing re-activates the
// service) and service (mode "replace") and waits for both results. A unit
// that is not loaded counts as stopped. When both stops end "done" nothing
// else is sent: both units carry CollectMode=inactive-or-failed, so systemd
// unloads them, failed or not, and a reset-failed would only cost two more
// D-Bus round trips (and polkit checks). Only when a stop job failed does it
// still try reset-failed on both, then return the stop error.
func (m *Manager) StopBroker(ctx context.Context, turnID string) error {
	sock, svc, c, err := m.brokerUnits(turnID)
	if err != nil {
		return err
	}
	var errs []error
	for _, unit := range []string{sock, svc} {
		if err := m.runJob(ctx, c, "stop", c.StopUnitContext, unit, "replace"); err != nil && !notLoaded(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	for _, unit := range []string{sock, svc} {
		if err := c.ResetFailedUnitContext(ctx, unit); err != nil && !notLoaded(err) {
			errs = append(errs, fmt.Errorf("reset-failed %s: %w", unit, busErr(err)))
		}
	}
	return errors.Join(errs...)
}

// ListBrokers returns the turn ids of loaded sandbox-broker@ units (each id
// once, whatever the state). Names that ids.ParseBrokerUnit refuses are left out.
func (m *Manager) ListBrokers(ctx context.Context) ([]string, error) {
	c, err := m.conn()
	if err != nil {
		return nil, err
	}
	units, err := c.ListUnitsByPatternsContext(ctx, nil, []string{ids.BrokerUnitPattern})
	if err != nil {
		return nil, fmt.Errorf("list broker units: %w", busErr(err))
	}
	seen := map[string]bool{}
	var turns []string
	for _, u := range units {
		if u.LoadState == "not-found" {
			continue
		}
		if id, ok := ids.ParseBrokerUnit(u.Name); ok && !seen[id] {
			seen[id] = true
			turns = append(turns, id)
		}
	}
	return turns, nil
}

// HostActive reports whether sandbox-host.service is running or changing
// state. It reads the unit's state only: it never starts anything.
func (m *Manager) HostActive(ctx context.Context) (bool, error) {
	c, err := m.conn()
	if err != nil {
		return false, err
	}
	units, err := c.ListUnitsByNamesContext(ctx, []string{layout.HostService})
	if err != nil {
		return false, fmt.Errorf("state of %s: %w", layout.HostService, busErr(err))
	}
	for _, u := range units {
		if u.Name != layout.HostService {
			continue
		}
		switch u.ActiveState {
		case "active", "activating", "deactivating", "reloading":
			return true, nil
		}
	}
	return false, nil
}
