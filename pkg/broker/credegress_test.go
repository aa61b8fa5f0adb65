package broker

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// fakeResolver answers names from a table (names carry the dialer's
// trailing dot).
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[strings.TrimSuffix(host, ".")]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// credToken is the credentialed destination's token: distinctive, so a
// leak anywhere is easy to find.
const credToken = "glpat-CREDEGRESS-token-5f2c9a7e1b3d8c4f"

// credServer is a loopback HTTPS server (its own certificate, the test's
// root CA) that requires the token, records every request's headers and
// serves a few routes.
type credServer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	headers []http.Header
	handler http.Handler // the routes behind the token check (git, say); nil: the defaults
}

func newCredServer(t testing.TB, other string) *credServer {
	t.Helper()
	s := &credServer{}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		h := s.handler
		s.mu.Unlock()
		if r.URL.Path == "/redirect" { // before the check: a redirect to another host
			http.Redirect(w, r, other+"/landing", http.StatusFound)
			return
		}
		user, pass, basic := r.BasicAuth()
		if r.Header.Get("Authorization") != "Bearer "+credToken && !(basic && (pass == credToken || user == credToken)) {
			w.Header().Set("WWW-Authenticate", `Basic realm="private"`) // git asks with the URL's user then
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/private":
			io.WriteString(w, "PRIVATE-BODY-91d3")
		case "/echo-headers": // a destination that reflects what it was sent
			w.Header().Set("X-Seen-Authorization", r.Header.Get("Authorization"))
			io.WriteString(w, "ok")
		case "/echo-trailer": // the echo after the body, in a trailer
			w.Header().Set("Trailer", "X-Echo")
			io.WriteString(w, "body first\n")
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		case "/echo-early-hints": // the echo in a 103 before the answer
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("X-Echo")
			io.WriteString(w, "after hints\n")
		case "/echo-body":
			fmt.Fprintf(w, "%s{\"authorization\":%q}", strings.Repeat("padding ", 8192), r.Header.Get("Authorization"))
		default:
			if h != nil {
				h.ServeHTTP(w, r)
				return
			}
			http.NotFound(w, r)
		}
	}))
	// The untrusted-certificate case makes the server log a handshake error.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *credServer) addr() string { return s.srv.Listener.Addr().String() }

// sawTokenSince reports whether any request after the first n reached
// the server with the token in any header.
func (s *credServer) sawTokenSince(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.headers[n:] {
		for _, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, credToken) {
					return true
				}
			}
		}
	}
	return false
}

func (s *credServer) requests() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.headers) }

// testCA is the server's certificate as PEM: the root CA the broker trusts
// through the policy's test-only testRootCA.
func (s *credServer) testCA() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}))
}

// credRig is a code run's broker (egressOnly) served on loopback TCP (the
// in-container bridge's side of the socket), its logs, a client and, when
// the run is granted the credential, what its supervisor reads: the
// placeholder and the run CA (intercept.go).
type credRig struct {
	t      testing.TB
	proxy  *url.URL
	logs   *waitBuffer
	server *credServer
	env    wire.RunEnv
}

// newCredRig starts a run broker whose policy allows the server's address
// (and extra), and grants the credentialed destination unless grant is false.
func newCredRig(t testing.TB, s *credServer, grant bool, extra ...string) *credRig {
	t.Helper()
	return newCredRigWith(t, s, func(g *policy.Egress) {
		if !grant {
			g.Credentials, g.TestRootCA = nil, ""
		}
	}, nil, extra...)
}

// newCredRigWith is newCredRig with the grant changed by mutate and, if d
// is not nil, the broker's dialer (its resolver: a test seam).
func newCredRigWith(t testing.TB, s *credServer, mutate func(*policy.Egress), d *safefetch.Dialer, extra ...string) *credRig {
	t.Helper()
	dir := t.TempDir()
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	writeFile(t, filepath.Join(credDir, "git-token"), credToken+"\n")
	creds, err := credential.OpenDir(credDir, "")
	if err != nil {
		t.Fatal(err)
	}
	id := ids.NewTurnID()
	g := policy.DefaultEgress()
	host, port, _ := net.SplitHostPort(s.addr())
	p, _ := strconv.Atoi(port)
	g.Credentials = []policy.EgressCredential{{Name: "git", Host: host, Port: p, Credential: "git-token",
		Header: "Authorization", Format: policy.FormatBearer, Env: "GIT_TOKEN"}}
	g.TestRootCA = s.testCA()
	mutate(&g)
	pol := &policy.Policy{Version: policy.Version, TurnID: id,
		Identity:       policy.Identity{Channel: ids.RunName(id), ChannelTag: ids.RunName(id)},
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(), Limits: policy.DefaultLimits(),
		EgressAllow: append([]string{s.addr()}, extra...), Egress: &g, EgressOnly: true}
	logs := &waitBuffer{}
	cfg := Config{Policy: pol, Credentials: creds, LocalAddrs: fakeLocal{}, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	if d != nil {
		allow, _ := safefetch.ParseAllow(pol.EgressAllow)
		d.Allow, d.Local = allow, fakeLocal{}
		cfg.Fetcher = &safefetch.Fetcher{Dialer: d}
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("broker did not stop")
		}
	})
	r := &credRig{t: t, proxy: &url.URL{Scheme: "http", Host: ln.Addr().String()}, logs: logs, server: s}
	if len(g.Credentials) == 0 {
		return r
	}
	resp, err := http.Get("http://" + ln.Addr().String() + wire.RunEnvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r.env); err != nil || r.env.Validate() != nil {
		t.Fatalf("run env: %v %v", err, r.env.Validate())
	}
	return r
}

