package livesession

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/grantctl"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// Network execs (DESIGN.md section 18, docs/sessions.md "Network execs",
// docs/credentialed-egress.md "Sessions: a grant per exec").
//
// Only a session created with network: true has a broker: least privilege,
// a session that never asked for network has no broker unit, no socket in
// its container and no credential file copied for it. Its broker is
// long-lived (started at create, stopped with the container at close, TTL,
// reap) and holds a grants policy naming exactly the credentials declared
// at create; it refuses every request until the host binds a grant.
//
// An exec with network: one at a time per session (a second is refused
// with 409); it waits for a human's approval of that exec (an admin's
// approve or deny, runs.approvalTimeoutSeconds, else it is refused); once
// approved the host binds a grant naming the exec before the exec is sent
// to the supervisor (with the placeholders and CA the bind answered, for
// that exec only; never logged), and revokes it when the exec ends (its result, an
// error, a cancel, the client leaving, the session closing) before the
// client sees the end. A revoke that fails other than "no such grant" stops
// the broker: the grant must be taken as live, so the session's network
// goes with its broker (grantctl's contract). At the session's close the
// container is killed and the broker units stopped (sandbox.Cleanup),
// which ends any grant with its broker; the exec's own revoke then finds
// no broker, and that is expected.

// grantDrain is what a grant's deadline adds to the exec's timeout: the
// supervisor's kill and its result travel after the timeout; the grant
// ends by itself at its deadline if a revoke never came.
const grantDrain = 30 * time.Second

// maxShownCommand bounds what an approval shows of a command or an arg.
const maxShownCommand = 600

// Errors of network execs; each says the exec did not start.
var (
	errNetworkDenied  = "the network exec was denied by a human; it did not start"
	errNetworkTimeout = "no approval of the network exec in time (runs.approvalTimeoutSeconds); it did not start"
	errNetworkBind    = "the network exec's grant could not be bound; it did not start; the host log has details"
	errNetworkClosed  = "the session ended while the network exec waited for approval; it did not start"
)

// netState is a network session's broker and its one network exec.
type netState struct {
	socket string
	// creds are the egress.credentials names declared at create.
	creds []string
	revs  grantctl.Revisions

	mu       sync.Mutex
	holder   string    // the exec holding the network ("" none)
	approval *approval // holder's pending approval (nil once decided)
	broken   bool      // the broker was stopped after a failed revoke
}

// approval is one exec's pending decision.
type approval struct {
	shown    apiwire.SessionApproval
	decided  chan struct{}
	once     sync.Once
	approved bool
	by       int
}

func (a *approval) decide(approve bool, by int) bool {
	done := false
	a.once.Do(func() {
		a.approved, a.by, done = approve, by, true
		close(a.decided)
	})
	return done
}

// checkNetworkCreate checks a create's network and credentials for owner:
// each credential declared in egress.credentials and available to the
// project or the owner, as a network run's (MayAsk).
func (k *Kind) checkNetworkCreate(p apiwire.SessionCreate, owner int) error {
	if len(p.Credentials) > 0 && !p.Network {
		return invalidf("credentials need network: true (they are what the session's network execs may ask for)")
	}
	if len(p.Credentials) > runs.MaxCredentials {
		return invalidf("credentials must have at most %d entries, got %d", runs.MaxCredentials, len(p.Credentials))
	}
	for i, name := range p.Credentials {
		if slices.Contains(p.Credentials[:i], name) {
			return invalidf("credentials[%d] names a credential already listed", i)
		}
		e, ok := k.cfg.EgressCredential(name)
		if !ok || !e.MayAsk(p.Project, owner) {
			return invalidf("credentials[%d]: no credential of that name is available to this session (egress.credentials)", i)
		}
	}
	if p.Network && k.life.Units() == nil {
		return refused(ErrDisabled, "network sessions need broker units, which this host cannot start")
	}
	return nil
}

