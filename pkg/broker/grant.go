package broker

// A session's broker (policy.Grants, DESIGN.md section 18) lives as long
// as its session but holds a network only while an approved exec runs: the
// host binds the exec's grant (policy.Grant) over the host-only control
// path when the exec starts and revokes it when the exec ends
// (pkg/broker/grantctl is the host's client).
//
//   - POST /control/grant and /control/revoke: the host only (the peer's
//     SO_PEERCRED uid must be the policy file owner's, checked before
//     anything is read). One grant is live at a time; a bind while another
//     exec's grant is live, or of a revision not above every earlier one,
//     is a conflict and changes nothing. A grant ends by itself at its
//     deadline.
//   - Every proxy request (CONNECT or absolute form) is admitted by
//     admitGrant, per request, against the live grant: none live, refused.
//     A guest connection belongs to the grant of its first admitted
//     request; a request on a connection of another (ended) grant is
//     refused, so a later exec's grant never revives an earlier one's
//     connections.
//   - Revoke is synchronous: under the lock every admission takes it
//     unsets the grant (no request is admitted under it from then on),
//     cancels the context every admitted request runs under (a CONNECT
//     tunnel closes both its ends on it, an absolute-form exchange
//     aborts), closes every guest connection that carried a request of the
//     grant, and answers only once every request it admitted has returned
//     (a tunnel's handler returns after closing both its connections). A
//     revoke that cannot wait that long (the host's deadline) answers an
//     error: nothing passes any more, but the host cannot know the
//     destination sockets are closed, and grantctl tells it to end the
//     broker.
//
//   - A grant whose credentials declare a variable gets placeholders and a
//     CA of its own, minted at the bind (intercept.go's mintInterception)
//     and answered to the host only (policy.GrantAnswer); they live in the
//     grant's proxy, so they are honoured only while the grant is live.
//
// A refusal to the guest is a generic 403; its log line names the kind,
// the destination as asked (bounded) and the exec whose ended grant the
// connection belonged to, never a payload. Each grant's proxy logs with
// the exec id, so every destination connection's line names it.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/egress"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// Categories of the grant control routes (errors.go maps them).
var (
	errGrantConflict = errors.New("broker: another grant is live or the revision is not above every earlier one")
	errNoGrant       = errors.New("broker: no live grant for that exec")
)

// maxLoggedDest bounds the destination a refusal line carries (egress's
// own bound: a 253-byte name and a port fit).
const maxLoggedDest = 262

// grantState is a session broker's grant (nil for every other broker).
type grantState struct {
	pol        *policy.Policy
	controlUID int
	creds      Credentials
	dialer     *safefetch.Dialer
	log        *slog.Logger
	now        func() time.Time

	mu       sync.Mutex
	live     *liveGrant // nil between grants; may have expired (ctx done)
	revision int64      // the highest revision ever bound
	refused  int64      // proxy requests refused without a live grant since the last bind or revoke
	// inflight counts admitted proxy requests of every grant until their
	// handler has returned (tests check a revoke waited for them).
	inflight atomic.Int64
}

// liveGrant is one bound grant.
type liveGrant struct {
	g     policy.Grant
	proxy *egress.Proxy
	// ctx ends at revoke or at the grant's deadline; every request
	// admitted under the grant runs under it.
	ctx    context.Context
	cancel context.CancelFunc
	// conns are the open guest connections that carried a request of the
	// grant (under grantState.mu; nil once revoked or expired).
	conns   map[net.Conn]struct{}
	active  sync.WaitGroup // admitted requests, Add only under grantState.mu while live
	running atomic.Int64   // the same, counted for the revoke answer
}

// connGrant is one guest connection's grant: the one its first admitted
// request ran under (under grantState.mu).
type connGrant struct {
	conn net.Conn
	lg   *liveGrant
}

type connGrantKey struct{}

