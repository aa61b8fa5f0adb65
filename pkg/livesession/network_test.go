package livesession

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// fakeGrants is a session broker's grant control routes (as pkg/broker
// serves them, policy.RouteControlGrant and RouteControlRevoke) on the
// session's real broker socket, spoken to by the real grantctl client.
// Each call is recorded in the fake Docker's call list, so the order of
// binds, revokes and the supervisor's requests is one sequence.
type fakeGrants struct {
	d *fakeDocker

	mu           sync.Mutex
	grants       []policy.Grant
	live         string
	revokeStatus int // 0: 200
	bindStatus   int // 0: 200
	policyFile   []byte
	// answerEnv and answerCA are what a bind answers (the exec's
	// placeholders and CA, as pkg/broker mints them).
	answerEnv map[string]string
	answerCA  string
}

func (g *fakeGrants) serve(t *testing.T, socket string) {
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Errorf("fake broker: %v", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+policy.RouteControlGrant, func(w http.ResponseWriter, r *http.Request) {
		var gr policy.Grant
		if err := json.NewDecoder(r.Body).Decode(&gr); err != nil {
			http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
			return
		}
		g.d.record("bind " + gr.Exec)
		g.mu.Lock()
		defer g.mu.Unlock()
		g.grants = append(g.grants, gr)
		if g.bindStatus != 0 {
			w.WriteHeader(g.bindStatus)
			w.Write([]byte(`{"error":"refused"}`))
			return
		}
		g.live = gr.Exec
		json.NewEncoder(w).Encode(policy.GrantAnswer{Exec: gr.Exec, Revision: gr.Revision, Env: g.answerEnv, CA: g.answerCA})
	})
	mux.HandleFunc("POST "+policy.RouteControlRevoke, func(w http.ResponseWriter, r *http.Request) {
		var rv policy.Revoke
		if err := json.NewDecoder(r.Body).Decode(&rv); err != nil {
			http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
			return
		}
		g.d.record("revoke " + rv.Exec)
		g.mu.Lock()
		defer g.mu.Unlock()
		switch {
		case g.revokeStatus != 0:
			w.WriteHeader(g.revokeStatus)
			w.Write([]byte(`{"error":"revoke timed out"}`))
		case g.live != rv.Exec:
			w.WriteHeader(http.StatusGone)
			w.Write([]byte(`{"error":"no such grant"}`))
		default:
			g.live = ""
			json.NewEncoder(w).Encode(policy.RevokeAnswer{Exec: rv.Exec, Connections: 1, Requests: 2})
		}
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// newNetRig is newRig with an egress credential alice may ask for, a
// short runRoot (a Unix socket path is bounded) and the fake broker
// started with the session's broker units.
func newNetRig(t *testing.T) (*rig, *fakeGrants) {
	t.Helper()
	return newNetRigLogging(t, nil)
}

// newNetRigLogging is newNetRig logging to log (nil: the test's log).
func newNetRigLogging(t *testing.T, log *slog.Logger) (*rig, *fakeGrants) {
	t.Helper()
	root, err := os.MkdirTemp("", "sg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	c := &clock{t: time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)}
	var fd *fakeDocker
	kit := sandboxtest.NewKit(t, "", sandboxtest.KitOptions{Now: c.now, Logger: log,
		Config: func(cfg *config.Config) {
			cfg.RunRoot = root
			cfg.Egress.Credentials = []config.EgressCredential{
				{Name: "gh", Host: "api.github.test", Port: 443, Credential: "gh-token", Header: "Authorization", Format: "Bearer {}", Clients: []int{alice},
					Env: "GITHUB_TOKEN"},
				{Name: "other", Host: "other.test", Port: 443, Credential: "other-token", Header: "Authorization", Format: "Bearer {}", Clients: []int{bob}},
			}
		},
		Containers: func(d *sandboxtest.Docker) sandbox.Containers {
			fd = newFakeDocker(d)
			return fd
		}})
	g := &fakeGrants{d: fd}
	kit.Units.StartHook = func(_ context.Context, turn string) error {
		socket, err := layout.BrokerSocket(root, turn)
		if err != nil {
			return err
		}
		pf, _ := layout.PolicyFile(kit.Cfg.PolicyDir, turn)
		data, _ := os.ReadFile(pf)
		g.mu.Lock()
		g.policyFile = data
		g.mu.Unlock()
		g.serve(t, socket)
		return nil
	}
	k := New(Options{Config: kit.Cfg, Lifecycle: kit.Deps.Lifecycle, Host: kit.Host, Logger: kit.Deps.Logger,
		Now: c.now, Registry: kit.Registry, SweepEvery: -1})
	t.Cleanup(func() {
		k.Stop()
		kit.Host.Stop()
	})
	return &rig{kit: kit, k: k, d: fd, clock: c}, g
}

func (r *rig) createNet(t *testing.T, owner int, creds ...string) *Session {
	t.Helper()
	st, err := r.k.Create(context.Background(), apiwire.SessionCreate{Network: true, Credentials: creds}, owner)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.k.Lookup(st.ID, owner, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// netExec is a network exec running in the background: its events, in
// order, and its return.
type netExec struct {
	events chan apiwire.SessionExecEvent
	done   chan error
	cancel context.CancelFunc
}

func (r *rig) startNetExec(s *Session, x apiwire.SessionExec) *netExec {
	ctx, cancel := context.WithCancel(context.Background())
	e := &netExec{events: make(chan apiwire.SessionExecEvent, 64), done: make(chan error, 1), cancel: cancel}
	go func() {
		e.done <- r.k.Exec(ctx, s, x, func(ev apiwire.SessionExecEvent) error {
			if ev.Type == apiwire.ExecResult || ev.Type == apiwire.ExecError {
				r.d.record("client sees " + ev.Type)
			}
			e.events <- ev
			return nil
		})
		close(e.events)
	}()
	return e
}

// next is the exec's next event (the test fails if the exec ended).
func (e *netExec) next(t *testing.T) apiwire.SessionExecEvent {
	t.Helper()
	ev, ok := <-e.events
	if !ok {
		t.Fatalf("the exec ended: %v", <-e.done)
	}
	return ev
}

// rest is every event left and the exec's return.
func (e *netExec) rest() ([]apiwire.SessionExecEvent, error) {
	var out []apiwire.SessionExecEvent
	for ev := range e.events {
		out = append(out, ev)
	}
	return out, <-e.done
}

func decide(t *testing.T, r *rig, s *Session, exec, what string) (int, string) {
	t.Helper()
	return call(t, r, peerauth.RoleAdmin, 0, "POST", "/v1/sessions/"+s.id+"/"+what, apiwire.SessionDecision{ExecID: exec})
}

// TestNetDeniedNeverStarts: a network exec waits for approval (its first
// event names it, the session's status lists it); denied, it never binds
// and never reaches the supervisor; its client reads why.
func TestNetDeniedNeverStarts(t *testing.T) {
	r, _ := newNetRig(t)
	s := r.createNet(t, alice)
	e := r.startNetExec(s, apiwire.SessionExec{Command: "echo hi", Network: true})
	ev := e.next(t)
	if ev.Type != apiwire.ExecApproval || ev.ExecID == "" {
		t.Fatalf("first event %+v, want approval naming the exec", ev)
	}
	code, body := call(t, r, peerauth.RoleAdmin, 0, "GET", "/v1/sessions", nil)
	var list apiwire.SessionList
	json.Unmarshal([]byte(body), &list)
	if code != http.StatusOK || len(list.Sessions) != 1 || len(list.Sessions[0].Approvals) != 1 ||
		list.Sessions[0].Approvals[0].ExecID != ev.ExecID || list.Sessions[0].Approvals[0].Command != "echo hi" {
		t.Fatalf("list %d %s: want the pending approval of %s", code, body, ev.ExecID)
	}
	for _, rt := range r.k.Routes() {
		if strings.HasSuffix(rt.Pattern, "/approve") || strings.HasSuffix(rt.Pattern, "/deny") {
			if rt.Role != peerauth.RoleAdmin {
				t.Errorf("%s has role %v: only an admin decides (the host's router enforces it)", rt.Pattern, rt.Role)
			}
		}
	}
	if code, body := decide(t, r, s, "x999", "deny"); code != http.StatusConflict {
		t.Errorf("deny of another exec id: %d %s, want 409", code, body)
	}
	if code, body := decide(t, r, s, ev.ExecID, "deny"); code != http.StatusOK {
		t.Fatalf("deny: %d %s", code, body)
	}
	evs, err := e.rest()
	if err != nil || len(evs) != 1 || evs[0].Type != apiwire.ExecError || evs[0].Error != errNetworkDenied {
		t.Fatalf("after deny: %+v %v, want one error event %q", evs, err, errNetworkDenied)
	}
	for _, c := range r.d.callList() {
		if strings.HasPrefix(c, "bind") || c == "request exec" {
			t.Errorf("a denied exec reached %q", c)
		}
	}
	if code, _ := decide(t, r, s, ev.ExecID, "approve"); code != http.StatusConflict {
		t.Errorf("approve after deny: %d, want 409", code)
	}
	if got := r.kit.Counter("sandbox_session_network_execs_total", "outcome", "denied"); got != 1 {
		t.Errorf("denied counted %v times", got)
	}
	if st := s.Status(); st.NetworkExec != "" || len(st.Approvals) != 0 {
		t.Errorf("status after deny %+v: the network is free again", st)
	}
}

// TestNetApprovedBindsThenRevokes: approved, the grant naming the exec is
// bound before the exec reaches the supervisor and revoked after its end,
// before its client sees the end; the grant carries the credential's
// destination and a deadline within the session's life. A cancelled
// exec's grant is revoked too.
func TestNetApprovedBindsThenRevokes(t *testing.T) {
	r, g := newNetRig(t)
	s := r.createNet(t, alice, "gh")
	var pol policy.Policy
	g.mu.Lock()
	err := json.Unmarshal(g.policyFile, &pol)
	g.mu.Unlock()
	if err != nil || pol.Grants == nil || !slices.Equal(pol.Grants.Credentials, []string{"gh-token"}) || pol.Egress != nil ||
		pol.DeadlineUnixMs != s.expires.UnixMilli() {
		t.Fatalf("session broker policy %+v (%v): want grants of gh-token only, no standing egress, the TTL", pol, err)
	}
	// The container gets the turn directory (the broker's socket), the
	// policy loads as the broker loads it.
	r.kit.Docker.Mu.Lock()
	spec, loaded := r.kit.Docker.Created[0], r.kit.Docker.Policies[0]
	r.kit.Docker.Mu.Unlock()
	if dir, _ := layout.TurnDir(r.kit.Cfg.RunRoot, s.id); spec.TurnDir != dir || spec.Session == nil {
		t.Errorf("network session container: turn dir %q, want %q", spec.TurnDir, dir)
	}
	if loaded == nil || loaded.Grants == nil {
		t.Errorf("the session's policy did not load as the broker loads it: %+v", loaded)
	}
	e := r.startNetExec(s, apiwire.SessionExec{Command: "echo hi", Network: true, Credentials: []string{"gh"}, TimeoutSeconds: 60})
	ev := e.next(t)
	// The approver is shown the credential and the variable its
	// placeholder arrives in.
	if ap := s.Status().Approvals; len(ap) != 1 || !slices.Equal(ap[0].Credentials, []string{"gh"}) || ap[0].CredentialVariables["gh"] != "GITHUB_TOKEN" {
		t.Errorf("approvals %+v, want gh in GITHUB_TOKEN", ap)
	}
	if code, body := decide(t, r, s, ev.ExecID, "approve"); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	evs, err := e.rest()
	if err != nil || len(evs) < 2 || evs[len(evs)-1].Type != apiwire.ExecResult {
		t.Fatalf("events %+v %v, want a result", evs, err)
	}
	got := slices.DeleteFunc(r.d.callList(), func(c string) bool { return strings.HasPrefix(c, "pause") || strings.HasPrefix(c, "unpause") })
	want := []string{"bind " + ev.ExecID, "request exec", "revoke " + ev.ExecID, "client sees result"}
	if !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	g.mu.Lock()
	gr := g.grants[0]
	g.mu.Unlock()
	if gr.Exec != ev.ExecID || gr.Revision < 1 || len(gr.Egress.Credentials) != 1 || gr.Egress.Credentials[0].Dest() != "api.github.test:443" {
		t.Errorf("grant %+v", gr)
	}
	// What the real broker checks: the session's policy, and the grant
	// against it.
	if err := pol.Validate(); err != nil {
		t.Errorf("the session broker's policy is invalid: %v", err)
	}
	if err := gr.Validate(&pol); err != nil {
		t.Errorf("the grant is invalid for the session's policy: %v", err)
	}
	if d := gr.Deadline(); !d.Equal(r.clock.now().Add(60*time.Second+grantDrain)) || d.After(s.expires) {
		t.Errorf("grant deadline %v: want now + 60 s + drain, within the session's life", d)
	}

	// Cancelled by its client leaving: revoked all the same, once.
	e = r.startNetExec(s, apiwire.SessionExec{Command: "block", Network: true})
	ev = e.next(t)
	if code, body := decide(t, r, s, ev.ExecID, "approve"); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	if st := e.next(t); st.Type != apiwire.ExecStarted {
		t.Fatalf("event %+v, want started", st)
	}
	e.cancel()
	if _, err := e.rest(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled exec: %v", err)
	}
	calls := r.d.callList()
	if n := slices.Index(calls, "revoke "+ev.ExecID); n < 0 || slices.Index(calls[n+1:], "revoke "+ev.ExecID) >= 0 {
		t.Errorf("calls %q: want one revoke of %s", calls, ev.ExecID)
	}
	g.mu.Lock()
	live := g.live
	g.mu.Unlock()
	if live != "" {
		t.Errorf("grant of %s still live after its exec", live)
	}
}

// TestNetRevokeFailureStopsBroker: a revoke the broker could not confirm
// (503) stops the session's broker units, and the session's later network
// execs are refused.
func TestNetRevokeFailureStopsBroker(t *testing.T) {
	r, g := newNetRig(t)
	s := r.createNet(t, alice)
	g.mu.Lock()
	g.revokeStatus = http.StatusServiceUnavailable
	g.mu.Unlock()
	e := r.startNetExec(s, apiwire.SessionExec{Command: "echo hi", Network: true})
	ev := e.next(t)
	decide(t, r, s, ev.ExecID, "approve")
	if _, err := e.rest(); err != nil {
		t.Fatal(err)
	}
	r.kit.Units.Mu.Lock()
	stopped := slices.Contains(r.kit.Units.Stopped, s.id)
	r.kit.Units.Mu.Unlock()
	if !stopped {
		t.Fatal("the session's broker was not stopped after a failed revoke")
	}
	if got := r.kit.Counter("sandbox_session_network_execs_total", "outcome", "revoke_failed"); got != 1 {
		t.Errorf("revoke_failed counted %v times", got)
	}
	err := r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: "echo hi", Network: true}, func(apiwire.SessionExecEvent) error { return nil })
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "network is gone") {
		t.Errorf("network exec after the broker stopped: %v", err)
	}
	// An exec without network still runs.
	if out, _, _, _ := r.exec(t, s, "echo still"); out != "still\n" {
		t.Errorf("plain exec after: %q", out)
	}
}

// TestNetBindFailureNeverStarts: a grant the broker refuses (a credential
// it cannot load) leaves the exec unstarted.
func TestNetBindFailureNeverStarts(t *testing.T) {
	r, g := newNetRig(t)
	s := r.createNet(t, alice)
	g.mu.Lock()
	g.bindStatus = http.StatusBadRequest
	g.mu.Unlock()
	e := r.startNetExec(s, apiwire.SessionExec{Command: "echo hi", Network: true})
	ev := e.next(t)
	decide(t, r, s, ev.ExecID, "approve")
	evs, err := e.rest()
	if err != nil || len(evs) != 1 || evs[0].Error != errNetworkBind {
		t.Fatalf("events %+v %v, want the bind error", evs, err)
	}
	if slices.Contains(r.d.callList(), "request exec") {
		t.Error("an exec whose grant was refused reached the supervisor")
	}
	// A bind the broker did not answer (503): nobody knows whether it
	// holds the grant, so the host revokes it; "no such grant" is fine.
	g.mu.Lock()
	g.bindStatus = http.StatusServiceUnavailable
	g.mu.Unlock()
	e = r.startNetExec(s, apiwire.SessionExec{Command: "echo hi", Network: true})
	ev = e.next(t)
	decide(t, r, s, ev.ExecID, "approve")
	if evs, err := e.rest(); err != nil || len(evs) != 1 || evs[0].Error != errNetworkBind {
		t.Fatalf("events %+v %v, want the bind error", evs, err)
	}
	calls := r.d.callList()
	if !slices.Contains(calls, "revoke "+ev.ExecID) || slices.Contains(calls, "request exec") {
		t.Errorf("calls %q: want the unconfirmed bind revoked and nothing started", calls)
	}
	r.kit.Units.Mu.Lock()
	stopped := slices.Contains(r.kit.Units.Stopped, s.id)
	r.kit.Units.Mu.Unlock()
	if stopped {
		t.Error("the broker was stopped though the revoke confirmed no grant")
	}
}

// TestNetNoApprovalRefused: no decision within the approval timeout, or
// the session closing during the wait, refuses the exec: never bound,
// never started.
func TestNetNoApprovalRefused(t *testing.T) {
	r, _ := newNetRig(t)
	expire := make(chan time.Time)
	asked := make(chan time.Duration, 2)
	timers := 0
	r.k.approvalTimeout = func(d time.Duration) <-chan time.Time {
		asked <- d
		if timers++; timers == 2 { // execs are one at a time
			return nil // the second exec's approval never times out
		}
		return expire
	}
	s := r.createNet(t, alice)
	e := r.startNetExec(s, apiwire.SessionExec{Command: "echo hi", Network: true})
	e.next(t)
	if d := <-asked; d != time.Duration(r.kit.Cfg.Runs.ApprovalTimeoutSeconds)*time.Second {
		t.Errorf("approval timeout %v, want runs.approvalTimeoutSeconds", d)
	}
	close(expire)
	evs, err := e.rest()
	if err != nil || len(evs) != 1 || evs[0].Error != errNetworkTimeout {
		t.Fatalf("events %+v %v, want the timeout error", evs, err)
	}
	e = r.startNetExec(s, apiwire.SessionExec{Command: "echo hi", Network: true})
	<-asked
	ev := e.next(t)
	r.k.Close(s)
	evs, err = e.rest()
	if err != nil || len(evs) != 1 || evs[0].Error != errNetworkClosed {
		t.Fatalf("events %+v %v, want the session-closed error", evs, err)
	}
	for _, c := range r.d.callList() {
		if strings.HasPrefix(c, "bind") || c == "request exec" {
			t.Errorf("an unapproved exec reached %q", c)
		}
	}
	if code, _ := decide(t, r, s, ev.ExecID, "approve"); code != http.StatusNotFound {
		t.Errorf("approve after close: %d, want 404", code)
	}
}

// TestNetRefusals: what is refused at create and at exec, with a reason
// that says why, and nothing started.
func TestNetRefusals(t *testing.T) {
	r, _ := newNetRig(t)
	for _, tc := range []struct {
		name string
		p    apiwire.SessionCreate
		want string
	}{
		{"credentials without network", apiwire.SessionCreate{Credentials: []string{"gh"}}, "credentials need network: true"},
		{"undeclared credential", apiwire.SessionCreate{Network: true, Credentials: []string{"nope"}}, "credentials[0]: no credential of that name"},
		{"another client's credential", apiwire.SessionCreate{Network: true, Credentials: []string{"other"}}, "credentials[0]: no credential of that name"},
		{"twice", apiwire.SessionCreate{Network: true, Credentials: []string{"gh", "gh"}}, "credentials[1] names a credential already listed"},
	} {
		_, err := r.k.Create(context.Background(), tc.p, alice)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want invalid %q", tc.name, err, tc.want)
		}
	}
	if n := len(r.k.all()); n != 0 {
		t.Fatalf("%d sessions made by refused creates", n)
	}
	plain := r.create(t, alice)
	err := r.k.Exec(context.Background(), plain, apiwire.SessionExec{Command: "echo", Network: true}, func(apiwire.SessionExecEvent) error { return nil })
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "created without network") {
		t.Errorf("network exec in a session without network: %v", err)
	}
	r.kit.Units.Mu.Lock()
	started := len(r.kit.Units.Started)
	r.kit.Units.Mu.Unlock()
	if started != 0 {
		t.Errorf("a session without network started %d broker units", started)
	}
	r.kit.Docker.Mu.Lock()
	plainDir := r.kit.Docker.Created[0].TurnDir
	r.kit.Docker.Mu.Unlock()
	if plainDir != "" {
		t.Errorf("a session without network has turn dir %q in its container", plainDir)
	}
	s := r.createNet(t, alice, "gh")
	for _, tc := range []struct {
		name string
		x    apiwire.SessionExec
		want string
	}{
		{"undeclared credential", apiwire.SessionExec{Command: "echo", Network: true, Credentials: []string{"other"}}, "credentials[0] was not declared when the session was created"},
		{"credentials without network", apiwire.SessionExec{Command: "echo", Credentials: []string{"gh"}}, "credentials need network: true"},
		{"bad exec", apiwire.SessionExec{Network: true}, "command"},
	} {
		err := r.k.Exec(context.Background(), s, tc.x, func(apiwire.SessionExecEvent) error { return nil })
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want invalid %q", tc.name, err, tc.want)
		}
	}
	// One network exec at a time: a second is refused while the first
	// waits for its approval.
	e := r.startNetExec(s, apiwire.SessionExec{Command: "echo one", Network: true})
	first := e.next(t)
	code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/exec", apiwire.SessionExec{Command: "echo two", Network: true})
	if code != http.StatusConflict || !strings.Contains(body, "one at a time") {
		t.Errorf("second network exec: %d %s, want 409 one at a time", code, body)
	}
	if st := s.Status(); st.NetworkExec != first.ExecID || !st.Network || !slices.Equal(st.Credentials, []string{"gh"}) {
		t.Errorf("status %+v", st)
	}
	decide(t, r, s, first.ExecID, "deny")
	e.rest()
	if slices.Contains(r.d.callList(), "request exec") {
		t.Error("a refused exec reached the supervisor")
	}
}

