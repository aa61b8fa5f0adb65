package host

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// hostStatuses are the host's own rows of the error-to-status table; each
// answers its category's own text.
var hostStatuses = []api.Status{
	{Err: ErrBadRequest, Code: http.StatusBadRequest, Reason: ErrBadRequest.Error()},
	{Err: ErrForbidden, Code: http.StatusForbidden, Reason: ErrForbidden.Error()},
	{Err: ErrNotFound, Code: http.StatusNotFound, Reason: ErrNotFound.Error()},
	{Err: ErrMethod, Code: http.StatusMethodNotAllowed, Reason: ErrMethod.Error()},
	{Err: ErrModeOff, Code: http.StatusConflict, Reason: ErrModeOff.Error()},
	{Err: ErrTooLarge, Code: http.StatusRequestEntityTooLarge, Reason: ErrTooLarge.Error()},
	{Err: ErrQueueFull, Code: http.StatusTooManyRequests, Reason: ErrQueueFull.Error()},
	{Err: ErrBusy, Code: http.StatusTooManyRequests, Reason: ErrBusy.Error()},
	{Err: ErrShuttingDown, Code: http.StatusServiceUnavailable, Reason: ErrShuttingDown.Error()},
	{Err: ErrDeadline, Code: http.StatusGatewayTimeout, Reason: ErrDeadline.Error()},
	{Err: ErrCancelled, Code: http.StatusConflict, Reason: ErrCancelled.Error()},
	{Err: fleetside.ErrModeContended, Code: http.StatusConflict, Reason: fleetside.ErrModeContended.Error()},
	// A cleanup failure is a failed turn to the caller.
	{Err: ErrCleanup, Code: http.StatusInternalServerError, Reason: ErrTurnFailed.Error()},
	{Err: ErrTurnFailed, Code: http.StatusInternalServerError, Reason: ErrTurnFailed.Error()},
}

// statuses is the one error-to-status table: every kind's rows (in the
// table's order: their categories are the more specific), then the host's.
var statuses = func() []api.Status {
	var out []api.Status
	for _, r := range registry {
		out = append(out, r.Statuses...)
	}
	return append(out, hostStatuses...)
}()

// statusOf is the one place an error becomes an HTTP status and reason:
// the host's categories and every kind's. A caller reads the category's
// generic reason, or the reason about its own input a refusal carries.
func statusOf(err error) (int, string) {
	var uf *UnitFailure
	if errors.As(err, &uf) {
		return uf.status(), uf.Error()
	}
	// A held channel: 503 with what holds it and what clears it (the
	// channel is the caller's own; the cleanup's error stays in the log).
	var held *sandbox.HeldError
	if errors.As(err, &held) {
		return http.StatusServiceUnavailable, held.Error()
	}
	return api.StatusOf(err, statuses)
}

// DefaultRetryAfter is a 429's Retry-After when nothing bounds when room
// frees (a delegated job or a precheck ends when it ends).
const DefaultRetryAfter = 10 * time.Second

// retryAfter is a 429's Retry-After header, in whole seconds (at least 1):
// the refusal's own hint when it has one (a run refused while finished
// results are held: when the first may go), queueWait
// (queue.maxWaitSeconds) for a turn (by then every turn waiting ahead of
// it has had its slot or been refused), DefaultRetryAfter otherwise.
func retryAfter(err error, queueWait time.Duration) string {
	d := DefaultRetryAfter
	var hint interface{ RetryAfter() time.Duration }
	switch {
	case errors.As(err, &hint) && hint.RetryAfter() > 0:
		d = hint.RetryAfter()
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrBusy):
		d = queueWait
	}
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}