func newGrantState(pol *policy.Policy, controlUID int, creds Credentials, d *safefetch.Dialer, log *slog.Logger, now func() time.Time) *grantState {
	return &grantState{pol: pol, controlUID: controlUID, creds: creds, dialer: d, log: log, now: now}
}

// connContext gives each connection its (empty) grant slot.
func (gs *grantState) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connGrantKey{}, &connGrant{conn: c})
}

// isHost reports whether c's peer is the host (the control routes' uid).
func (gs *grantState) isHost(c net.Conn) bool {
	uid, ok := peerUID(c)
	return ok && uid == gs.controlUID
}

// connState forgets a closed connection.
func (gs *grantState) connState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed {
		return
	}
	gs.mu.Lock()
	if gs.live != nil && gs.live.conns != nil {
		delete(gs.live.conns, c)
	}
	gs.mu.Unlock()
}

// serveProxy admits one proxy request against the live grant and serves
// it with that grant's proxy, under the grant's context.
func (gs *grantState) serveProxy(w http.ResponseWriter, r *http.Request) {
	cg, _ := r.Context().Value(connGrantKey{}).(*connGrant)
	lg, ended := gs.admit(cg)
	if lg == nil {
		gs.refuse(w, r, ended)
		return
	}
	defer func() {
		if r.Method == http.MethodConnect {
			// A CONNECT's connection is closed when its handler returns
			// (the tunnel's end, or a refusal's Connection: close).
			gs.mu.Lock()
			if lg.conns != nil {
				delete(lg.conns, cg.conn)
			}
			gs.mu.Unlock()
		}
		lg.running.Add(-1)
		gs.inflight.Add(-1)
		lg.active.Done()
	}()
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(lg.ctx, cancel)
	defer stop()
	defer cancel()
	lg.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// admit returns the live grant the request may run under (counted in its
// active requests), or nil and the exec of the ended grant the connection
// belonged to ("" if none).
func (gs *grantState) admit(cg *connGrant) (*liveGrant, string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	lg := gs.live
	var ended string
	if cg != nil && cg.lg != nil && cg.lg != lg {
		ended = cg.lg.g.Exec
	}
	if lg == nil || lg.ctx.Err() != nil || cg == nil || ended != "" {
		if cg != nil && cg.lg != nil && ended == "" {
			ended = cg.lg.g.Exec // the live one, expired
		}
		return nil, ended
	}
	if cg.lg == nil {
		cg.lg = lg
		if lg.conns != nil {
			lg.conns[cg.conn] = struct{}{}
		}
	}
	lg.active.Add(1)
	lg.running.Add(1)
	gs.inflight.Add(1)
	return lg, ""
}

// refuse answers a proxy request that has no live grant: 403, generic.
func (gs *grantState) refuse(w http.ResponseWriter, r *http.Request, ended string) {
	h := w.Header()
	clear(h)
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusForbidden)
	_, _ = io.WriteString(w, "egress refused\n")
	if !gs.countRefusal() {
		return
	}
	kind, dest := "http", ""
	if r.Method == http.MethodConnect {
		kind, dest = "CONNECT", r.RequestURI
	} else if r.URL != nil {
		dest = r.URL.Host
	}
	if len(dest) > maxLoggedDest {
		dest = "(over-long)"
	}
	attrs := []any{"kind", kind, "dest", dest}
	if ended != "" {
		attrs = append(attrs, "ended_exec", ended)
	}
	gs.log.Warn("egress refused: no live grant", attrs...)
}

// countRefusal counts a guest's refused request and reports whether it
// is within the budget logged one by one (MaxRefusals between two binds
// or revokes; the rest are logged as a number then: a looping background
// process must not flood the journal).
func (gs *grantState) countRefusal() bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.refused++
	return gs.refused <= MaxRefusals
}

// isHostRequest reports whether r came from the host's uid.
func (gs *grantState) isHostRequest(r *http.Request) bool {
	uid, ok := envelope.PeerUID(r.Context())
	return ok && uid == gs.controlUID
}