// auth is the declared header as the code writes it: the placeholder.
func (r *credRig) auth() http.Header {
	return http.Header{"Authorization": {"Bearer " + r.env.Env["GIT_TOKEN"]}}
}

// bundle writes what SSL_CERT_FILE names in a run: the roots the code
// trusts (here the test server's certificate, for a tunnel) and the run CA.
func (r *credRig) bundle() string {
	f := filepath.Join(r.t.TempDir(), "ca-bundle.pem")
	writeFile(r.t, f, r.server.testCA()+r.env.CA)
	return f
}

// client goes through the broker as the container's tools do; https
// trusts the test CA (the code under test could carry any root) and the
// run CA (its bundle).
func (r *credRig) client(follow bool) *http.Client {
	conf := r.server.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	if r.env.CA != "" {
		conf.RootCAs.AppendCertsFromPEM([]byte(r.env.CA))
	}
	tr := &http.Transport{Proxy: http.ProxyURL(r.proxy), DisableKeepAlives: true, TLSClientConfig: conf}
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}

func (r *credRig) get(rawURL string, hdr http.Header, follow bool) (int, string, http.Header) {
	r.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, rawURL, nil)
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := r.client(follow).Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, string(body) + "<cut: " + err.Error() + ">", resp.Header
	}
	return resp.StatusCode, string(body), resp.Header
}

// plain is the container's plain-http URL of a credentialed destination
// (refused: one mechanism), and url its https URL.
func (r *credRig) plain(path string) string { return "http://" + r.server.addr() + path }
func (r *credRig) url(path string) string   { return "https://" + r.server.addr() + path }

// checkNoToken fails if the logs hold the token in any form the
// reflection check knows.
func checkNoToken(t *testing.T, what, text string) {
	t.Helper()
	if credential.NewMatcher(credential.NewSecret(credToken)).Reflected(text) {
		t.Errorf("%s holds the token:\n%s", what, text)
	}
}

