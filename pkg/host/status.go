package host

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/delegationrun"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// statusOf is the one place an error becomes an HTTP status and reason:
// the host's categories and every kind's. A caller reads the category's
// generic reason, or the reason about its own input a refusal carries.
func statusOf(err error) (int, string) {
	for _, m := range []struct {
		err    error
		status int
		reason string // "" = the error's own text (the caller's input)
	}{
		// Code runs (pkg/runs, pkg/coderun).
		{runs.ErrInvalid, http.StatusBadRequest, ""},
		{runs.ErrNotFound, http.StatusNotFound, "no such run"},
		{runs.ErrState, http.StatusConflict, "the run is not in a state that allows this"},
		{runs.ErrBusy, http.StatusTooManyRequests, ""},
		{coderun.ErrJobTooLarge, http.StatusBadRequest, ""},
		{coderun.ErrRunsDisabled, http.StatusConflict, coderun.ErrRunsDisabled.Error()},
		// Delegated jobs (pkg/delegation, pkg/delegationrun).
		{delegation.ErrBusy, http.StatusTooManyRequests, ""},
		{delegation.ErrRefused, http.StatusBadRequest, ""},
		{delegation.ErrNotFound, http.StatusNotFound, "no such job"},
		{delegationrun.ErrDisabled, http.StatusConflict, delegationrun.ErrDisabled.Error()},
		// Prechecks (pkg/precheckrun).
		{precheckrun.ErrDisabled, http.StatusConflict, precheckrun.ErrDisabled.Error()},
		{precheckrun.ErrBusy, http.StatusTooManyRequests, precheckrun.ErrBusy.Error()},
		{precheckrun.ErrFailed, http.StatusInternalServerError, precheckrun.ErrFailed.Error()},
	} {
		if errors.Is(err, m.err) {
			if m.reason == "" {
				return m.status, err.Error()
			}
			return m.status, m.reason
		}
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
	var re *api.RequestError
	if errors.As(err, &re) {
		status, _ := statusOf(re.Kind)
		return status, re.Reason
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