// prepareNetwork gives a network session its broker before its container
// is made: the turn directory (mounted in the container), a grants policy
// (egress.allow, the declared credentials' files, the session's TTL as its
// deadline) and the socket unit.
func (s *Session) prepareNetwork(ctx context.Context) error {
	if s.net == nil {
		return nil
	}
	c := s.k.cfg
	var err error
	if s.h.Dir, err = layout.TurnDir(c.RunRoot, s.id); err != nil {
		return err
	}
	if s.h.Policy, err = layout.PolicyFile(c.PolicyDir, s.id); err != nil {
		return err
	}
	if s.net.socket, err = layout.BrokerSocket(c.RunRoot, s.id); err != nil {
		return err
	}
	if len(s.net.socket) > layout.MaxSocketPath {
		return fmt.Errorf("broker socket path is %d characters, over %d", len(s.net.socket), layout.MaxSocketPath)
	}
	files := make([]string, 0, len(s.net.creds))
	for _, name := range s.net.creds {
		e, ok := c.EgressCredential(name)
		if !ok {
			return fmt.Errorf("credential destination %q is no longer declared (egress.credentials)", name)
		}
		if f := e.Policy().Credential; !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	pol := policy.Policy{
		Version: policy.Version, TurnID: s.id,
		Identity:       policy.Identity{Channel: s.tag, ChannelTag: s.tag},
		DeadlineUnixMs: s.expires.UnixMilli(),
		Limits:         c.Broker.PolicyLimits(),
		EgressAllow:    append([]string{}, c.Egress.Allow...),
		Grants:         &policy.Grants{Credentials: files},
	}
	// A grant's egress is validated against these limits (policy.Grant).
	if g := policy.DefaultEgress(); pol.Limits.MaxConnections <= g.MaxConnections {
		pol.Limits.MaxConnections = g.MaxConnections + 1
	}
	data, err := pol.Marshal()
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if err := s.k.life.MakeTurnDir(s.h); err != nil {
		return err
	}
	if err := s.k.life.WritePolicyFile(s.h, data); err != nil {
		return err
	}
	s.h.UnitTried = true
	if err := s.k.life.Units().StartBroker(ctx, s.id); err != nil {
		return fmt.Errorf("broker units: %w", err)
	}
	s.log.Info("session broker started", "credentials", s.net.creds)
	return nil
}

// networkStatus adds the network's state to st.
func (s *Session) networkStatus(st *apiwire.Session) {
	n := s.net
	if n == nil {
		return
	}
	st.Network = true
	st.Credentials = slices.Clone(n.creds)
	n.mu.Lock()
	defer n.mu.Unlock()
	st.NetworkExec = n.holder
	if a := n.approval; a != nil {
		shown := a.shown
		shown.Args = slices.Clone(shown.Args)
		shown.Credentials = slices.Clone(shown.Credentials)
		shown.CredentialVariables = maps.Clone(shown.CredentialVariables)
		st.Approvals = []apiwire.SessionApproval{shown}
	}
}

// Decide approves or denies exec's pending network approval in s (an
// admin's, uid by).
func (k *Kind) Decide(s *Session, exec string, approve bool, by int) error {
	n := s.net
	if n == nil {
		return refused(ErrState, "this session has no network, so no exec of it awaits approval")
	}
	n.mu.Lock()
	a := n.approval
	if a == nil || a.shown.ExecID != exec {
		n.mu.Unlock()
		return refused(ErrState, "no exec of this session awaits approval under that id")
	}
	n.approval = nil
	n.mu.Unlock()
	if !a.decide(approve, by) {
		return refused(ErrState, "no exec of this session awaits approval under that id")
	}
	return nil
}

// networkExec runs x, which asks for network, in s: checked, approved,
// granted, run, revoked (see the comment at the top of this file).
func (k *Kind) networkExec(ctx context.Context, s *Session, x apiwire.SessionExec, emit func(apiwire.SessionExecEvent) error) error {
	n := s.net
	switch {
	case n == nil:
		return invalidf("this session was created without network; create one with network: true (and the credentials its execs may ask for)")
	case !x.Network:
		return invalidf("credentials need network: true")
	}
	for i, name := range x.Credentials {
		if !slices.Contains(n.creds, name) || slices.Contains(x.Credentials[:i], name) {
			return invalidf("credentials[%d] was not declared when the session was created (its credentials), or is listed twice", i)
		}
	}
	req := k.wireExec(x)
	// The supervisor points this exec's proxy variables at the egress
	// bridge (pkg/sessionsup); every credential is reached by its https
	// URL with the placeholder the broker mints for this exec's grant, in
	// its variable (a declared env, or the default name), as for a run
	// (docs/credentialed-egress.md: one mechanism).
	req.Proxy = true
	for _, name := range x.Credentials {
		if e, ok := k.cfg.EgressCredential(name); ok {
			if _, set := x.Env[e.EnvName()]; set {
				return invalidf("env names a variable that carries a requested credential's placeholder (egress.credentials' env)")
			}
		}
	}
	if err := req.Validate(); err != nil {
		return invalidf("%s", genericInvalid(err))
	}
	id, err := s.nextID("x")
	if err != nil {
		return err
	}
	a := &approval{decided: make(chan struct{}), shown: shownApproval(id, x, req)}
	for _, name := range x.Credentials {
		if e, ok := k.cfg.EgressCredential(name); ok {
			if a.shown.CredentialVariables == nil {
				a.shown.CredentialVariables = map[string]string{}
			}
			a.shown.CredentialVariables[name] = e.EnvName()
		}
	}
	timeout := time.Duration(k.cfg.Runs.ApprovalTimeoutSeconds) * time.Second
	a.shown.Deadline = k.now().Add(timeout)
	n.mu.Lock()
	switch {
	case n.broken:
		n.mu.Unlock()
		return refused(ErrState, "the session's network is gone (its broker was stopped after a failure); close the session and create another")
	case n.holder != "":
		n.mu.Unlock()
		return refused(ErrState, "the session runs a network exec already (one at a time); wait for its end")
	}
	n.holder, n.approval = id, a
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		if n.approval == a {
			n.approval = nil
		}
		n.holder = ""
		n.mu.Unlock()
	}()
	s.log.Info("session network exec awaits approval", "exec", id, "credentials", x.Credentials, "timeout_s", int(timeout.Seconds()))
	if err := emit(apiwire.SessionExecEvent{Type: apiwire.ExecApproval, ExecID: id}); err != nil {
		return err
	}
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	expired := wait.C
	if k.approvalTimeout != nil {
		expired = k.approvalTimeout(timeout)
	}
	refuse := func(msg string) error {
		a.decide(false, -1)
		return emit(apiwire.SessionExecEvent{Type: apiwire.ExecError, ExecID: id, Error: msg})
	}
	select {
	case <-a.decided:
	case <-expired:
		k.m.network.WithLabelValues("timeout").Inc()
		s.log.Info("session network exec not approved in time", "exec", id)
		return refuse(errNetworkTimeout)
	case <-s.ended:
		k.m.network.WithLabelValues("withdrawn").Inc()
		return refuse(errNetworkClosed)
	case <-ctx.Done():
		k.m.network.WithLabelValues("withdrawn").Inc()
		a.decide(false, -1)
		s.log.Info("session network exec left before its approval", "exec", id)
		return context.Cause(ctx)
	}
	if !a.approved {
		k.m.network.WithLabelValues("denied").Inc()
		s.log.Info("session network exec denied", "exec", id, "by_uid", a.by)
		return emit(apiwire.SessionExecEvent{Type: apiwire.ExecError, ExecID: id, Error: errNetworkDenied})
	}
	s.log.Info("session network exec approved", "exec", id, "by_uid", a.by)
	g, err := k.grant(s, id, req, x.Credentials)
	if err == nil {
		bctx, cancel := context.WithTimeout(ctx, grantctl.DefaultTimeout)
		var a policy.GrantAnswer
		a, err = grantctl.Client{Socket: n.socket}.Bind(bctx, g)
		cancel()
		// This exec's own placeholders and CA (docs/sessions.md,
		// "Placeholders per exec"): only this request carries them.
		req.Placeholders, req.RunCA = a.Env, a.CA
		if err == nil {
			if verr := req.Validate(); verr != nil {
				err = fmt.Errorf("%w: the grant's placeholders do not fit the exec: %v", grantctl.ErrBroker, verr)
			}
		}
	}
	if err != nil {
		k.m.network.WithLabelValues("bind_failed").Inc()
		s.log.Error("session network exec not started: grant bind failed", "exec", id, "err", err)
		if errors.Is(err, grantctl.ErrBroker) {
			// Nobody knows whether the broker holds it: as a failed revoke.
			k.revoke(s, id)
		}
		return emit(apiwire.SessionExecEvent{Type: apiwire.ExecError, ExecID: id, Error: errNetworkBind})
	}
	k.m.network.WithLabelValues("granted").Inc()
	s.log.Info("session network granted", "exec", id, "revision", g.Revision, "credentials", x.Credentials,
		"placeholders", len(req.Placeholders))
	var once sync.Once
	revoke := func() { once.Do(func() { k.revoke(s, id) }) }
	defer revoke()
	// The client sees the exec's end only once its network is gone.
	return k.exec(ctx, s, x, req, id, func(ev apiwire.SessionExecEvent) error {
		if ev.Type == apiwire.ExecResult || ev.Type == apiwire.ExecError {
			revoke()
		}
		return emit(ev)
	})
}

