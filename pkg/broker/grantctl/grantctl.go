// Package grantctl is the host's side of a session broker's grant control
// routes (DESIGN.md section 18, policy.Grants): Bind gives the broker one
// exec's network (a policy.Grant) and Revoke takes it back. A session kind
// calls it; it imports only the standard library and pkg/policy, so any
// kind may.
//
// Guarantees: every call has a deadline (the caller's, else
// DefaultTimeout); it dials only the broker socket it is given, one
// connection per call (the broker checks each connection's SO_PEERCRED
// uid); an answer is bounded and strictly decoded; a refusal names its
// category (ErrRefused, ErrConflict, ErrUnknownGrant) and the broker's
// generic words only. Revoke returns nil only once the broker answered
// that the grant is gone: no request under it can pass any more, every
// connection opened under it is closed and every request (tunnel) it
// admitted has ended. Any error from Revoke leaves that unknown: the
// caller must treat the grant as live and end the broker (stop its unit);
// the grant's own deadline is the last bound.
package grantctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// DefaultTimeout bounds a call whose context has no deadline. A revoke
// waits for the grant's tunnels to end, which they do at once (their
// connections are closed), so seconds are plenty.
const DefaultTimeout = 10 * time.Second

// maxAnswerBytes bounds a control answer (a bind's carries the exec CA's
// certificate and placeholders, policy.GrantAnswer).
const maxAnswerBytes = policy.MaxGrantCABytes + 8<<10

// Errors of a control call.
var (
	// ErrBroker: the broker could not be reached or gave no answer (stopped,
	// crashed, its socket gone, the deadline passed).
	ErrBroker = errors.New("session broker unreachable")
	// ErrRefused: the broker refused the request (malformed or invalid
	// grant, a credential it cannot load, a peer other than the host).
	ErrRefused = errors.New("session broker refused the grant request")
	// ErrConflict: another exec's grant is live, or the revision is not
	// above every earlier one; nothing changed.
	ErrConflict = errors.New("session broker holds another grant or a later revision")
	// ErrUnknownGrant: no live grant names that exec (never bound, already
	// revoked, or expired and replaced); nothing changed.
	ErrUnknownGrant = errors.New("no live grant for that exec")
)

// Revisions numbers one session broker's grants: each Next is above
// every earlier one, across a host restart too (the wall clock in
// nanoseconds, or the last plus one when the clock has not moved on), as
// the broker requires. A clock stepped back below the broker's last
// revision makes its binds conflict (ErrConflict): the exec fails to
// start, nothing is granted.
type Revisions struct {
	mu   sync.Mutex
	last int64
}

// Next returns the next revision at now.
func (r *Revisions) Next(now time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = max(r.last+1, now.UnixNano())
	return r.last
}

// Client speaks the grant control routes on one session broker's socket.
type Client struct {
	// Socket is the broker's Unix socket path.
	Socket string
}

// Bind binds g (its exec's network) and returns once the broker admits
// the exec's requests under it. The answer carries the exec's
// placeholders and CA certificate when g's credentials declare variables
// (policy.GrantAnswer): the caller hands them to that exec only and never
// logs them (the answer's String and LogValue hide them).
func (c Client) Bind(ctx context.Context, g policy.Grant) (policy.GrantAnswer, error) {
	body, err := json.Marshal(g)
	if err != nil {
		return policy.GrantAnswer{}, err
	}
	var a policy.GrantAnswer
	if err := c.call(ctx, policy.RouteControlGrant, body, &a); err != nil {
		return policy.GrantAnswer{}, fmt.Errorf("grant of exec %s: %w", g.Exec, err)
	}
	if a.Exec != g.Exec || a.Revision != g.Revision {
		return policy.GrantAnswer{}, fmt.Errorf("grant of exec %s: %w: the answer names another grant", g.Exec, ErrBroker)
	}
	if err := a.Validate(); err != nil {
		// Bound, but unusable: the caller revokes it (ErrBroker).
		return policy.GrantAnswer{}, fmt.Errorf("grant of exec %s: %w: %v", g.Exec, ErrBroker, err)
	}
	return a, nil
}

// Revoke revokes exec's grant and returns what the broker cut, once
// nothing under the grant can pass any more (see the package comment).
func (c Client) Revoke(ctx context.Context, exec string) (policy.RevokeAnswer, error) {
	var a policy.RevokeAnswer
	body, _ := json.Marshal(policy.Revoke{Exec: exec})
	if err := c.call(ctx, policy.RouteControlRevoke, body, &a); err != nil {
		return a, fmt.Errorf("revoke of exec %s: %w", exec, err)
	}
	if a.Exec != exec {
		return a, fmt.Errorf("revoke of exec %s: %w: the answer names another exec", exec, ErrBroker)
	}
	return a, nil
}

func (c Client) call(ctx context.Context, route string, body []byte, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	socket := c.Socket
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		Proxy:                  nil,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 16 << 10,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+route, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBroker, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return fmt.Errorf("%w: answer cut: %v", ErrBroker, err)
	}
	if len(data) > maxAnswerBytes {
		return fmt.Errorf("%w: answer over %d bytes", ErrBroker, maxAnswerBytes)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		cat := ErrRefused
		switch resp.StatusCode {
		case http.StatusConflict:
			cat = ErrConflict
		case http.StatusGone:
			cat = ErrUnknownGrant
		case http.StatusServiceUnavailable, http.StatusInternalServerError:
			cat = ErrBroker
		}
		// The broker's public words only (a fixed category), quoted and cut.
		return fmt.Errorf("%w: %d %.64q", cat, resp.StatusCode, e.Error)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%w: answer malformed", ErrBroker)
	}
	return nil
}
