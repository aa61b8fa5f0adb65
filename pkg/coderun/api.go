package coderun

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// The runs' routes of the host API (docs/code-runs.md): the host routes
// to them, checks the caller's role and maps their errors to a status.

// MaxRunBodyBytes bounds POST /v1/runs: a 64 KiB command or 256 KiB of
// arguments, JSON-escaped, plus setup commands fit.
const MaxRunBodyBytes = 2 << 20

// RunList is GET /v1/runs.
type RunList struct {
	Runs []runs.Status `json:"runs"`
}

// Routes are the runs' endpoints.
func (k *Kind) Routes() []api.Route {
	return []api.Route{
		{Endpoint: api.Endpoint{Method: http.MethodGet, Pattern: "/v1/runs", Role: peerauth.RoleClient}, Fn: k.handleList},
		{Endpoint: api.Endpoint{Method: http.MethodPost, Pattern: "/v1/runs", Role: peerauth.RoleClient}, Admits: true, Fn: k.handleStart},
		{Endpoint: api.Endpoint{Method: http.MethodGet, Pattern: "/v1/runs/{run}", Role: peerauth.RoleClient}, Fn: k.withRun(k.handleGet)},
		{Endpoint: api.Endpoint{Method: http.MethodGet, Pattern: "/v1/runs/{run}/events", Role: peerauth.RoleClient}, Fn: k.withRun(k.handleEvents)},
		{Endpoint: api.Endpoint{Method: http.MethodPost, Pattern: "/v1/runs/{run}/cancel", Role: peerauth.RoleClient}, Fn: k.withRun(k.handleCancel)},
		{Endpoint: api.Endpoint{Method: http.MethodPost, Pattern: "/v1/runs/{run}/approve", Role: peerauth.RoleAdmin}, Fn: k.withRunOrFleet(k.handleApprove, true)},
		{Endpoint: api.Endpoint{Method: http.MethodPost, Pattern: "/v1/runs/{run}/deny", Role: peerauth.RoleAdmin}, Fn: k.withRunOrFleet(k.handleDeny, false)},
		{Endpoint: api.Endpoint{Method: http.MethodGet, Pattern: "/v1/credentials", Role: peerauth.RoleClient}, Fn: k.handleCredentials},
	}
}

// handleCredentials lists the credentials the caller's run (of the project
// in ?project=, or of none) may ask for, and the variable each placeholder
// arrives in: what an approval names before the run exists (the MCP
// elicitation) and what a client needs to write its code against. An
// admin sees the same as a client of its uid would: the list is of what
// may be asked, and an admin asks as its uid does.
func (k *Kind) handleCredentials(w http.ResponseWriter, r *http.Request, _ string) error {
	project, err := credentialsProject(r.URL.Query())
	if err != nil {
		return err
	}
	if project != "" {
		if _, ok := k.cfg.Runs.ProjectPath(project); !ok {
			return api.BadRequest("project is not declared (runs.projects)")
		}
	}
	api.WriteJSON(w, http.StatusOK, k.Credentials(project, api.CallerUID(r)))
	return nil
}

// credentialsProject reads GET /v1/credentials' only parameter: any other,
// or project given twice, is refused rather than ignored.
func credentialsProject(q url.Values) (string, error) {
	for key, vs := range q {
		if key != "project" {
			return "", api.BadRequest("unknown query parameter (only project)")
		}
		if len(vs) != 1 {
			return "", api.BadRequest("project given more than once")
		}
	}
	return q.Get("project"), nil
}

// Credentials are the egress.credentials a run of project by uid may ask
// for (config.EgressCredential.MayAsk), in the configuration's order.
func (k *Kind) Credentials(project string, uid int) runs.CredentialList {
	out := runs.CredentialList{Credentials: []runs.Credential{}}
	for _, e := range k.cfg.Egress.Credentials {
		if e.MayAsk(project, uid) {
			out.Credentials = append(out.Credentials, runs.Credential{Name: e.Name, Variable: e.EnvName(), Host: e.Host, Port: e.Port})
		}
	}
	return out
}

// Stop discards every run standby and waits for it. A run is counted by
// the host's Admit, so a stopping host has waited for its runs: none binds
// a standby or refills one any more.
func (k *Kind) Stop() { k.CloseStandbys() }

func (k *Kind) handleStart(w http.ResponseWriter, r *http.Request, _ string) error {
	var p runs.Params
	if err := api.DecodeBody(w, r, &p, MaxRunBodyBytes); err != nil {
		return err
	}
	st, err := k.Start(p, api.CallerUID(r))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusAccepted, st)
	return nil
}

