package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// Sessions (docs/api.md, Sessions).

// maxSessionFileBytes bounds one file answer: sessions.maxFileBytes' upper
// bound (64 MiB), base64, with its JSON.
const maxSessionFileBytes = 96 << 20

// maxExecLine bounds one exec event line: an output chunk is at most 32 KiB.
const maxExecLine = 1 << 20

// DefaultSessionCallTimeout bounds a session call but an exec: a create
// (the container started), a file of up to 64 MiB, a pause or resume.
const DefaultSessionCallTimeout = 2 * time.Minute

// DefaultExecTimeout bounds following one exec: its own timeout is at most
// an hour.
const DefaultExecTimeout = time.Hour + 5*time.Minute

func sessionPath(id string, rest ...string) []string {
	return append([]string{"v1", "sessions", escapeSegment(id)}, rest...)
}

// CreateSession creates a session owned by the caller.
func (c *Client) CreateSession(ctx context.Context, p apiwire.SessionCreate) (apiwire.Session, error) {
	var st apiwire.Session
	err := c.do(ctx, DefaultSessionCallTimeout, http.MethodPost, []string{"v1", "sessions"}, p, &st)
	return st, err
}

// Session returns one session's status.
func (c *Client) Session(ctx context.Context, id string) (apiwire.Session, error) {
	var st apiwire.Session
	err := c.do(ctx, c.opts.Timeout, http.MethodGet, sessionPath(id), nil, &st)
	return st, err
}

// Sessions lists the sessions the caller may see (its own; an admin's: all).
func (c *Client) Sessions(ctx context.Context) ([]apiwire.Session, error) {
	var out apiwire.SessionList
	err := c.do(ctx, c.opts.Timeout, http.MethodGet, []string{"v1", "sessions"}, nil, &out)
	return out.Sessions, err
}

// sessionAction is pause, resume or close.
func (c *Client) sessionAction(ctx context.Context, id, action string) (apiwire.Session, error) {
	var st apiwire.Session
	err := c.do(ctx, DefaultSessionCallTimeout, http.MethodPost, sessionPath(id, action), nil, &st)
	return st, err
}

// PauseSession pauses a session (memory kept, no CPU).
func (c *Client) PauseSession(ctx context.Context, id string) (apiwire.Session, error) {
	return c.sessionAction(ctx, id, "pause")
}

// ResumeSession resumes a paused session.
func (c *Client) ResumeSession(ctx context.Context, id string) (apiwire.Session, error) {
	return c.sessionAction(ctx, id, "resume")
}

// CloseSession removes a session and its files.
func (c *Client) CloseSession(ctx context.Context, id string) (apiwire.Session, error) {
	return c.sessionAction(ctx, id, "close")
}

// CancelExec kills a running exec of a session.
func (c *Client) CancelExec(ctx context.Context, id, execID string) (apiwire.Session, error) {
	var st apiwire.Session
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, sessionPath(id, "cancel"), apiwire.SessionCancel{ExecID: execID}, &st)
	return st, err
}

// PutFile writes data at path in a session (atomically, as its guest).
func (c *Client) PutFile(ctx context.Context, id, path string, mode uint32, data []byte) (apiwire.SessionFile, error) {
	var f apiwire.SessionFile
	err := c.do(ctx, DefaultSessionCallTimeout, http.MethodPost, sessionPath(id, "files", "put"), apiwire.SessionPut{Path: path, Mode: mode, Data: data}, &f)
	return f, err
}

// GetFile reads the file at path of a session (tar: the directory at path
// as a tar).
func (c *Client) GetFile(ctx context.Context, id, path string, tar bool) (apiwire.SessionFile, error) {
	op := "get"
	if tar {
		op = "tar"
	}
	var f apiwire.SessionFile
	err := c.doBounded(ctx, DefaultSessionCallTimeout, maxSessionFileBytes, http.MethodPost, sessionPath(id, "files", op), apiwire.SessionPath{Path: path}, &f)
	return f, err
}

// ListFiles lists the directory at path of a session.
func (c *Client) ListFiles(ctx context.Context, id, path string) (apiwire.SessionListing, error) {
	var l apiwire.SessionListing
	err := c.doBounded(ctx, DefaultSessionCallTimeout, 16<<20, http.MethodPost, sessionPath(id, "files", "list"), apiwire.SessionPath{Path: path}, &l)
	return l, err
}

// ErrExecStream: the exec's event stream ended without a result.
var ErrExecStream = errors.New("exec event stream ended early")

// Exec runs x in a session, calling fn for each event as it comes (output
// chunks included), and returns its result. An error event from the host
// is returned as an error; an error from fn stops following (and so, the
// connection closing, kills the exec). Bounded by DefaultExecTimeout.
func (c *Client) Exec(ctx context.Context, id string, x apiwire.SessionExec, fn func(apiwire.SessionExecEvent) error) (apiwire.SessionExecResult, error) {
	var res apiwire.SessionExecResult
	err := follow(ctx, c, http.MethodPost, "/v1/sessions/"+escapeSegment(id)+"/exec", x, DefaultExecTimeout, maxExecLine, ErrExecStream,
		func(op string, ev apiwire.SessionExecEvent) (bool, error) {
			if fn != nil {
				if err := fn(ev); err != nil {
					return true, err
				}
			}
			switch {
			case ev.Type == apiwire.ExecResult && ev.Result != nil:
				res = *ev.Result
				return true, nil
			case ev.Type == apiwire.ExecError:
				return true, fmt.Errorf("sandbox-host: %s: %s", op, ev.Error)
			}
			return false, nil
		})
	return res, err
}