// takeRefused logs and resets the count of unlogged refusals (under mu).
func (gs *grantState) takeRefused() {
	if gs.refused > MaxRefusals {
		gs.log.Warn("egress requests refused without a live grant (past the first, unlogged)", "requests", gs.refused-MaxRefusals)
	}
	gs.refused = 0
}

// serveControl answers the grant control routes; false for any other
// request.
func (gs *grantState) serveControl(w http.ResponseWriter, r *http.Request) bool {
	var h func(*http.Request, []byte) (any, error)
	switch r.RequestURI {
	case policy.RouteControlGrant:
		h = gs.bind
	case policy.RouteControlRevoke:
		h = gs.revoke
	default:
		return false
	}
	start := time.Now()
	var out any
	err := gs.checkControl(r)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, policy.MaxGrantBytes+1))
		if err != nil || len(body) > policy.MaxGrantBytes {
			err = refused("control request unreadable or over the bound", envelope.ErrRefused)
		}
	}
	if err == nil {
		out, err = h(r, body)
	}
	code, answer := http.StatusOK, []byte(nil)
	if err != nil {
		var public string
		code, public = status(err)
		answer, _ = encode(map[string]string{"error": public})
		w.Header().Set("Connection", "close")
		if !gs.isHostRequest(r) && !gs.countRefusal() {
			// A guest knocking on the control routes: counted, and past
			// the budget not logged one by one.
		} else {
			gs.log.Warn("grant control refused", "route", r.RequestURI, "status", code, "reason", err.Error(),
				"latency_ms", time.Since(start).Milliseconds())
		}
	} else {
		answer, _ = encode(out)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(answer)
	return true
}

// checkControl: the host's peer uid, before anything is read; a POST.
func (gs *grantState) checkControl(r *http.Request) error {
	if !gs.isHostRequest(r) {
		return refused("control route from a peer other than the host", envelope.ErrNotFound)
	}
	if r.Method != http.MethodPost {
		return refused("method not allowed", envelope.ErrMethod)
	}
	if r.ContentLength < 0 || len(r.TransferEncoding) > 0 || r.ContentLength > policy.MaxGrantBytes {
		return refused("control request without a bounded length", envelope.ErrRefused)
	}
	return nil
}

