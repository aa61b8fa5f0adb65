package host

import (
	"errors"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
)

// Error categories. Callers of the API see only the category's generic
// reason (and, for their own bad input, what was wrong with it); details of
// a failed turn go to the host log only.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrForbidden    = errors.New("forbidden")
	ErrNotFound     = errors.New("not found")
	ErrMethod       = errors.New("method not allowed")
	ErrModeOff      = errors.New("channel is not in sandbox mode")
	ErrTooLarge     = errors.New("request body too large")
	ErrShuttingDown = sandbox.ErrShuttingDown
	ErrTurnFailed   = errors.New("turn failed")
	ErrDeadline     = errors.New("turn deadline exceeded")
	ErrCancelled    = errors.New("turn cancelled")
	ErrCleanup      = sandbox.ErrCleanup
	ErrClientGone   = sandbox.ErrClientGone
)

// UnitFailure is a turn failed by one of its systemd units: the answer
// names which unit and which limit (unitctl.UnitError.Summary: no turn id,
// nothing a guest sent), so the operator reading an API error sees "broker
// unit failed to start (timeout, TimeoutStartSec=1min)" rather than "turn
// failed". A timeout is answered 503 (the box is overloaded: try again),
// any other failure 500. It matches ErrTurnFailed.
type UnitFailure struct{ Unit *unitctl.UnitError }

func (e *UnitFailure) Error() string { return ErrTurnFailed.Error() + ": " + e.Unit.Summary() }
func (e *UnitFailure) Unwrap() error { return ErrTurnFailed }

func (e *UnitFailure) status() int {
	if e.Unit.Result == "timeout" || e.Unit.JobResult == "timeout" {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// requestError carries a reason about the caller's own input.
type requestError struct {
	kind   error
	reason string
}

func (e *requestError) Error() string { return e.reason }
func (e *requestError) Unwrap() error { return e.kind }

func badRequest(reason string) error { return &requestError{ErrBadRequest, reason} }

// statusOf is the one place an error becomes an HTTP status and reason.
func statusOf(err error) (int, string) {
	if status, reason, ok := runStatusOf(err); ok {
		return status, reason
	}
	if status, reason, ok := jobStatusOf(err); ok {
		return status, reason
	}
	if status, reason, ok := precheckStatusOf(err); ok {
		return status, reason
	}
	var pr *precheckrun.Refusal
	if errors.As(err, &pr) {
		status, _ := statusOf(pr.Kind)
		return status, pr.Reason
	}
	var uf *UnitFailure
	if errors.As(err, &uf) {
		return uf.status(), uf.Error()
	}
	var re *requestError
	if errors.As(err, &re) {
		status, _ := statusOf(re.kind)
		return status, re.reason
	}
	for _, m := range []struct {
		err    error
		status int
	}{
		{ErrBadRequest, http.StatusBadRequest},
		{precheckrun.ErrInvalid, http.StatusBadRequest},
		{precheckrun.ErrForbidden, http.StatusForbidden},
		{ErrForbidden, http.StatusForbidden},
		{ErrNotFound, http.StatusNotFound},
		{ErrMethod, http.StatusMethodNotAllowed},
		{ErrModeOff, http.StatusConflict},
		{ErrTooLarge, http.StatusRequestEntityTooLarge},
		{ErrQueueFull, http.StatusTooManyRequests},
		{ErrBusy, http.StatusTooManyRequests},
		{ErrShuttingDown, http.StatusServiceUnavailable},
		{ErrDeadline, http.StatusGatewayTimeout},
		{ErrCancelled, http.StatusConflict},
		// A cleanup failure is a failed turn to the caller.
		{ErrCleanup, http.StatusInternalServerError},
		{ErrTurnFailed, http.StatusInternalServerError},
	} {
		if errors.Is(err, m.err) {
			if m.err == ErrCleanup {
				return m.status, ErrTurnFailed.Error()
			}
			return m.status, m.err.Error()
		}
	}
	return http.StatusInternalServerError, "internal error"
}
