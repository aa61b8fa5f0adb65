package unitctl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// UnitError says which unit failed and which limit: systemd's job result
// and the unit's own Result property (read over D-Bus at the failure, while
// the unit is still loaded), with the limit that Result points at. It
// matches ErrJob.
type UnitError struct {
	Op        string // start or stop
	Unit      string // the unit of the job (or the unit read, when no job)
	JobResult string // systemd's job result: failed, timeout, dependency, ... ("" when only the units' state was read)
	Failed    string // the unit that failed: Unit, or the dependency the job failed on (the credential unit)
	Result    string // Failed's Result property: timeout, exit-code, start-limit-hit, ... ("" when unread)
	Limit     string // the limit Result points at, e.g. "TimeoutStartSec=1m0s"; "" when none
}

func (e *UnitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Op, e.Unit)
	if e.JobResult != "" {
		fmt.Fprintf(&b, ": job result %q", e.JobResult)
	}
	if e.Result != "" {
		if e.Failed != "" && e.Failed != e.Unit {
			fmt.Fprintf(&b, ": %s", e.Failed)
		}
		fmt.Fprintf(&b, ": unit result %q", e.Result)
	}
	if e.Limit != "" {
		fmt.Fprintf(&b, " (%s)", e.Limit)
	}
	return b.String()
}

func (e *UnitError) Unwrap() error { return ErrJob }

// What names the failed unit for an operator-facing answer, without the
// turn id: "broker unit", "broker socket unit" or "credential unit".
func (e *UnitError) What() string {
	u := e.Failed
	if u == "" {
		u = e.Unit
	}
	switch {
	case strings.HasPrefix(u, "sandbox-credset@"):
		return "credential unit"
	case strings.HasSuffix(u, ".socket"):
		return "broker socket unit"
	}
	return "broker unit"
}

// Summary is the operator-facing reason, e.g. "broker unit failed to
// start (timeout, TimeoutStartSec=1m0s)": no turn id, no path.
func (e *UnitError) Summary() string {
	s := e.What() + " failed to " + e.Op
	why := e.Result
	if why == "" {
		why = e.JobResult
	}
	switch {
	case why != "" && e.Limit != "":
		return s + " (" + why + ", " + e.Limit + ")"
	case why != "":
		return s + " (" + why + ")"
	}
	return s
}

// explainTimeout bounds the property reads of one explanation.
const explainTimeout = 5 * time.Second

// unitResult reads a service or socket unit's Result and, for a timeout,
// the limit that ran out. ok is false when the unit cannot be read (not
// loaded any more, bus trouble): the caller keeps what it had.
func (m *Manager) unitResult(ctx context.Context, c conn, unit string) (result, limit string, ok bool) {
	typ := "Service"
	if strings.HasSuffix(unit, ".socket") {
		typ = "Socket"
	}
	p, err := c.GetUnitTypePropertyContext(ctx, unit, typ, "Result")
	if err != nil {
		return "", "", false
	}
	result, _ = p.Value.Value().(string)
	return result, m.limitOf(ctx, c, unit, typ, result), true
}

// limitOf names the limit a unit's Result points at.
func (m *Manager) limitOf(ctx context.Context, c conn, unit, typ, result string) string {
	readUSec := func(prop string) string {
		p, err := c.GetUnitTypePropertyContext(ctx, unit, typ, prop)
		if err != nil {
			return ""
		}
		us, ok := p.Value.Value().(uint64)
		if !ok {
			return ""
		}
		return systemdSpan(time.Duration(us) * time.Microsecond)
	}
	switch result {
	case "timeout":
		if typ == "Service" {
			if d := readUSec("TimeoutStartUSec"); d != "" {
				return "TimeoutStartSec=" + d
			}
		}
		return "its start or stop timeout"
	case "start-limit-hit":
		return "StartLimitBurst: one start a turn"
	case "oom-kill":
		return "MemoryMax"
	case "exit-code", "signal", "core-dump":
		return "its process " + strings.ReplaceAll(result, "-", " ")
	}
	return ""
}

// explainJob turns a failed job into a *UnitError: the unit's own Result
// and, when the job failed on a dependency, the dependency that failed.
func (m *Manager) explainJob(ctx context.Context, c conn, op, unit, jobResult string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), explainTimeout)
	defer cancel()
	e := &UnitError{Op: op, Unit: unit, JobResult: jobResult, Failed: unit}
	if jobResult == "dependency" {
		if dep, r, l, ok := m.failedDependency(ctx, c, unit); ok {
			e.Failed, e.Result, e.Limit = dep, r, l
			return e
		}
	}
	if r, l, ok := m.unitResult(ctx, c, unit); ok && r != "success" {
		e.Result, e.Limit = r, l
	}
	return e
}

// failedDependency finds which of a broker unit's dependencies failed.
func (m *Manager) failedDependency(ctx context.Context, c conn, unit string) (dep, result, limit string, ok bool) {
	id, ok := ids.ParseBrokerUnit(unit)
	if !ok {
		return "", "", "", false
	}
	cred, _ := ids.CredsetUnit(id)
	sock, _ := ids.BrokerSocketUnit(id)
	svc, _ := ids.BrokerServiceUnit(id)
	for _, dep := range []string{cred, sock, svc} {
		if dep == unit {
			continue
		}
		if r, l, ok := m.unitResult(ctx, c, dep); ok && r != "" && r != "success" {
			return dep, r, l, true
		}
	}
	return "", "", "", false
}

// ExplainBroker reports why a sandbox's broker units failed, read from the
// units' Result properties: the credential unit first (the broker needs
// it), then the service, then the socket. nil when none of them failed or
// they cannot be read. The host asks after a failed turn, before its
// cleanup stops (and so unloads) the units: a worker whose broker was
// socket-activated only sees its connection reset, while systemd knows
// the broker's start ran out of TimeoutStartSec.
func (m *Manager) ExplainBroker(ctx context.Context, turnID string) error {
	cred, err := ids.CredsetUnit(turnID)
	if err != nil {
		return nil
	}
	sock, svc, c, err := m.brokerUnits(turnID)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, explainTimeout)
	defer cancel()
	for _, unit := range []string{cred, svc, sock} {
		if r, l, ok := m.unitResult(ctx, c, unit); ok && r != "" && r != "success" {
			return &UnitError{Op: "start", Unit: unit, Failed: unit, Result: r, Limit: l}
		}
	}
	return nil
}

// AsUnitError finds a *UnitError in err's chain.
func AsUnitError(err error) (*UnitError, bool) {
	var ue *UnitError
	ok := errors.As(err, &ue)
	return ue, ok
}

// systemdSpan writes a duration as a unit file would: 10s, 1min, 1min 30s.
func systemdSpan(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d%time.Second != 0:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dmin", d/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dmin %ds", d/time.Minute, (d%time.Minute)/time.Second)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}
