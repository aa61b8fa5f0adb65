package delegationrun

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
)

// The jobs' routes of the host API (docs/delegation.md): the host
// routes to them, checks the caller's role and maps their errors to a
// status.

// JobKeepalive is how long a finished-jobs stream stays silent before it
// sends a keepalive line (a variable for tests); clients bound their wait
// by a multiple of it.
var JobKeepalive = 15 * time.Second

// jobWriteTimeout bounds each write of a stream to a client that stopped
// reading.
const jobWriteTimeout = 30 * time.Second

// Routes are the jobs' endpoints.
func (k *Kind) Routes() []api.Route {
	return []api.Route{
		{Endpoint: api.Endpoint{Method: http.MethodPost, Pattern: "/v1/channels/{channel}/delegations", Role: peerauth.RoleClient}, Admits: true, Fn: k.handleDelegate},
		{Endpoint: api.Endpoint{Method: http.MethodGet, Pattern: "/v1/channels/{channel}/jobs/events", Role: peerauth.RoleClient}, Fn: k.handleEvents},
		{Endpoint: api.Endpoint{Method: http.MethodGet, Pattern: "/v1/jobs/{job}", Role: peerauth.RoleClient}, Fn: k.handleGet},
	}
}

// ChannelMode cancels the unfinished jobs of a channel turned off.
func (k *Kind) ChannelMode(channel, mode, _ string) {
	if mode == chanstate.ModeOff {
		k.CancelChannel(channel)
	}
}

// Stop: a job is counted by the host's Admit, so a stopping host waits for
// it; nothing of the kind outlives its jobs.
func (k *Kind) Stop() {}

func (k *Kind) handleDelegate(w http.ResponseWriter, r *http.Request, channel string) error {
	var req delegation.Request
	if err := api.DecodeBody(w, r, &req, api.MaxBodyBytes); err != nil {
		return err
	}
	st, err := k.Start(channel, api.CallerUID(r), req)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusAccepted, st)
	return nil
}

// handleGet answers a job with its report; another client's job does not
// exist for the caller (admins see every job).
func (k *Kind) handleGet(w http.ResponseWriter, r *http.Request, id string) error {
	j, err := k.jobs.Get(id)
	if err != nil {
		return err
	}
	if !j.Visible(api.CallerUID(r), api.IsAdmin(r)) {
		return delegation.ErrNotFound
	}
	api.WriteJSON(w, http.StatusOK, j.Status())
	return nil
}

// handleEvents streams the channel's finished jobs as NDJSON
// (delegation.Event): first those finished before the call and not yet
// delivered to the caller's uid, then each as it finishes; a keepalive line
// after JobKeepalive of silence. It ends when the client leaves or the host
// stops. A job counts as delivered to a uid once its line was flushed.
func (k *Kind) handleEvents(w http.ResponseWriter, r *http.Request, channel string) error {
	viewer, all := api.CallerUID(r), api.IsAdmin(r)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(k.host.Stopped(), cancel)()
	rc := api.StartStream(w)
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
		pending, err := k.jobs.Wait(wctx, channel, viewer, all)
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
			k.jobs.Collected(pending[i].ID, viewer)
		}
	}
}
