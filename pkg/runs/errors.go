package runs

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors of the run API. Every error this package (and the run
// registry, pkg/coderun) returns wraps exactly one of them, so the host maps
// them to HTTP statuses in one place.
var (
	// ErrInvalid: the client's input (or the supervisor's answer, in
	// CheckArtifacts) was refused. The message names the parameter and is
	// meant for the API client; it never echoes the refused value.
	ErrInvalid = errors.New("invalid run parameters")
	// ErrNotFound: no such run in this registry (never created, pruned, or
	// created before the host restarted).
	ErrNotFound = errors.New("run not found")
	// ErrState: the run's state does not allow the operation (approve a run
	// that is not awaiting approval, start a finished run, ...).
	ErrState = errors.New("run is not in a state that allows this")
	// ErrBusy: too many unfinished runs.
	ErrBusy = errors.New("too many active runs")
	// ErrDenied: network was denied by a human or the approval timed out.
	ErrDenied = errors.New("network was denied")
	// ErrCancelled: the run was cancelled.
	ErrCancelled = errors.New("run was cancelled")
)

// refusal is an ErrInvalid whose text is only the client-facing message
// ("artifacts[2]: must not contain .."), without the sentinel's text.
type refusal struct{ msg string }

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return ErrInvalid }

// Invalidf returns an ErrInvalid whose text is only the formatted message
// (for the client; it must not echo the refused value).
func Invalidf(format string, a ...any) error {
	return &refusal{msg: fmt.Sprintf(format, a...)}
}

// busy is an ErrBusy whose text is only the client-facing message.
type busy struct {
	msg   string
	retry time.Duration
}

func (e *busy) Error() string { return e.msg }
func (e *busy) Unwrap() error { return ErrBusy }

// RetryAfter is when the refused call may succeed (the host's
// Retry-After header).
func (e *busy) RetryAfter() time.Duration { return e.retry }

// BusyRetryAfter is an ErrBusy's Retry-After when nothing says when a run
// ends (a run's own timeout may be an hour): soon enough for short runs.
const BusyRetryAfter = 10 * time.Second

// Busyf returns an ErrBusy whose text is only the formatted message,
// retried after BusyRetryAfter.
func Busyf(format string, a ...any) error {
	return &busy{msg: fmt.Sprintf(format, a...), retry: BusyRetryAfter}
}

// BusyRetryf is Busyf retried after d.
func BusyRetryf(d time.Duration, format string, a ...any) error {
	return &busy{msg: fmt.Sprintf(format, a...), retry: d}
}
