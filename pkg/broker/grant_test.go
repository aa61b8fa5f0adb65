package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/grantctl"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// grantHarness is a session's broker (a grants policy) on a Unix socket,
// the host's grant client, a loopback echo destination (CONNECT) and a
// loopback HTTP destination (absolute form), both in egressAllow.
type grantHarness struct {
	*harness
	tb         testing.TB
	ctl        grantctl.Client
	echo, web  string
	echoHits   *atomic.Int64
	webHits    atomic.Int64
	revision   atomic.Int64
	echoClosed chan struct{} // one value per echo connection the broker closed
}

// newGrantHarness: listed are extra credential names the policy lists
// (files absent).
func newGrantHarness(t testing.TB, controlUID int, listed ...string) *grantHarness {
	t.Helper()
	return newGrantHarnessAllowing(t, controlUID, nil, listed...)
}

// newGrantHarnessAllowing is newGrantHarness with allow added to the
// policy's egressAllow.
func newGrantHarnessAllowing(t testing.TB, controlUID int, allow []string, listed ...string) *grantHarness {
	t.Helper()
	dir := t.TempDir()
	g := &grantHarness{harness: &harness{dir: dir, logs: &syncBuffer{}}, tb: t, echoClosed: make(chan struct{}, 1024)}
	if tt, ok := t.(*testing.T); ok {
		g.harness.t = tt // the harness's raw requests
	}
	g.echo, g.echoHits = grantEcho(t, g.echoClosed)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.webHits.Add(1)
		io.WriteString(w, "hello from the web")
	}))
	t.Cleanup(web.Close)
	g.web = strings.TrimPrefix(web.URL, "http://")
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	writeFile(t, filepath.Join(credDir, "gh-token"), "ghp_realsecretvalue0123456789\n")
	creds, err := credential.OpenDir(credDir, "")
	if err != nil {
		t.Fatal(err)
	}
	g.pol = &policy.Policy{Version: policy.Version, TurnID: "0123456789abcdef0123456789abcdef",
		Identity:       policy.Identity{Channel: "session-s1", ChannelTag: "session-s1"},
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(), Limits: policy.DefaultLimits(),
		EgressAllow: append([]string{g.echo, g.web}, allow...), Grants: &policy.Grants{Credentials: append([]string{"gh-token"}, listed...)}}
	g.serve(t, Config{Policy: g.pol, Credentials: creds, ControlUID: controlUID,
		Logger: slog.New(slog.NewJSONHandler(g.logs, nil))})
	g.ctl = grantctl.Client{Socket: g.sock}
	return g
}

// grantEcho is a loopback echo server; closed gets a value each time the
// broker ends its side of a connection. The server keeps its own side
// open until the test ends, as a destination may: only the broker closing
// the connection ends a tunnel to it.
func grantEcho(t testing.TB, closed chan<- struct{}) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	t.Cleanup(func() { ln.Close(); close(hold) })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				io.Copy(c, c)
				select {
				case closed <- struct{}{}:
				default: // a benchmark's many connections: nobody waits for them
				}
				<-hold
			}()
		}
	}()
	return ln.Addr().String(), &n
}

func (g *grantHarness) grant(exec string) policy.Grant {
	return policy.Grant{Exec: exec, Revision: g.revision.Add(1),
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(), Egress: policy.DefaultEgress()}
}

func (g *grantHarness) bind(exec string) {
	g.tb.Helper()
	if _, err := g.ctl.Bind(context.Background(), g.grant(exec)); err != nil {
		g.tb.Fatalf("bind %s: %v", exec, err)
	}
}

func (g *grantHarness) revoke(exec string) policy.RevokeAnswer {
	g.tb.Helper()
	a, err := g.ctl.Revoke(context.Background(), exec)
	if err != nil {
		g.tb.Fatalf("revoke %s: %v", exec, err)
	}
	return a
}