// TestCredentialedEgress is issue 27's list against a loopback HTTPS server
// that requires the token, through the one route (issue 37): the code
// holds a placeholder and the broker intercepts the CONNECT. Granted, not
// granted, plain http refused, reflection in headers, body, a 103 and
// trailers, a redirect to another host, the destination's certificate,
// and the token in no log.
func TestCredentialedEgress(t *testing.T) {
	var otherMu sync.Mutex
	var otherHeaders []http.Header
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherMu.Lock()
		otherHeaders = append(otherHeaders, r.Header.Clone())
		otherMu.Unlock()
		io.WriteString(w, "LANDED")
	}))
	defer other.Close()
	s := newCredServer(t, other.URL)
	otherAddr := other.Listener.Addr().String()

	t.Run("granted run gets 200 and the body", func(t *testing.T) {
		r := newCredRig(t, s, true)
		code, body, _ := r.get(r.url("/private"), r.auth(), false)
		if code != http.StatusOK || body != "PRIVATE-BODY-91d3" {
			t.Fatalf("granted: %d %q, want 200 and the body", code, body)
		}
		r.waitLog(`"msg":"egress intercepted"`, `"status":200`, `"credential":"git"`)
		checkNoToken(t, "the broker's log", r.logs.String())
		if strings.Contains(r.logs.String(), "/private") {
			t.Errorf("the log names the path:\n%s", r.logs)
		}
	})
	t.Run("plain http to the credentialed destination is refused", func(t *testing.T) {
		// The old route (the broker upgraded plain http and added the
		// header) is gone: one mechanism, docs/credentialed-egress.md.
		r := newCredRig(t, s, true)
		before := s.requests()
		code, body, _ := r.get(r.plain("/private"), nil, false)
		if code != http.StatusForbidden || strings.Contains(body, "PRIVATE") {
			t.Errorf("plain http: %d %q, want 403", code, body)
		}
		if n := s.requests() - before; n != 0 {
			t.Errorf("the server was reached %d times", n)
		}
		r.waitLog(`"msg":"egress refused"`, "plain http", `"credential":"git"`)
	})
	t.Run("run without the grant gets 401 and the server sees no token", func(t *testing.T) {
		before := s.requests()
		r := newCredRig(t, s, false)
		// Through CONNECT (https, the only way a TLS server answers).
		code, _, _ := r.get(r.url("/private"), nil, false)
		if code != http.StatusUnauthorized {
			t.Errorf("ungranted https: %d, want 401", code)
		}
		if s.requests() == before {
			t.Errorf("the server was not reached")
		}
		if s.sawTokenSince(before) {
			t.Errorf("the server saw the token without a grant")
		}
		checkNoToken(t, "the broker's log", r.logs.String())
	})
	t.Run("a request without the placeholder carries no credential", func(t *testing.T) {
		r := newCredRig(t, s, true)
		code, _, _ := r.get(r.url("/private"), nil, false)
		if code != http.StatusUnauthorized {
			t.Errorf("no placeholder: %d, want 401 (nothing added)", code)
		}
		s.mu.Lock()
		last := s.headers[len(s.headers)-1]
		s.mu.Unlock()
		if last.Get("Authorization") != "" {
			t.Errorf("the request carried %q", last.Get("Authorization"))
		}
	})
	t.Run("an answer echoing the credential is refused", func(t *testing.T) {
		r := newCredRig(t, s, true)
		code, body, hdr := r.get(r.url("/echo-headers"), r.auth(), false)
		if code != http.StatusBadGateway || strings.Contains(body, credToken) || strings.Contains(fmt.Sprint(hdr), credToken) {
			t.Errorf("header echo: %d %q %v, want 502 without the token", code, body, hdr)
		}
		code, body, _ = r.get(r.url("/echo-body"), r.auth(), false)
		if code == http.StatusOK && !strings.Contains(body, "<cut") || strings.Contains(body, credToken) {
			t.Errorf("body echo: %d, %d bytes (cut: %v), want the answer cut before the token", code, len(body), strings.Contains(body, "<cut"))
		}
		var interim []string
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			interim = append(interim, fmt.Sprint(code, h))
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, r.url("/echo-early-hints"), nil)
		req.Header = r.auth()
		if resp, err := r.client(false).Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if strings.Contains(strings.Join(interim, " "), credToken) {
			t.Errorf("a 103 answer handed the guest the token: %q", interim)
		}
		code, body, hdr = r.get(r.url("/echo-trailer"), r.auth(), false)
		if code == http.StatusOK && !strings.Contains(body, "<cut") || strings.Contains(fmt.Sprint(hdr), credToken) {
			t.Errorf("trailer echo: %d %q, want the answer cut before its trailers", code, body)
		}
		r.waitLog("egress intercepted answer cut")
		checkNoToken(t, "the broker's log", r.logs.String())
	})
	t.Run("a redirect to another host is handed back, never followed", func(t *testing.T) {
		r := newCredRig(t, s, true, otherAddr)
		code, _, hdr := r.get(r.url("/redirect"), r.auth(), false)
		if code != http.StatusFound || hdr.Get("Location") != other.URL+"/landing" {
			t.Fatalf("redirect: %d to %q, want 302 to the other host", code, hdr.Get("Location"))
		}
		otherMu.Lock()
		defer otherMu.Unlock()
		if len(otherHeaders) != 0 {
			t.Errorf("the broker followed the redirect: the other host got %v", otherHeaders)
		}
	})
	t.Run("a certificate the broker does not trust is refused", func(t *testing.T) {
		// The same destination, granted, but with no test root CA: the
		// system roots do not know the test server.
		r2 := newCredRigWith(t, s, func(g *policy.Egress) { g.TestRootCA = "" }, nil)
		code, body, _ := r2.get(r2.url("/private"), r2.auth(), false)
		if code != http.StatusBadGateway || strings.Contains(body, "PRIVATE") {
			t.Errorf("untrusted certificate: %d %q, want 502", code, body)
		}
		r2.waitLog(`"msg":"egress refused"`, "TLS to the credentialed destination failed")
	})
	t.Run("the test root CA is trusted for loopback IP literals only", func(t *testing.T) {
		// example.com (in the test certificate) resolves to the server
		// here: with testRootCA set, the name still meets the system roots.
		_, port, _ := net.SplitHostPort(s.addr())
		p, _ := strconv.Atoi(port)
		res := fakeResolver{"example.com": {netip.MustParseAddr("127.0.0.1")}}
		r3 := newCredRigWith(t, s, func(g *policy.Egress) { g.Credentials[0].Host = "example.com"; g.Credentials[0].Port = p },
			&safefetch.Dialer{Resolver: res})
		code, body, _ := r3.get("https://example.com:"+port+"/private", r3.auth(), false)
		if code != http.StatusBadGateway || strings.Contains(body, "PRIVATE") {
			t.Errorf("test CA for a name: %d %q, want 502", code, body)
		}
		r3.waitLog(`"msg":"egress refused"`, "TLS to the credentialed destination failed")
	})
}

