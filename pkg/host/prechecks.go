package host

import (
	"context"
	"errors"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
)

// Precheck scripts (DESIGN.md section 14) are the precheckrun kind; the
// host admits them, gives them a queue slot, lists them and answers their
// API.

// Precheck errors (precheckrun), under the names the host's callers use.
var (
	ErrPrechecksDisabled = precheckrun.ErrDisabled
	ErrPrecheckFailed    = precheckrun.ErrFailed
	ErrPrechecksBusy     = precheckrun.ErrBusy
)

// RunPrecheck runs one precheck to its answer: after its cleanup, always.
// A script's failure is an answer with an error; err is a refused request
// or the system's failure.
func (h *Host) RunPrecheck(ctx context.Context, req precheck.Request) (precheck.Answer, error) {
	return h.prechecks.Run(ctx, req)
}

// handlePrecheck is POST /v1/prechecks: the answer after the run's cleanup.
func (h *Host) handlePrecheck(w http.ResponseWriter, r *http.Request, _ string) error {
	if !h.accepting() {
		return ErrShuttingDown
	}
	var req precheck.Request
	if err := decodeBodyN(w, r, &req, precheck.MaxRequestBytes); err != nil {
		return err
	}
	ans, err := h.RunPrecheck(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}

// precheckStatusOf maps the precheck errors (statusOf calls it).
func precheckStatusOf(err error) (int, string, bool) {
	switch {
	case errors.Is(err, precheckrun.ErrDisabled):
		return http.StatusConflict, precheckrun.ErrDisabled.Error(), true
	case errors.Is(err, precheckrun.ErrBusy):
		return http.StatusTooManyRequests, precheckrun.ErrBusy.Error(), true
	case errors.Is(err, precheckrun.ErrFailed):
		return http.StatusInternalServerError, precheckrun.ErrFailed.Error(), true
	}
	return 0, "", false
}
