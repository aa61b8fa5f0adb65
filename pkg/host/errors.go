package host

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/unitctl"
)

// Error categories. Callers of the API see only the category's generic
// reason (and, for their own bad input, what was wrong with it); details of
// a failed turn go to the host log only. statusOf (status.go) maps them,
// and every kind's, to a status.
var (
	ErrBadRequest   = api.ErrBadRequest
	ErrForbidden    = errors.New("forbidden")
	ErrNotFound     = api.ErrNotFound
	ErrMethod       = errors.New("method not allowed")
	ErrModeOff      = errors.New("channel is not in sandbox mode")
	ErrTooLarge     = api.ErrTooLarge
	ErrShuttingDown = sandbox.ErrShuttingDown
	ErrTurnFailed   = errors.New("turn failed")
	ErrDeadline     = errors.New("turn deadline exceeded")
	ErrCancelled    = errors.New("turn cancelled")
	ErrCleanup      = sandbox.ErrCleanup
	ErrClientGone   = sandbox.ErrClientGone
	// ErrQueueFull and ErrBusy are admission's 429s (pkg/admission).
	ErrQueueFull = admission.ErrQueueFull
	ErrBusy      = admission.ErrBusy
)

// Why a turn's context ended (its cause), read back by resultOf.
var (
	errCauseDeadline = fmt.Errorf("deadline: %w", ErrDeadline)
	errCauseCancel   = fmt.Errorf("cancel: %w", ErrCancelled)
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

// badRequest is ErrBadRequest with a reason about the caller's own input.
func badRequest(reason string) error { return api.BadRequest(reason) }