func (r *credRig) raw(request string) int {
	r.t.Helper()
	c, err := net.Dial("tcp", r.proxy.Host)
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLog waits for a log line holding every one of subs (the line is
// written as the exchange ends, which may be after the client has its
// answer), woken by each write.
func (r *credRig) waitLog(subs ...string) {
	r.t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		wake := r.logs.next()
		if r.logs.has(subs...) {
			return
		}
		select {
		case <-wake:
		case <-timeout.C:
			r.t.Fatalf("no log line with %q:\n%s", subs, r.logs)
		}
	}
}

// waitBuffer is a log sink that wakes its waiters after each write.
type waitBuffer struct {
	syncBuffer
	mu   sync.Mutex
	wake chan struct{}
}

func (w *waitBuffer) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	w.mu.Lock()
	if w.wake != nil {
		close(w.wake)
		w.wake = nil
	}
	w.mu.Unlock()
	return n, err
}

// next is closed by the next write: take it before checking.
func (w *waitBuffer) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wake == nil {
		w.wake = make(chan struct{})
	}
	return w.wake
}

func (w *waitBuffer) has(subs ...string) bool {
	for _, l := range strings.Split(w.String(), "\n") {
		all := l != ""
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			return true
		}
	}
	return false
}

// TestCredentialedGitClone: git clone https://<host>/<repo> of a repository
// that needs the token works through the injected header, with the
// environment a run gets (the placeholder as the URL's password, the
// bundle in GIT_SSL_CAINFO) and the proxy variables pointing at the broker; a clone
// without the grant fails, and the token is in no log and nowhere in the
// clone.
func TestCredentialedGitClone(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed: the clone through the credentialed route needs it")
	}
	backend := "/usr/lib/git-core/git-http-backend"
	if out, err := exec.Command(gitBin, "--exec-path").Output(); err == nil {
		backend = filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	}
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("%s not installed: the smart-HTTP server needs it", backend)
	}
	root := t.TempDir()
	git := func(dir string, env []string, args ...string) (string, error) {
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append([]string{"HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
			"PATH=" + os.Getenv("PATH")}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(out string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("git: %v: %s", err, out)
		}
	}
	src := filepath.Join(root, "src")
	os.Mkdir(src, 0o755)
	must(git(src, nil, "init", "-q", "-b", "main"))
	writeFile(t, filepath.Join(src, "README"), "PRIVATE-REPO-CONTENT-4e1a\n")
	must(git(src, nil, "add", "README"))
	must(git(src, nil, "commit", "-q", "-m", "first"))
	repos := filepath.Join(root, "repos")
	os.Mkdir(repos, 0o755)
	must(git(root, nil, "clone", "-q", "--bare", src, filepath.Join(repos, "private.git")))

	s := newCredServer(t, "http://127.0.0.1:1")
	s.handler = &cgi.Handler{Path: backend, Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}
	clone := func(r *credRig, dir string) (string, error) {
		env := []string{"http_proxy=" + r.proxy.String(), "https_proxy=" + r.proxy.String(), "no_proxy=", "NO_PROXY=",
			"GIT_SSL_CAINFO=" + r.bundle()}
		url := "https://" + s.addr() + "/git/private.git"
		if ph := r.env.Env["GIT_TOKEN"]; ph != "" {
			url = "https://x-access-token:" + ph + "@" + s.addr() + "/git/private.git"
		}
		return git(root, env, "clone", "-q", url, dir)
	}
	r := newCredRig(t, s, true)
	dir := filepath.Join(root, "clone")
	if out, err := clone(r, dir); err != nil {
		t.Fatalf("granted clone failed: %v\n%s\nbroker log:\n%s", err, out, r.logs)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "README")); err != nil || string(b) != "PRIVATE-REPO-CONTENT-4e1a\n" {
		t.Errorf("cloned README = %q, %v", b, err)
	}
	r.waitLog(`"msg":"egress intercepted"`, `"status":200`)
	checkNoToken(t, "the broker's log", r.logs.String())
	// Nowhere in the clone (its config keeps the URL as given).
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), credToken) {
				t.Errorf("%s holds the token", p)
			}
		}
		return nil
	})

	before := s.requests()
	un := newCredRig(t, s, false)
	if out, err := clone(un, filepath.Join(root, "clone-ungranted")); err == nil {
		t.Errorf("ungranted clone succeeded: %s", out)
	}
	if s.sawTokenSince(before) {
		t.Errorf("the server saw the token without a grant")
	}
}
