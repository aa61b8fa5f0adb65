package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// Sessions (docs/api.md, Sessions).

// maxSessionFileBytes bounds one file answer: sessions.maxFileBytes' upper
// bound (64 MiB).
const maxSessionFileBytes = 64 << 20

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

// PutFile writes data at path in a session (atomically, as its guest;
// mode 0: 0644). The bytes go as the body of PUT .../files/raw, not as
// base64 in JSON.
func (c *Client) PutFile(ctx context.Context, id, path string, mode uint32, data []byte) (apiwire.SessionFile, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	var f apiwire.SessionFile
	err := c.call(ctx, DefaultSessionCallTimeout, http.MethodPut, sessionPath(id, "files", "raw"), q.Encode(), bytes.NewReader(data), rawContentType,
		func(resp *http.Response, op string) error {
			return decodeAnswer(resp, op, maxResponseBytes, &f)
		})
	return f, err
}

// GetFile reads the file at path of a session (tar: the directory at path
// as a tar), from GET .../files/raw: the bytes are the answer's body,
// read into a buffer of its announced length (at most
// maxSessionFileBytes).
func (c *Client) GetFile(ctx context.Context, id, path string, tar bool) (apiwire.SessionFile, error) {
	q := url.Values{"path": {path}}
	if tar {
		q.Set("tar", "true")
	}
	f := apiwire.SessionFile{Path: path}
	err := c.call(ctx, DefaultSessionCallTimeout, http.MethodGet, sessionPath(id, "files", "raw"), q.Encode(), nil, "",
		func(resp *http.Response, op string) error {
			if resp.ContentLength < 0 || resp.ContentLength > maxSessionFileBytes {
				return fmt.Errorf("sandbox-host: %s: answer of %d bytes, want a length of at most %d", op, resp.ContentLength, maxSessionFileBytes)
			}
			f.Data = make([]byte, resp.ContentLength)
			if _, err := io.ReadFull(resp.Body, f.Data); err != nil {
				return fmt.Errorf("sandbox-host: %s: read answer: %w", op, err)
			}
			f.Size = resp.ContentLength
			h := resp.Header
			if m, err := strconv.ParseUint(h.Get(HeaderFileMode), 8, 32); err == nil {
				f.Mode = uint32(m)
			}
			f.Changed = h.Get(HeaderFileChanged) == "true"
			if n, err := strconv.Atoi(h.Get(HeaderFileSkipped)); err == nil {
				f.Skipped = n
			}
			return nil
		})
	return f, err
}

// Headers of a raw get's answer (docs/api.md, Sessions).
const (
	HeaderFileMode    = "X-Sandbox-File-Mode"
	HeaderFileChanged = "X-Sandbox-File-Changed"
	HeaderFileSkipped = "X-Sandbox-File-Skipped"
)

// rawContentType is a raw put's body type.
const rawContentType = "application/octet-stream"

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