// bind makes a grant live (see the file comment).
func (gs *grantState) bind(_ *http.Request, body []byte) (any, error) {
	var g policy.Grant
	if err := protocol.DecodeStrict(body, &g); err != nil {
		return nil, refused("grant malformed", envelope.ErrRefused)
	}
	if err := g.Validate(gs.pol); err != nil {
		return nil, refused("grant invalid: "+err.Error(), envelope.ErrRefused)
	}
	if !gs.now().Before(g.Deadline()) {
		return nil, refused("grant deadline already passed", envelope.ErrRefused)
	}
	// Every credential is loaded now, so a missing one fails the exec's
	// start (the host's error) rather than its first request.
	for _, c := range g.Egress.Credentials {
		if _, err := gs.creds.Load(c.Credential); err != nil {
			return nil, refused("grant credential "+c.Credential+" cannot be loaded", envelope.ErrRefused)
		}
	}
	deadline := g.Deadline()
	if pd := gs.pol.Deadline(); pd.Before(deadline) {
		deadline = pd
	}
	log := gs.log.With("exec", g.Exec, "revision", g.Revision, "route", "egress")
	proxy, err := newEgressProxy(gs.dialer, g.Egress, deadline, log)
	if err != nil {
		return nil, refused("grant egress: "+err.Error(), envelope.ErrRefused)
	}
	// This exec's own placeholders and CA (intercept.go): they live in
	// this grant's proxy only, so the revoke (or the deadline) that ends
	// the grant ends them; the next exec gets new ones.
	proxy, env, err := mintInterception(proxy, &g.Egress, gs.creds, gs.now(), deadline)
	if err != nil {
		return nil, refused("grant interception: "+err.Error(), envelope.ErrRefused)
	}
	answer := policy.GrantAnswer{Exec: g.Exec, Revision: g.Revision}
	if env != nil {
		answer.CA, answer.Env = env.CA, env.Env
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g.Revision <= gs.revision {
		return nil, refused("grant revision not above every earlier one", errGrantConflict)
	}
	if old := gs.live; old != nil {
		if old.ctx.Err() == nil {
			return nil, refused("another exec's grant is live", errGrantConflict)
		}
		gs.live = nil // expired: its connections were closed when it ended
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	lg := &liveGrant{g: g, proxy: proxy, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	gs.live, gs.revision = lg, g.Revision
	gs.takeRefused()
	context.AfterFunc(ctx, func() { gs.expired(lg) })
	names := make([]string, 0, len(g.Egress.Credentials))
	for _, c := range g.Egress.Credentials {
		names = append(names, c.Name)
	}
	log.Info("grant bound", "deadline", deadline.UTC().Format(time.RFC3339), "credentials", names,
		"placeholders", len(answer.Env), "max_connections", g.Egress.MaxConnections)
	return answer, nil
}

// expired closes the connections of a grant whose context ended (its
// deadline, or a revoke, which took them first).
func (gs *grantState) expired(lg *liveGrant) {
	gs.mu.Lock()
	conns := lg.conns
	lg.conns = nil
	gs.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	if conns != nil && errors.Is(lg.ctx.Err(), context.DeadlineExceeded) {
		gs.log.Info("grant expired", "exec", lg.g.Exec, "revision", lg.g.Revision, "connections", len(conns))
	}
}

// revoke ends exec's grant and answers once nothing of it can pass (see
// the file comment).
func (gs *grantState) revoke(r *http.Request, body []byte) (any, error) {
	var rv policy.Revoke
	if err := protocol.DecodeStrict(body, &rv); err != nil || !policy.ValidExecID(rv.Exec) {
		return nil, refused("revoke malformed", envelope.ErrRefused)
	}
	gs.mu.Lock()
	lg := gs.live
	if lg == nil || lg.g.Exec != rv.Exec {
		gs.mu.Unlock()
		return nil, refused("revoke of an exec without a live grant", errNoGrant)
	}
	gs.live = nil
	conns := lg.conns
	lg.conns = nil
	running := int(lg.running.Load())
	gs.takeRefused()
	gs.mu.Unlock()
	// From here no request is admitted under lg (admit checks gs.live
	// under mu). Cut what runs: the requests' context, then the guest
	// connections, then wait for the handlers.
	lg.cancel()
	for c := range conns {
		_ = c.Close()
	}
	done := make(chan struct{})
	go func() { lg.active.Wait(); close(done) }()
	a := policy.RevokeAnswer{Exec: lg.g.Exec, Revision: lg.g.Revision, Connections: len(conns), Requests: running}
	log := gs.log.With("exec", lg.g.Exec, "revision", lg.g.Revision)
	select {
	case <-done:
	case <-r.Context().Done():
		log.Warn("grant revoked, but its requests had not all ended when the host stopped waiting", "requests", running)
		return nil, refused("revoke: requests still ending", envelope.ErrUnavailable)
	}
	log.Info("grant revoked", "connections", a.Connections, "requests", a.Requests)
	return a, nil
}

// held reports the connections held for the live grant and whether one is
// live (tests).
func (gs *grantState) held() (int, bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.live == nil {
		return 0, false
	}
	return len(gs.live.conns), gs.live.ctx.Err() == nil
}

// stop ends a grant still live when the broker stops.
func (gs *grantState) stop() {
	gs.mu.Lock()
	lg := gs.live
	gs.live = nil
	gs.takeRefused()
	gs.mu.Unlock()
	if lg != nil {
		lg.cancel()
		gs.log.Info("grant ended with the broker", "exec", lg.g.Exec, "revision", lg.g.Revision)
	}
}
