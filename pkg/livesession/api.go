package livesession

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
)

// The sessions' routes of the host API (docs/api.md, Sessions).

// MaxExecBodyBytes bounds POST .../exec: sessionwire's stdin, args and
// env bounds, base64 and JSON escaped, fit.
const MaxExecBodyBytes = 2 << 20

// createTimeout bounds a create's Docker calls.
const createTimeout = 60 * time.Second

// Routes are the sessions' endpoints.
func (k *Kind) Routes() []api.Route {
	client := peerauth.RoleClient
	route := func(method, pattern string, fn api.Handler) api.Route {
		return api.Route{Endpoint: api.Endpoint{Method: method, Pattern: pattern, Role: client}, Fn: fn}
	}
	admin := func(method, pattern string, fn api.Handler) api.Route { // network.go
		return api.Route{Endpoint: api.Endpoint{Method: method, Pattern: pattern, Role: peerauth.RoleAdmin}, Fn: fn}
	}
	create := route(http.MethodPost, "/v1/sessions", k.handleCreate)
	create.Admits = true
	return []api.Route{
		create,
		route(http.MethodGet, "/v1/sessions", k.handleList),
		route(http.MethodGet, "/v1/sessions/{session}", k.with(k.handleShow)),
		route(http.MethodPost, "/v1/sessions/{session}/close", k.with(k.handleClose)),
		route(http.MethodPost, "/v1/sessions/{session}/exec", k.with(k.handleExec)),
		route(http.MethodPost, "/v1/sessions/{session}/cancel", k.with(k.handleCancel)),
		admin(http.MethodPost, "/v1/sessions/{session}/approve", k.with(k.handleApprove)),
		admin(http.MethodPost, "/v1/sessions/{session}/deny", k.with(k.handleDeny)),
		route(http.MethodPost, "/v1/sessions/{session}/pause", k.with(k.handlePause)),
		route(http.MethodPost, "/v1/sessions/{session}/resume", k.with(k.handleResume)),
		route(http.MethodPost, "/v1/sessions/{session}/files/put", k.with(k.handlePut)),
		route(http.MethodPost, "/v1/sessions/{session}/files/get", k.with(k.handleGet)),
		route(http.MethodPost, "/v1/sessions/{session}/files/tar", k.with(k.handleTar)),
		route(http.MethodPost, "/v1/sessions/{session}/files/list", k.with(k.handleLs)),
		route(http.MethodPut, "/v1/sessions/{session}/files/raw", k.with(k.handlePutRaw)), // rawfiles.go
		route(http.MethodGet, "/v1/sessions/{session}/files/raw", k.with(k.handleGetRaw)),
	}
}

// with looks the session up for its handler: another client's session
// answers exactly as one that does not exist; an admin reaches all.
func (k *Kind) with(fn func(http.ResponseWriter, *http.Request, *Session) error) api.Handler {
	return func(w http.ResponseWriter, r *http.Request, id string) error {
		s, err := k.Lookup(id, api.CallerUID(r), api.IsAdmin(r))
		if err != nil {
			return err
		}
		return fn(w, r, s)
	}
}

func (k *Kind) handleCreate(w http.ResponseWriter, r *http.Request, _ string) error {
	var p apiwire.SessionCreate
	if err := api.DecodeBody(w, r, &p, api.MaxBodyBytes); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), createTimeout)
	defer cancel()
	st, err := k.Create(ctx, p, api.CallerUID(r))
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusCreated, st)
	return nil
}

func (k *Kind) handleList(w http.ResponseWriter, r *http.Request, _ string) error {
	api.WriteJSON(w, http.StatusOK, apiwire.SessionList{Sessions: k.List(api.CallerUID(r), api.IsAdmin(r))})
	return nil
}

func (k *Kind) handleShow(w http.ResponseWriter, r *http.Request, s *Session) error {
	api.WriteJSON(w, http.StatusOK, s.Status())
	return nil
}

