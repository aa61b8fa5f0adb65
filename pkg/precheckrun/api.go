package precheckrun

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

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

// handle is POST /v1/prechecks: the runner's answer as soon as its result
// line is whole, the cleanup after it (the precheck's slot held until then);
// every other answer after the cleanup.
func (k *Kind) handle(w http.ResponseWriter, r *http.Request, _ string) error {
	var req precheck.Request
	if err := api.DecodeBody(w, r, &req, precheck.MaxRequestBytes); err != nil {
		return err
	}
	answered := false
	ans, err := k.RunAnswering(r.Context(), req, func(a precheck.Answer) {
		answered = true // in this goroutine, before RunAnswering returns
		writeAnswer(w, a)
	})
	if answered {
		return nil // the response is complete: nothing more may be written
	}
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, ans)
	return nil
}

// writeAnswer writes a precheck's 200 whole, with its length, and flushes
// it, so the client has it while the handler still runs the cleanup; the
// connection closes after it, so a client's next request never waits for
// that cleanup (as a sealed turn's answer, pkg/host).
func writeAnswer(w http.ResponseWriter, a precheck.Answer) {
	body, err := json.Marshal(a)
	if err != nil { // strings and a bool: cannot happen
		return
	}
	body = append(body, '\n')
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	hd.Set("Connection", "close")
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(api.WriteTimeout))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		return // the client left; the precheck's log line says how it ended
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