// guestConn is a guest's connection to the broker socket (what the
// in-container bridge opens for each TCP connection).
type guestConn struct {
	c  net.Conn
	br *bufio.Reader
}

func (g *grantHarness) dialGuest() *guestConn {
	g.tb.Helper()
	c, err := net.Dial("unix", g.sock)
	if err != nil {
		g.tb.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	g.tb.Cleanup(func() { c.Close() })
	return &guestConn{c: c, br: bufio.NewReader(c)}
}

// get sends an absolute-form GET on the connection (keep-alive) and
// returns the status and body; status 0 means the connection was closed.
func (gc *guestConn) get(dest string) (int, string) {
	if _, err := fmt.Fprintf(gc.c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest); err != nil {
		return 0, ""
	}
	resp, err := http.ReadResponse(gc.br, &http.Request{Method: http.MethodGet})
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// connect sends a CONNECT; on 200 the connection is the tunnel.
func (gc *guestConn) connect(dest string) int {
	if _, err := fmt.Fprintf(gc.c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(gc.br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp.StatusCode
}

// echoes reports whether the tunnel carries a round trip.
func (gc *guestConn) echoes() bool {
	if _, err := io.WriteString(gc.c, "ping"); err != nil {
		return false
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(gc.br, buf)
	return err == nil && string(buf) == "ping"
}

// TestGrantNoGrantRefused: a session broker with no live grant refuses
// every proxy request (CONNECT and absolute form) with a generic 403,
// reaches no destination, and serves none of a turn's routes.
func TestGrantNoGrantRefused(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	if code := g.dialGuest().connect(g.echo); code != http.StatusForbidden {
		t.Errorf("CONNECT without a grant: %d, want 403", code)
	}
	code, body := g.dialGuest().get(g.web)
	if code != http.StatusForbidden || body != "egress refused\n" {
		t.Errorf("GET without a grant: %d %q, want 403 with the generic text", code, body)
	}
	if code, body := g.raw("POST", rawPost("/model", `{"messages":[]}`, nil)); code != http.StatusNotFound || !strings.HasPrefix(body, `{"error":`) {
		t.Errorf("POST /model on a session broker: %d %s, want 404", code, body)
	}
	if n := g.echoHits.Load() + g.webHits.Load(); n != 0 {
		t.Errorf("a destination was reached %d times without a grant", n)
	}
	if !strings.Contains(g.logs.String(), "egress refused: no live grant") {
		t.Errorf("no refusal line logged:\n%s", g.logs)
	}
}

// TestGrantDuringGrantPasses: under a live grant both forms reach their
// destination, and the log names the exec and the destination, never a
// payload.
func TestGrantDuringGrantPasses(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	g.bind("exec-1")
	if code, body := g.dialGuest().get(g.web); code != 200 || body != "hello from the web" {
		t.Errorf("GET under the grant: %d %q", code, body)
	}
	gc := g.dialGuest()
	if code := gc.connect(g.echo); code != 200 || !gc.echoes() {
		t.Fatalf("CONNECT under the grant: %d", code)
	}
	gc.c.Close()
	a := g.revoke("exec-1")
	if a.Exec != "exec-1" || a.Revision != 1 {
		t.Errorf("revoke answer %+v", a)
	}
	logs := g.logs.String()
	for _, want := range []string{`"msg":"grant bound"`, `"msg":"grant revoked"`, `"exec":"exec-1"`, `"dest":"` + g.echo + `"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	for _, never := range []string{"ping", "hello from the web", "ghp_realsecretvalue"} {
		if strings.Contains(logs, never) {
			t.Errorf("log carries %q", never)
		}
	}
}

// TestGrantConnectionAfterRevoke: a connection that carried a request
// under the grant is closed at revoke, and one opened during the grant
// but first used after it (a background process's) is refused; a fresh
// connection after revoke is refused too.
func TestGrantConnectionAfterRevoke(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	g.bind("exec-1")
	used := g.dialGuest()
	if code, _ := used.get(g.web); code != 200 {
		t.Fatalf("GET under the grant: %d", code)
	}
	idle := g.dialGuest()
	a := g.revoke("exec-1")
	if a.Connections != 1 {
		t.Errorf("revoke closed %d connections, want 1 (the one used under the grant)", a.Connections)
	}
	if code, _ := used.get(g.web); code != 0 {
		t.Errorf("a connection used under the grant answered %d after revoke, want closed", code)
	}
	if code, _ := idle.get(g.web); code != http.StatusForbidden {
		t.Errorf("a connection opened during the grant, used after: %d, want 403", code)
	}
	if code, _ := g.dialGuest().get(g.web); code != http.StatusForbidden {
		t.Errorf("a connection after revoke: %d, want 403", code)
	}
	if n := g.webHits.Load(); n != 1 {
		t.Errorf("destination reached %d times, want 1", n)
	}
}

// TestGrantRevokeCutsTunnel: a CONNECT tunnel open across revoke is cut
// by the time Revoke returns: the guest's side reads end of stream at
// once and the destination connection is closed.
func TestGrantRevokeCutsTunnel(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	g.bind("exec-1")
	gc := g.dialGuest()
	if code := gc.connect(g.echo); code != 200 || !gc.echoes() {
		t.Fatalf("CONNECT under the grant: %d", code)
	}
	a := g.revoke("exec-1")
	if a.Requests != 1 || a.Connections != 1 {
		t.Errorf("revoke cut %d requests and %d connections, want 1 and 1", a.Requests, a.Connections)
	}
	// The tunnel's handler (which closes the destination connection
	// before it returns) ended before the answer.
	if n := g.broker.grants.inflight.Load(); n != 0 {
		t.Errorf("%d proxy requests still running when Revoke returned", n)
	}
	// Closed before Revoke returned: the read ends now, not at a deadline.
	gc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := gc.br.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("tunnel still open after revoke: read %d, %v", n, err)
	}
	<-g.echoClosed // the destination side was closed as well
}

// TestGrantSecondExecDoesNotRevive: a connection of exec 1's grant stays
// dead under exec 2's grant, an old revision cannot be bound again, and
// exec 2's own connections work.
func TestGrantSecondExecDoesNotRevive(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	g.bind("exec-1")
	old := g.dialGuest()
	if code, _ := old.get(g.web); code != 200 {
		t.Fatalf("GET under exec 1: %d", code)
	}
	tunnel := g.dialGuest()
	if code := tunnel.connect(g.echo); code != 200 {
		t.Fatalf("CONNECT under exec 1: %d", code)
	}
	g.revoke("exec-1")
	stale := policy.Grant{Exec: "exec-1", Revision: 1, DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(), Egress: policy.DefaultEgress()}
	if _, err := g.ctl.Bind(context.Background(), stale); !errors.Is(err, grantctl.ErrConflict) {
		t.Errorf("rebinding revision 1: %v, want ErrConflict", err)
	}
	g.bind("exec-2")
	if code, _ := old.get(g.web); code != 0 && code != http.StatusForbidden {
		t.Errorf("exec 1's connection under exec 2's grant: %d, want closed or 403", code)
	}
	if tunnel.echoes() {
		t.Error("exec 1's tunnel carries bytes under exec 2's grant")
	}
	if code, _ := g.dialGuest().get(g.web); code != 200 {
		t.Errorf("exec 2's own request: %d, want 200", code)
	}
	g.revoke("exec-2")
}

// TestGrantControlRefusals: revoke of an unknown exec (none live, or
// another's live) is a clear error that changes nothing; a second exec's
// bind while one is live is a conflict; a malformed, invalid or expired
// grant, or one naming a credential the broker cannot load, is refused;
// and a peer other than the host reaches no control route.
func TestGrantControlRefusals(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	ctx := context.Background()
	if _, err := g.ctl.Revoke(ctx, "nope"); !errors.Is(err, grantctl.ErrUnknownGrant) {
		t.Errorf("revoke with no grant: %v, want ErrUnknownGrant", err)
	}
	g.bind("exec-1")
	if _, err := g.ctl.Revoke(ctx, "exec-2"); !errors.Is(err, grantctl.ErrUnknownGrant) {
		t.Errorf("revoke of another exec: %v, want ErrUnknownGrant", err)
	}
	if _, err := g.ctl.Bind(ctx, g.grant("exec-2")); !errors.Is(err, grantctl.ErrConflict) {
		t.Errorf("a second bind while exec 1 is live: %v, want ErrConflict", err)
	}
	if code, _ := g.dialGuest().get(g.web); code != 200 {
		t.Errorf("exec 1's grant after the refused calls: %d, want 200", code)
	}
	g.revoke("exec-1")
	if _, err := g.ctl.Revoke(ctx, "exec-1"); !errors.Is(err, grantctl.ErrUnknownGrant) {
		t.Errorf("a second revoke: %v, want ErrUnknownGrant", err)
	}
	expired := g.grant("exec-3")
	expired.DeadlineUnixMs = time.Now().Add(-time.Second).UnixMilli()
	invalid := g.grant("exec/3")
	missing := g.grant("exec-3")
	missing.Egress.Credentials = []policy.EgressCredential{{Name: "gh", Host: "127.0.0.1", Port: 1, Credential: "other",
		Header: "Authorization", Format: policy.FormatBearer}}
	for name, gr := range map[string]policy.Grant{"expired": expired, "invalid": invalid, "unlisted credential": missing} {
		if _, err := g.ctl.Bind(ctx, gr); !errors.Is(err, grantctl.ErrRefused) {
			t.Errorf("%s grant: %v, want ErrRefused", name, err)
		}
	}
	if code, _ := g.raw("POST", rawPost(policy.RouteControlGrant, `{"exec":`, nil)); code != http.StatusBadRequest {
		t.Errorf("malformed grant: %d, want 400", code)
	}
	if code, _ := g.dialGuest().get(g.web); code != http.StatusForbidden {
		t.Errorf("after refused binds a request passed: %d", code)
	}

	other := newGrantHarness(t, os.Getuid()+1)
	if _, err := other.ctl.Bind(ctx, other.grant("exec-1")); !errors.Is(err, grantctl.ErrRefused) {
		t.Errorf("bind from a peer other than the host: %v, want ErrRefused", err)
	}
	if code, _ := other.dialGuest().get(other.web); code != http.StatusForbidden {
		t.Errorf("a foreign peer's bind opened the network: %d", code)
	}
}

// TestGrantCredentialLoadedAtBind: a grant naming a listed credential
// whose file is absent is refused at bind (fail loudly at the exec's
// start), not at its first request.
func TestGrantCredentialLoadedAtBind(t *testing.T) {
	g := newGrantHarness(t, os.Getuid(), "absent")
	gr := g.grant("exec-1")
	gr.Egress.Credentials = []policy.EgressCredential{{Name: "gh", Host: "127.0.0.1", Port: 1, Credential: "absent",
		Header: "Authorization", Format: policy.FormatBearer}}
	if _, err := g.ctl.Bind(context.Background(), gr); !errors.Is(err, grantctl.ErrRefused) {
		t.Errorf("grant of an absent credential: %v, want ErrRefused", err)
	}
}

// TestGrantConcurrentBindRevoke: binds, revokes and guest requests race
// (run under -race); every request either passes under a live grant or is
// refused, and after the last revoke nothing passes and no connection is
// held for a grant.
func TestGrantConcurrentBindRevoke(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("unix", g.sock)
				if err != nil {
					return
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				gc := &guestConn{c: c, br: bufio.NewReader(c)}
				if i%2 == 0 {
					gc.get(g.web)
				} else if gc.connect(g.echo) == 200 {
					gc.echoes()
				}
				c.Close()
			}
		}()
	}
	ctx := context.Background()
	for i := range 40 {
		exec := fmt.Sprintf("exec-%d", i)
		if _, err := g.ctl.Bind(ctx, g.grant(exec)); err != nil {
			t.Fatalf("bind %s: %v", exec, err)
		}
		if _, err := g.ctl.Revoke(ctx, exec); err != nil {
			t.Fatalf("revoke %s: %v", exec, err)
		}
	}
	close(stop)
	wg.Wait()
	if code, _ := g.dialGuest().get(g.web); code != http.StatusForbidden {
		t.Errorf("after the last revoke: %d, want 403", code)
	}
	if conns, live := g.broker.grants.held(); conns != 0 || live {
		t.Errorf("after the last revoke the broker holds %d connections, live grant %v", conns, live)
	}
}

// TestGrantConnectionBelongsToItsGrant: a connection that carried a
// request of one grant is refused under the next grant even if it was
// never closed (a revoke racing its close), naming the ended exec.
func TestGrantConnectionBelongsToItsGrant(t *testing.T) {
	gs := newGrantState(&policy.Policy{}, 0, nil, nil, slog.New(slog.DiscardHandler), time.Now)
	live := func(exec string) *liveGrant {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		return &liveGrant{g: policy.Grant{Exec: exec}, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	cg := &connGrant{conn: c1}
	if lg, _ := gs.admit(cg); lg != nil {
		t.Fatal("admitted with no grant")
	}
	first := live("exec-1")
	gs.live = first
	lg, _ := gs.admit(cg)
	if lg != first {
		t.Fatal("not admitted under the live grant")
	}
	lg.active.Done()
	gs.live = live("exec-2")
	if lg, ended := gs.admit(cg); lg != nil || ended != "exec-1" {
		t.Errorf("exec 1's connection under exec 2's grant: admitted %v, ended %q", lg != nil, ended)
	}
	if lg, _ := gs.admit(&connGrant{conn: c2}); lg != gs.live {
		t.Error("a fresh connection is not admitted under exec 2's grant")
	} else {
		lg.active.Done()
	}
	gs.live.cancel() // expired
	if lg, _ := gs.admit(&connGrant{conn: c2}); lg != nil {
		t.Error("admitted under an expired grant")
	}
}

// TestLimitListenerExemptsTheHost: with every slot taken, a guest's
// connection is closed at once while the host's (exempt) is accepted
// without a slot, so a revoke reaches a broker whose guest holds every
// connection.
func TestLimitListenerExemptsTheHost(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "l.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	calls := 0
	l := limitListenerExempt(ln, 1, func(net.Conn) bool { calls++; return calls == 3 })
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial() // the guest's first: takes the one slot
	held, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	guest, host := dial(), dial()
	got, err := l.Accept() // the guest's second is closed, the host's accepted
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if _, ok := got.(*limitConn); ok {
		t.Error("the host's connection took a slot")
	}
	guest.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := guest.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the guest's connection over the limit: read %v, want EOF (closed)", err)
	}
	io.WriteString(host, "x")
	got.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := got.Read(make([]byte, 1)); err != nil {
		t.Errorf("the host's connection: %v", err)
	}
}

// TestGrantExpiresAtItsDeadline: a grant the host never revokes ends at
// its own deadline: its tunnel is cut, new requests are refused, and the
// next exec's bind replaces it without a revoke.
func TestGrantExpiresAtItsDeadline(t *testing.T) {
	g := newGrantHarness(t, os.Getuid())
	gr := g.grant("exec-1")
	gr.DeadlineUnixMs = time.Now().Add(1500 * time.Millisecond).UnixMilli()
	if _, err := g.ctl.Bind(context.Background(), gr); err != nil {
		t.Fatal(err)
	}
	gc := g.dialGuest()
	switch code := gc.connect(g.echo); code {
	case 200:
		// The tunnel ends only when the grant does (its lifetime is ten
		// minutes): the read below is the wait.
		if _, err := io.Copy(io.Discard, gc.br); err != nil && !strings.Contains(err.Error(), "closed") && !strings.Contains(err.Error(), "reset") {
			t.Errorf("tunnel end: %v", err)
		}
	case http.StatusForbidden:
		// A slow machine: the grant had already expired.
	default:
		t.Fatalf("CONNECT: %d", code)
	}
	if code, _ := g.dialGuest().get(g.web); code != http.StatusForbidden {
		t.Errorf("a request after the grant's deadline: %d, want 403", code)
	}
	g.bind("exec-2")
	if code, _ := g.dialGuest().get(g.web); code != 200 {
		t.Errorf("exec 2 after exec 1's grant expired: %d, want 200", code)
	}
	g.revoke("exec-2")
}

// TestGrantRefusalsDoNotFloodTheLog: a process looping refused requests
// on a session broker (proxy requests without a grant, other routes, the
// control routes from a guest peer) gets at most MaxRefusals lines of
// each kind logged one by one; the rest are counted and logged as a
// number at the next bind.
func TestGrantRefusalsDoNotFloodTheLog(t *testing.T) {
	g := newGrantHarness(t, os.Getuid()+1) // the test is a guest peer here
	const n = 3 * MaxRefusals
	for range n {
		if code, _ := g.dialGuest().get(g.web); code != http.StatusForbidden {
			t.Fatalf("GET without a grant: %d", code)
		}
		g.raw("POST", rawPost("/model", `{}`, nil))
		g.raw("POST", rawPost(policy.RouteControlGrant, `{}`, nil))
	}
	logs := g.logs.String()
	for _, line := range []string{"egress refused: no live grant", `"msg":"call refused"`, "grant control refused"} {
		if got := strings.Count(logs, line); got > MaxRefusals {
			t.Errorf("%q logged %d times for %d requests, want at most %d", line, got, n, MaxRefusals)
		}
	}
	if !strings.Contains(logs, `"reason":"refusal budget spent"`) && !strings.Contains(logs, "refusal budget spent") {
		t.Errorf("the spent budget is not logged:\n%s", logs)
	}
}

// TestRunSessionBroker: Run serves a grants policy file with the policy
// file's owner as the control peer: the host's client binds, the guest's
// request passes under the grant and is refused after its revoke.
func TestRunSessionBroker(t *testing.T) {
	dir := t.TempDir()
	var hits atomic.Int64
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer web.Close()
	dest := strings.TrimPrefix(web.URL, "http://")
	p := &policy.Policy{Version: policy.Version, TurnID: "0123456789abcdef0123456789abcdef",
		Identity:       policy.Identity{Channel: "session-s1", ChannelTag: "session-s1"},
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(), Limits: policy.DefaultLimits(),
		EgressAllow: []string{dest}, Grants: &policy.Grants{}}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, p.TurnID+".json"), data, 0o600)
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{}, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{TurnID: p.TurnID, PolicyDir: dir, CredentialsDir: dir, Listener: ln,
			Notify: func(s string) {
				if s == "READY=1" {
					ready <- struct{}{}
				}
			}})
	}()
	<-ready
	ctl := grantctl.Client{Socket: sock}
	g := &grantHarness{harness: &harness{t: t, sock: sock}, tb: t}
	if _, err := ctl.Bind(ctx, policy.Grant{Exec: "e1", Revision: 1, DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(),
		Egress: policy.DefaultEgress()}); err != nil {
		t.Fatalf("bind as the policy file's owner: %v", err)
	}
	if code, _ := g.dialGuest().get(dest); code != 200 {
		t.Errorf("GET under the grant: %d", code)
	}
	if _, err := ctl.Revoke(ctx, "e1"); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if code, _ := g.dialGuest().get(dest); code != http.StatusForbidden {
		t.Errorf("GET after revoke: %d, want 403", code)
	}
	if hits.Load() != 1 {
		t.Errorf("destination reached %d times, want 1", hits.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
