package host

import (
	"errors"
	"fmt"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
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
	// ErrRichUnavailable: the channel is in mode rich but rich channels
	// are disabled or its profile is not configured (any more).
	ErrRichUnavailable = errors.New("rich channel unavailable: rich.enabled is off or the channel's profile is not configured")
)

// Why a turn's context ended (its cause), read back by resultOf.
var (
	errCauseDeadline = fmt.Errorf("deadline: %w", ErrDeadline)
	errCauseCancel   = fmt.Errorf("cancel: %w", ErrCancelled)
)

// badRequest is ErrBadRequest with a reason about the caller's own input.
func badRequest(reason string) error { return api.BadRequest(reason) }