// grant is exec id's grant: the default egress bounds and the named
// credentials' destinations, until the exec's timeout plus grantDrain
// (within the session's life).
func (k *Kind) grant(s *Session, id string, req sessionwire.Exec, names []string) (policy.Grant, error) {
	e := policy.DefaultEgress()
	var err error
	if e.Credentials, e.TestRootCA, err = k.cfg.CredentialGrant(names); err != nil {
		return policy.Grant{}, err
	}
	now := k.now()
	deadline := now.Add(time.Duration(req.Timeout())*time.Second + grantDrain)
	if deadline.After(s.expires) {
		deadline = s.expires
	}
	return policy.Grant{Exec: id, Revision: s.net.revs.Next(now), DeadlineUnixMs: deadline.UnixMilli(), Egress: e}, nil
}

// revoke takes exec id's grant back; a failure other than "no such
// grant" stops the session's broker (the grant must be taken as live).
func (k *Kind) revoke(s *Session, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), grantctl.DefaultTimeout)
	defer cancel()
	a, err := grantctl.Client{Socket: s.net.socket}.Revoke(ctx, id)
	switch {
	case err == nil:
		s.log.Info("session network revoked", "exec", id, "connections", a.Connections, "requests", a.Requests)
		return
	case errors.Is(err, grantctl.ErrUnknownGrant):
		s.log.Info("session network revoked: the broker holds no grant for the exec any more", "exec", id)
		return
	}
	n := s.net
	n.mu.Lock()
	n.broken = true
	n.mu.Unlock()
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		// close's cleanup stops the broker units (or has): the grant
		// goes with them.
		s.log.Info("session network revoke not confirmed; the broker stops with the session", "exec", id, "err", err)
		return
	}
	k.m.network.WithLabelValues("revoke_failed").Inc()
	s.log.Error("session network revoke failed; stopping the session's broker", "exec", id, "err", err)
	if err := k.life.StopUnits(s.id, s.log); err != nil {
		s.log.Error("session broker stop failed after a failed revoke; the grant ends at its deadline", "exec", id, "err", err)
	}
}

