package host

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// MaxRunBodyBytes bounds POST /v1/runs: a 64 KiB command or 256 KiB of
// arguments, JSON-escaped, plus setup commands fit.
const MaxRunBodyBytes = 2 << 20

var runIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// RunList is GET /v1/runs.
type RunList struct {
	Runs []runs.Status `json:"runs"`
}

func (h *Host) isAdmin(r *http.Request) bool {
	return Authorize(h.opts.Access, h.opts.UID, peerFrom(r.Context())) >= RoleAdmin
}

func (h *Host) handleRunStart(w http.ResponseWriter, r *http.Request, _ string) error {
	if !h.accepting() {
		return ErrShuttingDown
	}
	var p runs.Params
	if err := decodeBodyN(w, r, &p, MaxRunBodyBytes); err != nil {
		return err
	}
	st, err := h.StartRun(p, peerFrom(r.Context()).UID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, st)
	return nil
}

func (h *Host) handleRunList(w http.ResponseWriter, r *http.Request, _ string) error {
	all := h.runs.List()
	admin := h.isAdmin(r)
	uid := peerFrom(r.Context()).UID
	out := RunList{Runs: []runs.Status{}}
	for _, st := range all {
		if admin || st.OwnerUID == uid {
			out.Runs = append(out.Runs, st)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Host) handleRunGet(w http.ResponseWriter, r *http.Request, run *runs.Run) error {
	// A finished run's answer carries its artifacts: a client that stops
	// reading must not hold it (and the connection) forever.
	h.writeRun(w, r, run, "status")
	return nil
}

// writeRun answers 200 with the run's document, streamed from the run
// (runs.Run.WriteStatusJSON): a client that stops reading holds one chunk
// of it, never a copy, and only until the write deadline.
func (h *Host) writeRun(w http.ResponseWriter, r *http.Request, run *runs.Run, what string) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(replyWriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	err := run.WriteStatusJSON(w)
	if err == nil {
		_, err = io.WriteString(w, "\n")
	}
	if err != nil {
		h.logAnswerCut(r, run, what, err)
	}
}

func (h *Host) handleRunCancel(w http.ResponseWriter, r *http.Request, run *runs.Run) error {
	if err := run.Cancel(); err != nil {
		return err
	}
	h.log.Info("run cancel requested", "run", run.ID(), "by_uid", peerFrom(r.Context()).UID)
	h.writeRun(w, r, run, "cancel")
	return nil
}

func (h *Host) handleRunApprove(w http.ResponseWriter, r *http.Request, run *runs.Run) error {
	if err := run.Approve(peerFrom(r.Context()).UID); err != nil {
		return err
	}
	h.writeRun(w, r, run, "approve")
	return nil
}

func (h *Host) handleRunDeny(w http.ResponseWriter, r *http.Request, run *runs.Run) error {
	if err := run.Deny(peerFrom(r.Context()).UID); err != nil {
		return err
	}
	h.log.Info("run network denied", "run", run.ID(), "by_uid", peerFrom(r.Context()).UID)
	h.writeRun(w, r, run, "deny")
	return nil
}

// handleRunEvents streams the run's events as NDJSON, history first, until
// its result or the client leaves. A stopping host ends the stream (the
// run's own result event comes first when the run finishes in time).
func (h *Host) handleRunEvents(w http.ResponseWriter, r *http.Request, run *runs.Run) error {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	err := run.Subscribe(r.Context(), func(ev runs.Event) error {
		// Each event (the result carries the artifacts, streamed from the
		// run) is written within the deadline of a turn's answer, or the
		// stream ends.
		_ = rc.SetWriteDeadline(time.Now().Add(replyWriteTimeout))
		if err := run.WriteEventJSON(w, ev); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil {
		h.logAnswerCut(r, run, "events", err)
	}
	return nil // the status line is sent: errors cannot be answered any more
}

// logAnswerCut logs a run answer that could not be written: a client that
// stopped reading past the write deadline is named as such.
func (h *Host) logAnswerCut(r *http.Request, run *runs.Run, what string, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		h.log.Warn("run answer cut: the client stopped reading", "run", run.ID(), "answer", what,
			"peer_uid", peerFrom(r.Context()).UID, "write_timeout_s", replyWriteTimeout.Seconds())
		return
	}
	if !errors.Is(err, context.Canceled) { // the client left
		h.log.Debug("run answer ended", "run", run.ID(), "answer", what, "err", err)
	}
}

// runStatusOf maps package runs' categories (statusOf calls it first).
func runStatusOf(err error) (int, string, bool) {
	switch {
	case errors.Is(err, runs.ErrInvalid):
		return http.StatusBadRequest, err.Error(), true
	case errors.Is(err, runs.ErrNotFound):
		return http.StatusNotFound, "no such run", true
	case errors.Is(err, runs.ErrState):
		return http.StatusConflict, "the run is not in a state that allows this", true
	case errors.Is(err, runs.ErrBusy):
		return http.StatusTooManyRequests, err.Error(), true
	case errors.Is(err, coderun.ErrJobTooLarge):
		return http.StatusBadRequest, err.Error(), true
	case errors.Is(err, ErrRunsDisabled):
		return http.StatusConflict, ErrRunsDisabled.Error(), true
	}
	return 0, "", false
}
