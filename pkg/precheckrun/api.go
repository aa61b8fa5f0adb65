package precheckrun

import (
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
)

// Routes are the prechecks' endpoint (docs/prechecks.md): the host routes
// to it, checks the caller's role and maps its errors to a status.
func (k *Kind) Routes() []api.Route {
	return []api.Route{
		{Endpoint: api.Endpoint{Method: http.MethodPost, Pattern: "/v1/prechecks", Role: peerauth.RoleClient}, Admits: true, Fn: k.handle},
	}
}

// Stop: a precheck is counted by the host's Admit, so a stopping host
// waits for it; nothing of the kind outlives its request.
func (k *Kind) Stop() {}

// handle is POST /v1/prechecks: the answer after the run's cleanup.
func (k *Kind) handle(w http.ResponseWriter, r *http.Request, _ string) error {
	var req precheck.Request
	if err := api.DecodeBody(w, r, &req, precheck.MaxRequestBytes); err != nil {
		return err
	}
	ans, err := k.Run(r.Context(), req)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, ans)
	return nil
}