func (k *Kind) handleClose(w http.ResponseWriter, r *http.Request, s *Session) error {
	s.log.Info("session close requested", "by_uid", api.CallerUID(r))
	k.Close(s)
	api.WriteJSON(w, http.StatusOK, s.Status())
	return nil
}

func (k *Kind) handlePause(w http.ResponseWriter, r *http.Request, s *Session) error {
	if err := k.Pause(s); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, s.Status())
	return nil
}

func (k *Kind) handleResume(w http.ResponseWriter, r *http.Request, s *Session) error {
	if err := k.Resume(s); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, s.Status())
	return nil
}

func (k *Kind) handleCancel(w http.ResponseWriter, r *http.Request, s *Session) error {
	var c apiwire.SessionCancel
	if err := api.DecodeBody(w, r, &c, api.MaxBodyBytes); err != nil {
		return err
	}
	if err := k.Cancel(r.Context(), s, c.ExecID); err != nil {
		return err
	}
	s.log.Info("session exec cancelled", "exec", c.ExecID, "by_uid", api.CallerUID(r))
	api.WriteJSON(w, http.StatusOK, s.Status())
	return nil
}

// handleExec streams the exec's events as NDJSON: an exec refused before
// it started is answered with its status; once the first event is written
// the stream carries the rest, each line within api.WriteTimeout (a client
// that stops reading, or leaves, kills the exec).
func (k *Kind) handleExec(w http.ResponseWriter, r *http.Request, s *Session) error {
	var x apiwire.SessionExec
	if err := api.DecodeBody(w, r, &x, MaxExecBodyBytes); err != nil {
		return err
	}
	var rc *http.ResponseController
	enc := json.NewEncoder(w)
	emit := func(ev apiwire.SessionExecEvent) error {
		if rc == nil {
			rc = api.StartStream(w)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(api.WriteTimeout))
		if err := enc.Encode(ev); err != nil {
			return err
		}
		if ev.Type == apiwire.ExecResult || ev.Type == apiwire.ExecError {
			// The last event: it goes out with the stream's end when the
			// handler returns, at once, in one write (the client reads
			// the stream to its end and keeps the connection).
			return nil
		}
		return rc.Flush()
	}
	err := k.Exec(r.Context(), s, x, emit)
	if rc == nil {
		return err
	}
	if err != nil {
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.log.Warn("session exec answer cut: the client stopped reading; exec killed", "peer_uid", api.CallerUID(r))
		case errors.Is(err, ErrEnded):
			_ = emit(apiwire.SessionExecEvent{Type: apiwire.ExecError, Error: "the session ended during the exec"})
		}
	}
	return nil // the status line is sent
}

func (k *Kind) handlePut(w http.ResponseWriter, r *http.Request, s *Session) error {
	var p apiwire.SessionPut
	max := int64(k.cfg.Sessions.MaxFileBytes)/3*4 + 8<<10
	if err := api.DecodeBody(w, r, &p, max); err != nil {
		return err
	}
	f, err := k.Put(r.Context(), s, p.Path, p.Mode, p.Data)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, f)
	return nil
}

func (k *Kind) handleGet(w http.ResponseWriter, r *http.Request, s *Session) error {
	return k.get(w, r, s, false)
}

func (k *Kind) handleTar(w http.ResponseWriter, r *http.Request, s *Session) error {
	return k.get(w, r, s, true)
}

func (k *Kind) get(w http.ResponseWriter, r *http.Request, s *Session, tar bool) error {
	var p apiwire.SessionPath
	if err := api.DecodeBody(w, r, &p, api.MaxBodyBytes); err != nil {
		return err
	}
	f, err := k.Get(r.Context(), s, p.Path, tar)
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(api.WriteTimeout))
	api.WriteJSON(w, http.StatusOK, f)
	return nil
}

func (k *Kind) handleLs(w http.ResponseWriter, r *http.Request, s *Session) error {
	var p apiwire.SessionPath
	if err := api.DecodeBody(w, r, &p, api.MaxBodyBytes); err != nil {
		return err
	}
	l, err := k.ListDir(r.Context(), s, p.Path)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, l)
	return nil
}