func (k *Kind) handleApprove(w http.ResponseWriter, r *http.Request, s *Session) error {
	return k.handleDecision(w, r, s, true)
}

func (k *Kind) handleDeny(w http.ResponseWriter, r *http.Request, s *Session) error {
	return k.handleDecision(w, r, s, false)
}

// handleDecision is an admin's approve or deny of a pending network exec.
func (k *Kind) handleDecision(w http.ResponseWriter, r *http.Request, s *Session, approve bool) error {
	var d apiwire.SessionDecision
	if err := api.DecodeBody(w, r, &d, api.MaxBodyBytes); err != nil {
		return err
	}
	if !sessionwire.ValidID(d.ExecID) {
		return invalidf("execId is not an exec id")
	}
	if err := k.Decide(s, d.ExecID, approve, api.CallerUID(r)); err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, s.Status())
	return nil
}

// shownApproval is what an approver sees of exec id.
func shownApproval(id string, x apiwire.SessionExec, req sessionwire.Exec) apiwire.SessionApproval {
	a := apiwire.SessionApproval{ExecID: id, Command: cut(x.Command), Executable: cut(x.Executable), Root: x.Root,
		TimeoutSeconds: req.Timeout(), Credentials: slices.Clone(x.Credentials)}
	for _, arg := range x.Args {
		a.Args = append(a.Args, cut(arg))
	}
	return a
}

func cut(s string) string {
	if len(s) > maxShownCommand {
		return s[:maxShownCommand] + "..."
	}
	return s
}