// TestNetCloseDuringExec: closing a session while its approved network
// exec runs ends the exec and stops the broker units with the container
// (which ends the grant with the broker: the socket is gone by the time
// the exec's own revoke comes, and that is not taken as a failure).
func TestNetCloseDuringExec(t *testing.T) {
	r, _ := newNetRig(t)
	s := r.createNet(t, alice)
	e := r.startNetExec(s, apiwire.SessionExec{Command: "block", Network: true})
	ev := e.next(t)
	decide(t, r, s, ev.ExecID, "approve")
	if st := e.next(t); st.Type != apiwire.ExecStarted {
		t.Fatalf("event %+v, want started", st)
	}
	r.k.Close(s)
	if _, err := e.rest(); !errors.Is(err, ErrEnded) {
		t.Errorf("exec after close: %v, want ErrEnded", err)
	}
	r.kit.Units.Mu.Lock()
	stops, active := 0, r.kit.Units.Active[s.id]
	for _, id := range r.kit.Units.Stopped {
		if id == s.id {
			stops++
		}
	}
	r.kit.Units.Mu.Unlock()
	if stops != 1 || active {
		t.Errorf("broker units stopped %d times, active %v after close: want once, by close", stops, active)
	}
}

// TestNetPlaceholdersForOneExec: the placeholders and CA the broker's
// bind answers reach that exec's request to the supervisor (and only that
// exec's: the next one gets the next bind's); the host logs neither the
// placeholder nor the CA; the exec is proxied with nothing else (no
// plain-http rewrite exists any more); a client env naming the credential's
// variable is refused before anyone is asked.
func TestNetPlaceholdersForOneExec(t *testing.T) {
	var logs syncBuffer
	r, g := newNetRigLogging(t, slog.New(slog.NewJSONHandler(&logs, nil)))
	s := r.createNet(t, alice, "gh")
	const ca = "-----BEGIN CERTIFICATE-----\nMIIBexecCA\n-----END CERTIFICATE-----\n"
	phs := []string{"rtsbx_ph_00000000000000000000000000000001", "rtsbx_ph_00000000000000000000000000000002"}
	var outs []string
	for i, ph := range phs {
		g.mu.Lock()
		g.answerEnv, g.answerCA = map[string]string{"GITHUB_TOKEN": ph}, ca
		g.mu.Unlock()
		e := r.startNetExec(s, apiwire.SessionExec{Command: "placeholders", Network: true, Credentials: []string{"gh"}})
		ev := e.next(t)
		if code, body := decide(t, r, s, ev.ExecID, "approve"); code != http.StatusOK {
			t.Fatalf("approve %d: %d %s", i, code, body)
		}
		evs, err := e.rest()
		if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != apiwire.ExecResult {
			t.Fatalf("exec %d: %+v %v", i, evs, err)
		}
		var out string
		for _, ev := range evs {
			out += string(ev.Data)
		}
		outs = append(outs, out)
	}
	if outs[0] != "GITHUB_TOKEN="+phs[0]+" ca proxy=true\n" || outs[1] != "GITHUB_TOKEN="+phs[1]+" ca proxy=true\n" {
		t.Errorf("the supervisor saw %q, want each exec's own placeholder and the CA", outs)
	}
	// An exec without credentials carries none.
	g.mu.Lock()
	g.answerEnv, g.answerCA = nil, ""
	g.mu.Unlock()
	e := r.startNetExec(s, apiwire.SessionExec{Command: "placeholders", Network: true})
	ev := e.next(t)
	decide(t, r, s, ev.ExecID, "approve")
	if evs, err := e.rest(); err != nil || len(evs) < 2 || string(evs[len(evs)-2].Data) != " proxy=true\n" {
		t.Errorf("an exec without credentials: %+v %v, want no placeholder", evs, err)
	}
	for _, secret := range append(phs, "MIIBexecCA") {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the host logged a placeholder or the CA:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), `"placeholders":1`) {
		t.Errorf("the granted line does not count the placeholders:\n%s", logs.String())
	}
	calls := len(r.d.callList())
	err := r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: "placeholders", Network: true, Credentials: []string{"gh"},
		Env: map[string]string{"GITHUB_TOKEN": "mine"}}, func(apiwire.SessionExecEvent) error { return nil })
	if !errors.Is(err, ErrInvalid) || len(r.d.callList()) != calls {
		t.Errorf("client env naming the credential's variable: %v, want refused before anything", err)
	}
}

// TestNetDefaultVariable: a credential that declares no env is reached
// through its placeholder in the default variable (config.DefaultEnv:
// OTHER_TOKEN) like any other, so a client env naming that variable is
// refused before anyone is asked, as for a declared one (before, such a
// credential was sent to the plain-http rewrite, which the broker refuses
// for an intercepted destination).
func TestNetDefaultVariable(t *testing.T) {
	r, _ := newNetRigLogging(t, slog.New(slog.DiscardHandler))
	s := r.createNet(t, bob, "other")
	calls := len(r.d.callList())
	err := r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: "placeholders", Network: true, Credentials: []string{"other"},
		Env: map[string]string{"OTHER_TOKEN": "mine"}}, func(apiwire.SessionExecEvent) error { return nil })
	if !errors.Is(err, ErrInvalid) || len(r.d.callList()) != calls {
		t.Errorf("client env naming the default variable: %v, want refused before anything", err)
	}
}