func (k *Kind) handleList(w http.ResponseWriter, r *http.Request, _ string) error {
	admin, uid := api.IsAdmin(r), api.CallerUID(r)
	out := RunList{Runs: []runs.Status{}}
	for _, st := range k.runs.List() {
		if admin || st.OwnerUID == uid {
			out.Runs = append(out.Runs, st)
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

// withRun looks up the run named by the path for its handler: another
// client's run does not exist for the caller, with the very error of a run
// that does not exist (the same answer byte for byte, so no client learns
// which ids are live); an admin sees all.
func (k *Kind) withRun(fn func(http.ResponseWriter, *http.Request, *Run) error) api.Handler {
	return func(w http.ResponseWriter, r *http.Request, id string) error {
		run, err := k.runs.Get(id)
		if err != nil {
			return err
		}
		if !api.IsAdmin(r) && run.Owner() != api.CallerUID(r) {
			return runs.ErrNotFound
		}
		return fn(w, r, run)
	}
}

// withRunOrFleet is withRun for the approval routes: a run this box does
// not hold may be another box's awaiting its approval (fleet.go).
func (k *Kind) withRunOrFleet(fn func(http.ResponseWriter, *http.Request, *Run) error, approve bool) api.Handler {
	local := k.withRun(fn)
	return func(w http.ResponseWriter, r *http.Request, id string) error {
		err := local(w, r, id)
		if errors.Is(err, runs.ErrNotFound) && k.queue != nil {
			if _, gerr := k.runs.Get(id); gerr != nil {
				return k.handleRemoteDecision(w, r, id, approve)
			}
		}
		return err
	}
}

func (k *Kind) handleGet(w http.ResponseWriter, r *http.Request, run *Run) error {
	// A finished run's answer carries its artifacts: a client that stops
	// reading must not hold it (and the connection) forever.
	k.writeRun(w, r, run, "status")
	return nil
}

// writeRun answers 200 with the run's document, streamed from the run
// (Run.WriteStatusJSON): a client that stops reading holds one chunk
// of it, never a copy, and only until the write deadline.
func (k *Kind) writeRun(w http.ResponseWriter, r *http.Request, run *Run, what string) {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(api.WriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	err := run.WriteStatusJSON(w)
	if err == nil {
		_, err = io.WriteString(w, "\n")
	}
	if err != nil {
		k.logAnswerCut(r, run, what, err)
	}
}

func (k *Kind) handleCancel(w http.ResponseWriter, r *http.Request, run *Run) error {
	if err := run.Cancel(); err != nil {
		return err
	}
	k.log.Info("run cancel requested", "run", run.ID(), "by_uid", api.CallerUID(r))
	k.writeRun(w, r, run, "cancel")
	return nil
}

func (k *Kind) handleApprove(w http.ResponseWriter, r *http.Request, run *Run) error {
	if err := k.decide(run, true, api.CallerUID(r)); err != nil {
		return err
	}
	k.writeRun(w, r, run, "approve")
	return nil
}

func (k *Kind) handleDeny(w http.ResponseWriter, r *http.Request, run *Run) error {
	if err := k.decide(run, false, api.CallerUID(r)); err != nil {
		return err
	}
	k.log.Info("run network denied", "run", run.ID(), "by_uid", api.CallerUID(r))
	k.writeRun(w, r, run, "deny")
	return nil
}

// handleEvents streams the run's events as NDJSON, history first, until
// its result or the client leaves. A stopping host ends the stream (the
// run's own result event comes first when the run finishes in time).
func (k *Kind) handleEvents(w http.ResponseWriter, r *http.Request, run *Run) error {
	rc := api.StartStream(w)
	err := run.Subscribe(r.Context(), func(ev runs.Event) error {
		// Each event (the result carries the artifacts, streamed from the
		// run) is written within the deadline of a turn's answer, or the
		// stream ends.
		_ = rc.SetWriteDeadline(time.Now().Add(api.WriteTimeout))
		if err := run.WriteEventJSON(w, ev); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil {
		k.logAnswerCut(r, run, "events", err)
	}
	return nil // the status line is sent: errors cannot be answered any more
}

// logAnswerCut logs a run answer that could not be written: a client that
// stopped reading past the write deadline is named as such.
func (k *Kind) logAnswerCut(r *http.Request, run *Run, what string, err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		k.log.Warn("run answer cut: the client stopped reading", "run", run.ID(), "answer", what,
			"peer_uid", api.CallerUID(r), "write_timeout_s", api.WriteTimeout.Seconds())
		return
	}
	if !errors.Is(err, context.Canceled) { // the client left
		k.log.Debug("run answer ended", "run", run.ID(), "answer", what, "err", err)
	}
}
