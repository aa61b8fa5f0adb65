package host

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
)

// JobKeepalive is how long a finished-jobs stream stays silent before it
// sends a keepalive line (a variable for tests); clients bound their wait
// by a multiple of it.
var JobKeepalive = 15 * time.Second

// jobWriteTimeout bounds each write of a stream to a client that stopped
// reading.
const jobWriteTimeout = 30 * time.Second

func (h *Host) handleDelegate(w http.ResponseWriter, r *http.Request, channel string) error {
	if !h.accepting() {
		return ErrShuttingDown
	}
	var req delegation.Request
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	st, err := h.StartDelegation(channel, peerFrom(r.Context()).UID, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, st)
	return nil
}

// handleJobGet answers a job with its report; another client's job does
// not exist for the caller (admins see every job).
func (h *Host) handleJobGet(w http.ResponseWriter, r *http.Request, id string) error {
	j, err := h.jobs.Get(id)
	if err != nil {
		return err
	}
	if !j.Visible(peerFrom(r.Context()).UID, h.isAdmin(r)) {
		return delegation.ErrNotFound
	}
	writeJSON(w, http.StatusOK, j.Status())
	return nil
}

// handleJobEvents streams the channel's finished jobs as NDJSON
// (delegation.Event): first those finished before the call and not yet
// delivered to the caller's uid, then each as it finishes; a keepalive line
// after JobKeepalive of silence. It ends when the client leaves or the host
// stops. A job counts as delivered to a uid once its line was flushed.
func (h *Host) handleJobEvents(w http.ResponseWriter, r *http.Request, channel string) error {
	viewer, all := peerFrom(r.Context()).UID, h.isAdmin(r)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(h.stopCtx, cancel)()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(ev delegation.Event) error {
		rc.SetWriteDeadline(time.Now().Add(jobWriteTimeout))
		if err := enc.Encode(ev); err != nil {
			return err
		}
		return rc.Flush()
	}
	if send(delegation.Event{Type: delegation.EventKeepalive}) != nil {
		return nil
	}
	for {
		wctx, wcancel := context.WithTimeout(ctx, JobKeepalive)
		pending, err := h.jobs.Wait(wctx, channel, viewer, all)
		wcancel()
		if ctx.Err() != nil {
			return nil // the status line is sent: errors cannot be answered any more
		}
		if err != nil {
			if send(delegation.Event{Type: delegation.EventKeepalive}) != nil {
				return nil
			}
			continue
		}
		for i := range pending {
			if send(delegation.Event{Type: delegation.EventJob, Job: &pending[i]}) != nil {
				return nil
			}
			h.jobs.Collected(pending[i].ID, viewer)
		}
	}
}

// jobStatusOf maps package delegation's categories (statusOf calls it).
func jobStatusOf(err error) (int, string, bool) {
	switch {
	case errors.Is(err, delegation.ErrBusy):
		return http.StatusTooManyRequests, err.Error(), true
	case errors.Is(err, delegation.ErrRefused):
		return http.StatusBadRequest, err.Error(), true
	case errors.Is(err, delegation.ErrNotFound):
		return http.StatusNotFound, "no such job", true
	case errors.Is(err, ErrDelegationDisabled):
		return http.StatusConflict, ErrDelegationDisabled.Error(), true
	}
	return 0, "", false
}
