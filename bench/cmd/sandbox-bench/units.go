package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/roundtable-sandbox/sandbox/bench/internal/report"
	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// unitFlow is one way of starting a turn's broker units over D-Bus, as the
// host did before issue 25 or does now. Each returns when the host would go
// on (ret) and when the broker service reported READY (ready).
type unitFlow struct {
	name  string
	calls int // D-Bus method calls the host makes (each one polkit check)
	// subscribed: the host's connection called Manager.Subscribe (before
	// issue 25), so PID 1 broadcast every unit's change signals to it.
	subscribed bool
	run        func(ctx context.Context, c *sddbus.Conn, sock, svc string) (ret, ready time.Duration, err error)
}

// job queues a start and returns a channel with its result.
func job(ctx context.Context, c *sddbus.Conn, unit string) (<-chan string, error) {
	ch := make(chan string, 1)
	if _, err := c.StartUnitContext(ctx, unit, "fail", ch); err != nil {
		return nil, fmt.Errorf("start %s: %w", unit, err)
	}
	return ch, nil
}

func wait(ctx context.Context, ch <-chan string, unit string) error {
	select {
	case r := <-ch:
		if r != "done" {
			return fmt.Errorf("start %s: job result %q", unit, r)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var unitFlows = []unitFlow{
	{name: report.UnitsColdBefore, calls: 2, subscribed: true, run: func(ctx context.Context, c *sddbus.Conn, sock, svc string) (time.Duration, time.Duration, error) {
		start := time.Now()
		ch, err := job(ctx, c, sock)
		if err != nil {
			return 0, 0, err
		}
		if err := wait(ctx, ch, sock); err != nil {
			return 0, 0, err
		}
		ret := time.Since(start)
		// Queued, not waited for by the host; the result is read here
		// only to time READY (the signal comes whether read or not).
		sch, err := job(ctx, c, svc)
		if err != nil {
			return 0, 0, err
		}
		err = wait(ctx, sch, svc)
		return ret, time.Since(start), err
	}},
	{name: report.UnitsColdAfter, calls: 1, run: func(ctx context.Context, c *sddbus.Conn, _, svc string) (time.Duration, time.Duration, error) {
		start := time.Now()
		ch, err := job(ctx, c, svc)
		if err != nil {
			return 0, 0, err
		}
		err = wait(ctx, ch, svc)
		d := time.Since(start)
		return d, d, err
	}},
	{name: report.UnitsStandbyBefore, calls: 3, subscribed: true, run: func(ctx context.Context, c *sddbus.Conn, sock, svc string) (time.Duration, time.Duration, error) {
		start := time.Now()
		ch, err := job(ctx, c, sock)
		if err != nil {
			return 0, 0, err
		}
		if err := wait(ctx, ch, sock); err != nil {
			return 0, 0, err
		}
		if _, err := job(ctx, c, svc); err != nil {
			return 0, 0, err
		}
		ch, err = job(ctx, c, svc)
		if err != nil {
			return 0, 0, err
		}
		err = wait(ctx, ch, svc)
		d := time.Since(start)
		return d, d, err
	}},
	{name: report.UnitsStandbyAfter, calls: 2, run: func(ctx context.Context, c *sddbus.Conn, _, svc string) (time.Duration, time.Duration, error) {
		start := time.Now()
		ch, err := job(ctx, c, svc)
		if err != nil {
			return 0, 0, err
		}
		if err := wait(ctx, ch, svc); err != nil {
			return 0, 0, err
		}
		ready := time.Since(start)
		// StartBrokerService: the standby's second check, a no-op job.
		if ch, err = job(ctx, c, svc); err != nil {
			return 0, 0, err
		}
		err = wait(ctx, ch, svc)
		return time.Since(start), ready, err
	}},
}

// cmdUnits times the broker units' start over D-Bus the ways in unitFlows,
// interleaved by rounds, on a placeholder policy (a standby's: the broker
// starts and waits for its policy; sandbox-credset copies the names it
// lists). Run it as the host's user (_sandbox) so that every call takes the
// polkit check the host's calls take. Each start is followed, off the
// clock, by the stop the host makes and the removal of the files.
func cmdUnits(args []string) error {
	fs := flag.NewFlagSet("units", flag.ExitOnError)
	out := fs.String("out", "", "results file")
	rounds := fs.Int("rounds", 30, "measured rounds")
	warmup := fs.Int("warmup", 2, "warm-up rounds")
	cred := fs.String("credential", "model", "credential name the placeholder lists")
	_ = fs.Parse(args)
	if *out == "" {
		return errors.New("--out is required")
	}
	ctx, cancel := signalContext()
	defer cancel()
	c, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return fmt.Errorf("system bus: %w", err)
	}
	defer c.Close()
	sub, err := newSubscriber()
	if err != nil {
		return err
	}
	defer sub.close()
	res := report.Units{Rounds: *rounds, Warmup: *warmup, UID: os.Getuid(), LoadStart: report.LoadAvg(), Start: time.Now().UTC()}
	ret := map[string]*report.UnitSeries{}
	for _, f := range unitFlows {
		ret[f.name] = &report.UnitSeries{Name: f.name, Calls: f.calls}
	}
	for r := 0; r < *warmup+*rounds && ctx.Err() == nil; r++ {
		if r == *warmup {
			res.MeasuredStart = time.Now().UTC()
		}
		for _, f := range unitFlows {
			s := ret[f.name]
			if f.subscribed {
				if err := sub.set(true); err != nil {
					return err
				}
			}
			d, ready, err := oneUnitStart(ctx, c, f, *cred)
			if f.subscribed {
				if err := sub.set(false); err != nil {
					return err
				}
			}
			if r < *warmup {
				continue
			}
			if err != nil {
				s.Failures++
				if len(s.Errors) < 5 {
					s.Errors = append(s.Errors, err.Error())
				}
				continue
			}
			s.ReturnMs = append(s.ReturnMs, stats.Ms(d))
			s.ReadyMs = append(s.ReadyMs, stats.Ms(ready))
		}
	}
	res.End, res.LoadEnd = time.Now().UTC(), report.LoadAvg()
	for _, f := range unitFlows {
		s := ret[f.name]
		s.Return, s.Ready = stats.Summarize(s.ReturnMs), stats.Summarize(s.ReadyMs)
		slog.Info("units", "flow", s.Name, "calls", s.Calls, "return_median_ms", s.Return.Median, "ready_median_ms", s.Ready.Median, "failures", s.Failures)
		res.Series = append(res.Series, *s)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return writeJSON(*out, res)
}

// oneUnitStart makes a turn's directory and placeholder policy, starts its
// units by f, then stops them (socket first, then service, as the host
// does) and removes the files.
func oneUnitStart(ctx context.Context, c *sddbus.Conn, f unitFlow, cred string) (time.Duration, time.Duration, error) {
	_, d, ready, err := oneUnitStartTurn(ctx, c, f, cred)
	return d, ready, err
}

// oneUnitStartTurn is oneUnitStart, also returning the turn id it used.
func oneUnitStartTurn(ctx context.Context, c *sddbus.Conn, f unitFlow, cred string) (turn string, ret, ready time.Duration, err error) {
	turn = ids.NewTurnID()
	d, ready, err := unitStartOn(ctx, c, f, cred, turn)
	return turn, d, ready, err
}

func unitStartOn(ctx context.Context, c *sddbus.Conn, f unitFlow, cred, turn string) (time.Duration, time.Duration, error) {
	sock, err := ids.BrokerSocketUnit(turn)
	if err != nil {
		return 0, 0, err
	}
	svc, err := ids.BrokerServiceUnit(turn)
	if err != nil {
		return 0, 0, err
	}
	dir, err := layout.TurnDir(layout.RunRoot, turn)
	if err != nil {
		return 0, 0, err
	}
	pol, err := layout.PolicyFile(layout.PolicyDir, turn)
	if err != nil {
		return 0, 0, err
	}
	data, err := (&policy.Pending{Version: policy.Version, TurnID: turn, Pending: true,
		DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(), Credentials: []string{cred}}).Marshal()
	if err != nil {
		return 0, 0, err
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		return 0, 0, err
	}
	if err := atomicfile.WriteFile(pol, data, 0o640); err != nil {
		return 0, 0, err
	}
	defer os.Remove(pol)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d, ready, runErr := f.run(sctx, c, sock, svc)
	for _, u := range []string{sock, svc} {
		ch := make(chan string, 1)
		if _, err := c.StopUnitContext(ctx, u, "replace", ch); err == nil {
			select {
			case <-ch:
			case <-time.After(30 * time.Second):
			}
		}
	}
	return d, ready, runErr
}

// subscriber stands for the host's connection before issue 25: subscribed
// to systemd's signals (Manager.Subscribe, so PID 1 broadcasts every
// unit's and job's changes) with go-systemd's matches (UnitNew,
// PropertiesChanged), the signals read and dropped. set(false) unsubscribes
// between the "before" flows, so the "now" flows run with nobody
// subscribed, as the host has it now.
type subscriber struct {
	conn *dbus.Conn
	obj  dbus.BusObject
	ch   chan *dbus.Signal
	on   bool
}

func newSubscriber() (*subscriber, error) {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return nil, fmt.Errorf("system bus: %w", err)
	}
	s := &subscriber{conn: conn, obj: conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1"), ch: make(chan *dbus.Signal, 4096)}
	for _, rule := range []string{
		"type='signal',interface='org.freedesktop.systemd1.Manager',member='UnitNew'",
		"type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'",
		"type='signal',interface='org.freedesktop.systemd1.Manager',member='JobRemoved'",
	} {
		if err := conn.BusObject().Call("org.freedesktop.DBus.AddMatch", 0, rule).Err; err != nil {
			conn.Close()
			return nil, fmt.Errorf("add match: %w", err)
		}
	}
	conn.Signal(s.ch)
	go func() {
		for range s.ch { // read and dropped, as go-systemd does without subscribers
		}
	}()
	return s, nil
}

func (s *subscriber) set(on bool) error {
	if on == s.on {
		return nil
	}
	method := "org.freedesktop.systemd1.Manager.Unsubscribe"
	if on {
		method = "org.freedesktop.systemd1.Manager.Subscribe"
	}
	if err := s.obj.Call(method, 0).Err; err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	s.on = on
	return nil
}

func (s *subscriber) close() {
	_ = s.set(false)
	s.conn.Close()
}
