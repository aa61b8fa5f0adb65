package client

import (
	"context"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// ApproveExec approves a session's network exec waiting for a human's
// decision (the admin role; docs/sessions.md, Network execs).
func (c *Client) ApproveExec(ctx context.Context, id, execID string) (apiwire.Session, error) {
	return c.decideExec(ctx, id, execID, "approve")
}

// DenyExec denies a session's network exec waiting for a decision: it
// never starts (the admin role).
func (c *Client) DenyExec(ctx context.Context, id, execID string) (apiwire.Session, error) {
	return c.decideExec(ctx, id, execID, "deny")
}

func (c *Client) decideExec(ctx context.Context, id, execID, what string) (apiwire.Session, error) {
	var st apiwire.Session
	err := c.do(ctx, c.opts.Timeout, http.MethodPost, sessionPath(id, what), apiwire.SessionDecision{ExecID: execID}, &st)
	return st, err
}
