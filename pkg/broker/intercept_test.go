package broker

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/placeholder"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// bigAnswer is the bench's 1 MiB answer.
var bigAnswer = []byte(strings.Repeat("0123456789abcdef", 1<<16))

// apiToken is the second credential's value.
const apiToken = "api-key-INTERCEPT-7c1e55d0a9b24f68"

// icptUpstream is a loopback HTTPS destination that records what reached
// it and serves routes that answer, echo or misbehave.
type icptUpstream struct {
	srv   *httptest.Server
	token string
	other string // the plain-http server a redirect points to
	mu    sync.Mutex
	reqs  []*http.Request
	auths []string
}

func newIcptUpstream(t testing.TB, token, other string) *icptUpstream {
	u := &icptUpstream{token: token, other: other}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *icptUpstream) addr() string { return u.srv.Listener.Addr().String() }

func (u *icptUpstream) seen() int { u.mu.Lock(); defer u.mu.Unlock(); return len(u.reqs) }

func (u *icptUpstream) lastAuth() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.auths) == 0 {
		return ""
	}
	return u.auths[len(u.auths)-1]
}

// authorized reports whether a request carries the token in a form a
// registry accepts: raw, after a scheme, or as Basic's user or password.
func (u *icptUpstream) authorized(r *http.Request) bool {
	for _, v := range []string{r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")} {
		if v == u.token || strings.HasSuffix(v, " "+u.token) {
			return true
		}
		if user, pass, ok := r.BasicAuth(); ok && (user == u.token || pass == u.token) {
			return true
		}
	}
	return false
}

func (u *icptUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, r.Clone(context.Background()))
	u.auths = append(u.auths, r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
	u.mu.Unlock()
	if r.URL.Path == "/redirect" {
		http.Redirect(w, r, u.other+"/landing", http.StatusFound)
		return
	}
	if !u.authorized(r) {
		http.Error(w, "token required", http.StatusUnauthorized)
		return
	}
	auth := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
	switch r.URL.Path {
	case "/private":
		fmt.Fprintf(w, "PRIVATE ae=%s body=%d", r.Header.Get("Accept-Encoding"), len(body))
	case "/big":
		w.Write(bigAnswer)
	case "/gzip-echo": // compresses whatever was asked: the echo inside
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, auth)
		zw.Close()
	case "/gzip-echo-chunked": // the same, streamed (no length): the guard's path
		w.Header().Set("Content-Encoding", "gzip")
		w.(http.Flusher).Flush()
		zw := gzip.NewWriter(w)
		io.WriteString(zw, strings.Repeat("padding ", 16384)+auth)
		zw.Close()
	case "/echo-headers":
		w.Header().Set("X-Seen", auth)
		io.WriteString(w, "ok")
	case "/echo-status", "/echo-status-chunked": // the echo in the reason phrase
		c, bw, _ := http.NewResponseController(w).Hijack()
		head := "HTTP/1.1 403 Denied " + auth + "\r\nContent-Length: 2\r\n\r\nno"
		if r.URL.Path == "/echo-status-chunked" { // not the fast path's
			head = "HTTP/1.1 403 Denied " + auth + "\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nno\r\n0\r\n\r\n"
		}
		bw.WriteString(head)
		bw.Flush()
		c.Close()
	case "/echo-body": // whole in one check (known length, under 64 KiB)
		b := strings.Repeat("padding ", 4096) + auth
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		io.WriteString(w, b)
	case "/echo-big-body": // through the streaming guard (chunked, over 64 KiB)
		w.Write([]byte(strings.Repeat("padding ", 16384)))
		w.(http.Flusher).Flush()
		io.WriteString(w, auth)
	case "/echo-then-stall": // the streaming guard's cut, the destination still sending
		w.Write([]byte(strings.Repeat("padding ", 16384)))
		w.(http.Flusher).Flush()
		io.WriteString(w, auth)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // until the broker closes the connection, or the server closes
	case "/echo-trailer":
		w.Header().Set("Trailer", "X-Echo")
		io.WriteString(w, "body first\n")
		w.Header().Set("X-Echo", auth)
	case "/early-hints":
		w.Header().Set("X-Echo", auth)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("X-Echo")
		io.WriteString(w, "after hints")
	case "/http10": // an HTTP/1.0 answer delimited by the connection's end
		c, bw, _ := http.NewResponseController(w).Hijack()
		bw.WriteString("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nOLD-BODY")
		bw.Flush()
		c.Close()
	case "/switch": // a 101 nobody asked for
		c, bw, _ := http.NewResponseController(w).Hijack()
		bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nraw")
		bw.Flush()
		c.Close()
	default:
		http.NotFound(w, r)
	}
}

// icptRig is a code run's broker granting two intercepted credentials:
// git (Authorization, GIT_TOKEN) and api (X-Api-Key, API_KEY), each on
// its own loopback HTTPS server; other is a plain-http server on
// 127.0.0.2 the policy allows.
type icptRig struct {
	t        testing.TB
	proxy    *url.URL
	logs     *waitBuffer
	git, api *icptUpstream
	other    *httptest.Server
	otherHit chan struct{}
	env      wire.RunEnv
	roots    *x509.CertPool // the run CA only
}

func newIcptRig(t testing.TB) *icptRig { t.Helper(); return newIcptRigWith(t, true) }

// newIcptRigWith is newIcptRig; without intercept the credentials declare
// no variable, so a CONNECT to them is a plain tunnel.
func newIcptRigWith(t testing.TB, intercept bool) *icptRig {
	t.Helper()
	r := &icptRig{t: t, otherHit: make(chan struct{}, 16)}
	ln2, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 on this machine: %v", err)
	}
	r.other = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.otherHit <- struct{}{}
		io.WriteString(w, "LANDED")
	}))
	r.other.Listener.Close()
	r.other.Listener = ln2
	r.other.Start()
	t.Cleanup(r.other.Close)
	r.git = newIcptUpstream(t, credToken, r.other.URL)
	r.api = newIcptUpstream(t, apiToken, r.other.URL)

	dir := t.TempDir()
	credDir := filepath.Join(dir, "creds")
	os.Mkdir(credDir, 0o700)
	writeFile(t, filepath.Join(credDir, "git-token"), credToken+"\n")
	writeFile(t, filepath.Join(credDir, "api-key"), apiToken+"\n")
	creds, err := credential.OpenDir(credDir, "")
	if err != nil {
		t.Fatal(err)
	}
	port := func(a string) int { _, p, _ := net.SplitHostPort(a); n, _ := strconv.Atoi(p); return n }
	g := policy.DefaultEgress()
	g.MaxBytesIn, g.MaxBytesOut = policy.MaxEgressBytes, policy.MaxEgressBytes // the bench's 1 MiB answers
	g.Credentials = []policy.EgressCredential{
		{Name: "git", Host: "127.0.0.1", Port: port(r.git.addr()), Credential: "git-token", Header: "Authorization",
			Format: policy.FormatBearer, Env: "GIT_TOKEN"},
		{Name: "api", Host: "127.0.0.1", Port: port(r.api.addr()), Credential: "api-key", Header: "X-Api-Key",
			Format: policy.FormatRaw, Env: "API_KEY"},
	}
	if !intercept {
		for i := range g.Credentials {
			g.Credentials[i].Env = ""
		}
	}
	g.TestRootCA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.git.srv.Certificate().Raw}))
	id := ids.NewTurnID()
	pol := &policy.Policy{Version: policy.Version, TurnID: id,
		Identity:       policy.Identity{Channel: ids.RunName(id), ChannelTag: ids.RunName(id)},
		DeadlineUnixMs: time.Now().Add(time.Hour).UnixMilli(), Limits: policy.DefaultLimits(),
		EgressAllow: []string{r.git.addr(), r.api.addr(), r.other.Listener.Addr().String()}, Egress: &g, EgressOnly: true}
	r.logs = &waitBuffer{}
	b, err := New(Config{Policy: pol, Credentials: creds, LocalAddrs: fakeLocal{}, Logger: slog.New(slog.NewJSONHandler(r.logs, nil))})
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
	r.proxy = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	if !intercept {
		return r
	}
	// What the run's supervisor reads: the placeholders and the CA.
	resp, err := http.Get("http://" + ln.Addr().String() + wire.RunEnvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r.env); err != nil || r.env.Validate() != nil {
		t.Fatalf("run env: %v %v", err, r.env.Validate())
	}
	r.roots = x509.NewCertPool()
	if !r.roots.AppendCertsFromPEM([]byte(r.env.CA)) {
		t.Fatal("run CA does not parse")
	}
	return r
}

func (r *icptRig) ph(env string) string { return r.env.Env[env] }

// client is the code's HTTPS client through the proxy variables,
// trusting the run CA (what SSL_CERT_FILE gives it).
func (r *icptRig) client(roots *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(r.proxy), TLSClientConfig: &tls.Config{RootCAs: roots}},
		Timeout:       20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (r *icptRig) do(c *http.Client, method, rawURL string, hdr http.Header, body string) (int, string, http.Header, error) {
	r.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, rawURL, rd)
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Trailer, err
}

// tunnel opens a CONNECT to dest through the broker and TLS inside it with
// conf: the raw side of the code.
func (r *icptRig) tunnel(dest string, conf *tls.Config) (*tls.Conn, *bufio.Reader, error) {
	c, err := net.Dial("tcp", r.proxy.Host)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		c.Close()
		if err == nil {
			err = fmt.Errorf("CONNECT: %d", resp.StatusCode)
		}
		return nil, nil, err
	}
	tc := tls.Client(c, conf)
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, nil, err
	}
	return tc, bufio.NewReader(tc), nil
}

// raw sends request text on an intercepted connection to the git server
// and returns the answer's status (0: no answer).
func (r *icptRig) raw(request string) int {
	r.t.Helper()
	tc, br, err := r.tunnel(r.git.addr(), &tls.Config{RootCAs: r.roots, ServerName: "127.0.0.1"})
	if err != nil {
		r.t.Fatal(err)
	}
	defer tc.Close()
	io.WriteString(tc, request)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// noSecretsLogged fails if the broker's log holds a token or a placeholder
// in any form the reflection rules know.
func (r *icptRig) noSecretsLogged(t *testing.T) {
	t.Helper()
	m := credential.NewMatcher(credential.NewSecret(credToken), credential.NewSecret(apiToken),
		credential.NewSecret(r.ph("GIT_TOKEN")), credential.NewSecret(r.ph("API_KEY")))
	if m.Reflected(r.logs.String()) {
		t.Errorf("the broker's log holds a token or a placeholder:\n%s", r.logs)
	}
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// TestInterceptRunEnv: one placeholder per declared variable, distinct,
// recognisable, and a CA certificate only.
func TestInterceptRunEnv(t *testing.T) {
	r := newIcptRig(t)
	git, api := r.ph("GIT_TOKEN"), r.ph("API_KEY")
	if _, ok := placeholder.Parse(git); !ok || git == api || len(r.env.Env) != 2 {
		t.Fatalf("placeholders %q %q", git, api)
	}
	if strings.Contains(r.env.CA, "PRIVATE KEY") || strings.Count(r.env.CA, "BEGIN CERTIFICATE") != 1 {
		t.Errorf("run env CA is not one certificate:\n%s", r.env.CA)
	}
	if strings.Contains(r.env.CA+git+api, credToken) {
		t.Error("the run env holds a token")
	}
}

// TestInterceptSwapsThePlaceholder: every form a client sends the
// placeholder in reaches the destination as the value; identity asked.
func TestInterceptSwapsThePlaceholder(t *testing.T) {
	r := newIcptRig(t)
	ph, aph := r.ph("GIT_TOKEN"), r.ph("API_KEY")
	c := r.client(r.roots)
	for _, tc := range []struct {
		name, auth, want string
	}{
		{"bearer", "Bearer " + ph, "Bearer " + credToken},
		{"token", "token " + ph, "token " + credToken},
		{"raw", ph, credToken},
		{"basic password", basic("x-access-token", ph), basic("x-access-token", credToken)},
		{"basic user", basic(ph, "x-oauth-basic"), basic(credToken, "x-oauth-basic")},
	} {
		code, body, _, err := r.do(c, "GET", "https://"+r.git.addr()+"/private", http.Header{"Authorization": {tc.auth}}, "")
		if err != nil || code != 200 || body != "PRIVATE ae=identity body=0" {
			t.Errorf("%s: %d %q %v, want 200 and identity asked", tc.name, code, body, err)
		}
		if got := r.git.lastAuth(); got != tc.want {
			t.Errorf("%s: destination got %q, want %q", tc.name, got, tc.want)
		}
	}
	code, _, _, err := r.do(c, "POST", "https://"+r.api.addr()+"/private", http.Header{"X-Api-Key": {aph}}, "a body")
	if err != nil || code != 200 || r.api.lastAuth() != apiToken {
		t.Errorf("api: %d %v, destination got %q", code, err, r.api.lastAuth())
	}
	// Without a placeholder: sent as it is, no credential.
	if code, _, _, _ := r.do(c, "GET", "https://"+r.git.addr()+"/private", nil, ""); code != 401 || r.git.lastAuth() != "" {
		t.Errorf("no placeholder: %d, destination got %q", code, r.git.lastAuth())
	}
	r.waitLog(`"msg":"egress intercepted"`, `"credential":"git"`, `"method":"GET"`, `"status":200`, `"substituted":true`)
	r.waitLog(`"msg":"egress intercepted"`, `"credential":"api"`, `"method":"POST"`, `"bytes_out":6`)
	r.noSecretsLogged(t)
}

// TestInterceptReusesOneDestinationConnection: requests on one client
// connection share one destination connection.
func TestInterceptReusesOneDestinationConnection(t *testing.T) {
	r := newIcptRig(t)
	c := r.client(r.roots)
	for range 3 {
		if code, _, _, err := r.do(c, "GET", "https://"+r.git.addr()+"/private",
			http.Header{"Authorization": {"Bearer " + r.ph("GIT_TOKEN")}}, ""); code != 200 || err != nil {
			t.Fatalf("%d %v", code, err)
		}
	}
	c.CloseIdleConnections()
	r.waitLog(`"msg":"egress connection"`, `"kind":"https"`)
	if n := strings.Count(r.logs.String(), `"msg":"egress connection"`); n != 1 {
		t.Errorf("%d destination connections for 3 requests on one client connection, want 1", n)
	}
}

// TestInterceptAnswersOnOneConnection: small answers of other lengths in
// turn on one client connection (longer, shorter, empty, longer again:
// the session reuses its answer buffer) each arrive as the destination
// sent them.
func TestInterceptAnswersOnOneConnection(t *testing.T) {
	r := newIcptRig(t)
	c := r.client(r.roots)
	for _, n := range []int{30000, 5, 0, 1200, 70000, 17} {
		code, body, _, err := r.do(c, "POST", "https://"+r.git.addr()+"/private",
			http.Header{"Authorization": {"Bearer " + r.ph("GIT_TOKEN")}}, strings.Repeat("b", n)+"x")
		if want := fmt.Sprintf("PRIVATE ae=identity body=%d", n+1); code != 200 || err != nil || body != want {
			t.Errorf("body of %d: got %d %q %v, want 200 %q", n+1, code, body, err, want)
		}
	}
}

func (r *icptRig) waitLog(subs ...string) {
	r.t.Helper()
	(&credRig{t: r.t, logs: r.logs}).waitLog(subs...)
}

// TestInterceptRefusals: every refused place of a placeholder, the value
// sent by the code, a Host or port that is not the declared one, an
// upgrade: a generic answer, the destination never reached.
func TestInterceptRefusals(t *testing.T) {
	r := newIcptRig(t)
	ph, aph := r.ph("GIT_TOKEN"), r.ph("API_KEY")
	c := r.client(r.roots)
	git := "https://" + r.git.addr()
	half := len(ph) / 2
	for _, tc := range []struct {
		name   string
		method string
		url    string
		hdr    http.Header
		body   string
		want   int
		reason string
	}{
		{"another header", "GET", git + "/private", http.Header{"X-Other": {ph}}, "", 400, "outside the declared header"},
		{"another header base64", "GET", git + "/private", http.Header{"Cookie": {"s=" + base64.StdEncoding.EncodeToString([]byte(ph))}}, "", 400, "outside the declared header"},
		{"the request line", "GET", git + "/private?token=" + ph, nil, "", 400, "outside the declared header"},
		{"the path", "GET", git + "/" + ph, nil, "", 400, "outside the declared header"},
		{"the body", "POST", git + "/private", nil, `{"token":"` + ph + `"}`, 400, "request body"},
		{"another credential's placeholder", "GET", "https://" + r.api.addr() + "/private", http.Header{"X-Api-Key": {ph}}, "", 400, "outside the declared header"},
		{"another credential's in the declared header", "GET", git + "/private", http.Header{"Authorization": {"Bearer " + aph}}, "", 400, "outside the declared header"},
		{"split: half in the declared header", "GET", git + "/private", http.Header{"Authorization": {"Bearer " + ph[:half]}, "X-Rest": {ph[half:]}}, "", 400, "outside the declared header"},
		{"inside basic, not a whole field", "GET", git + "/private", http.Header{"Authorization": {basic("u", "pre"+ph)}}, "", 400, "outside the declared header"},
		{"the value in the declared header", "GET", git + "/private", http.Header{"Authorization": {"Bearer " + credToken}}, "", 400, "carries the credential's value"},
		{"the value in another header", "GET", git + "/private", http.Header{"X-Leak": {credToken}}, "", 400, "carries the credential's value"},
		{"the value in the body", "POST", git + "/private", nil, "t=" + credToken, 400, "request body"},
		{"an upgrade", "GET", git + "/private", http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}, "", 400, "protocol upgrade"},
	} {
		before := r.git.seen() + r.api.seen()
		code, body, _, err := r.do(c, tc.method, tc.url, tc.hdr, tc.body)
		if code != tc.want || strings.Contains(body, "PRIVATE") {
			t.Errorf("%s: %d %q %v, want %d", tc.name, code, body, err, tc.want)
		}
		if body != "" && body != "bad proxy request\n" {
			t.Errorf("%s: answer %q is not the generic one", tc.name, body)
		}
		if n := r.git.seen() + r.api.seen() - before; n != 0 {
			t.Errorf("%s: a destination was reached %d times", tc.name, n)
		}
		r.waitLog(`"msg":"egress refused"`, `"kind":"intercept"`, tc.reason)
	}
	r.noSecretsLogged(t)
}

// TestInterceptRawRefusals: what only a raw client sends: the declared
// header twice, a placeholder split across two requests of one
// connection, a Host that is not the declared one, a placeholder in a
// trailer, an alias of the declared header.
func TestInterceptRawRefusals(t *testing.T) {
	r := newIcptRig(t)
	ph := r.ph("GIT_TOKEN")
	host := r.git.addr()
	half := len(ph) / 2
	for _, tc := range []struct{ name, req string }{
		{"two header lines", "GET /private HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + ph[:half] + "\r\nAuthorization: " + ph[half:] + "\r\n\r\n"},
		{"another host", "GET /private HTTP/1.1\r\nHost: other.example.com\r\nAuthorization: Bearer " + ph + "\r\n\r\n"},
		{"another port in Host", "GET /private HTTP/1.1\r\nHost: 127.0.0.1:1\r\nAuthorization: Bearer " + ph + "\r\n\r\n"},
		{"absolute form", "GET https://" + host + "/private HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + ph + "\r\n\r\n"},
		{"a trailer", "POST /private HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nhi\r\n0\r\nX-T: " + ph + "\r\n\r\n"},
		{"an alias", "GET /private HTTP/1.1\r\nHost: " + host + "\r\nAuthorization_: Bearer " + ph + "\r\n\r\n"},
		{"h2c", "GET /private HTTP/1.1\r\nHost: " + host + "\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\n"},
	} {
		before := r.git.seen()
		if code := r.raw(tc.req); code != 400 {
			t.Errorf("%s: %d, want 400", tc.name, code)
		}
		if r.git.seen() != before {
			t.Errorf("%s: the destination was reached", tc.name)
		}
	}
	// Split across two requests of one connection: the first half is
	// refused on its own and the connection ends, so no second request.
	tc, br, err := r.tunnel(host, &tls.Config{RootCAs: r.roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	before := r.git.seen()
	fmt.Fprintf(tc, "GET /a HTTP/1.1\r\nHost: %s\r\nX-A: %s\r\n\r\nGET /b HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", host, ph[:half], host, ph[half:])
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("first half: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Error("the connection answered the second half")
	}
	if r.git.seen() != before {
		t.Error("the destination was reached")
	}
	r.noSecretsLogged(t)
}

// TestInterceptRefusesAmbiguousHeads: a request head two HTTP parsers may
// frame differently (request smuggling, docs/threat-model.md) is refused
// with a generic 400 and never reaches the destination, even where Go's
// own reader would accept it (bare LF, obs-fold, a space before a colon,
// Content-Length twice or with Transfer-Encoding). Each would otherwise be
// a good request (the placeholder in its header).
func TestInterceptRefusesAmbiguousHeads(t *testing.T) {
	r := newIcptRig(t)
	host, auth := r.git.addr(), "Authorization: Bearer "+r.ph("GIT_TOKEN")
	for _, tc := range []struct{ name, req string }{
		{"bare LF", "GET /private HTTP/1.1\nHost: " + host + "\n" + auth + "\n\n"},
		{"obs-fold", "GET /private HTTP/1.1\r\nHost: " + host + "\r\nX-A: a\r\n b\r\n" + auth + "\r\n\r\n"},
		{"space before a colon", "GET /private HTTP/1.1\r\nHost : " + host + "\r\n" + auth + "\r\n\r\n"},
		{"Content-Length twice", "POST /private HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi"},
		{"Content-Length with chunked", "POST /private HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"Transfer-Encoding gzip, chunked", "POST /private HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"},
	} {
		before := r.git.seen()
		if code := r.raw(tc.req); code != 400 {
			t.Errorf("%s: %d, want 400", tc.name, code)
		}
		if r.git.seen() != before {
			t.Errorf("%s: the destination was reached", tc.name)
		}
	}
	if !r.logs.has("egress refused", "a malformed or ambiguous intercepted request head") {
		t.Error("no refusal line naming the head")
	}
	r.noSecretsLogged(t)
}

// TestInterceptTLS: a client that does not trust the run CA gets nothing
// (no destination dial), an SNI other than the declared host is refused
// in the handshake, another port of a declared host is refused, and every
// other CONNECT stays a plain tunnel (the server's own certificate).
func TestInterceptTLS(t *testing.T) {
	r := newIcptRig(t)
	c := r.client(nil) // the system roots only
	code, _, _, err := r.do(c, "GET", "https://"+r.git.addr()+"/private",
		http.Header{"Authorization": {"Bearer " + r.ph("GIT_TOKEN")}}, "")
	if err == nil || code != 0 {
		t.Errorf("client refusing the run CA: %d %v, want a handshake failure", code, err)
	}
	if r.git.seen() != 0 {
		t.Error("the destination was reached")
	}
	r.waitLog(`"msg":"egress refused"`, `"kind":"intercept"`, "refused the run CA")
	if strings.Contains(r.logs.String(), `"kind":"https"`) {
		t.Error("a destination connection was opened for a client that refused the run CA")
	}
	if _, _, err := r.tunnel(r.git.addr(), &tls.Config{RootCAs: r.roots, ServerName: "evil.example.com"}); err == nil {
		t.Error("SNI evil.example.com: handshake completed")
	}
	r.waitLog(`"msg":"egress refused"`, "TLS server name is not the intercepted host")
	// Another port of the declared host.
	if code := (&credRig{t: t, proxy: r.proxy}).raw("CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"); code != 403 {
		t.Errorf("undeclared port: %d, want 403", code)
	}
	r.waitLog(`"msg":"egress refused"`, "another port of a credentialed host", `"credential":"`)
	// Plain http to another port of a declared host: refused too.
	if code := (&credRig{t: t, proxy: r.proxy}).raw("GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"); code != 403 {
		t.Errorf("plain http to an undeclared port: %d, want 403", code)
	}
	// The old plain-http route to the declared host:port itself: gone for
	// an intercepted credential (one mechanism), the destination untouched.
	dest := r.git.addr()
	if code := (&credRig{t: t, proxy: r.proxy}).raw("GET http://" + dest + "/private HTTP/1.1\r\nHost: " + dest + "\r\n\r\n"); code != 403 {
		t.Errorf("plain http to an intercepted destination: %d, want 403", code)
	}
	if r.git.seen() != 0 {
		t.Error("the destination was reached by plain http")
	}
	r.waitLog(`"msg":"egress refused"`, "plain http to an intercepted destination", `"credential":"git"`)
}

// TestInterceptAnswers: identity forced and a compressed echo refused,
// echoes in headers, body and trailers refused or cut, a 103 dropped, a
// redirect handed back and never followed, a 101 refused.
func TestInterceptAnswers(t *testing.T) {
	r := newIcptRig(t)
	c := r.client(r.roots)
	auth := http.Header{"Authorization": {"Bearer " + r.ph("GIT_TOKEN")}, "Accept-Encoding": {"gzip"}}
	git := "https://" + r.git.addr()
	check := func(what, body string, trailer http.Header) {
		t.Helper()
		if credential.NewMatcher(credential.NewSecret(credToken)).Reflected(body + fmt.Sprint(trailer)) {
			t.Errorf("%s: the token reached the code", what)
		}
	}
	code, body, tr, _ := r.do(c, "GET", git+"/gzip-echo", auth, "")
	if code != 502 {
		t.Errorf("compressed echo: %d, want 502", code)
	}
	check("compressed echo", body, tr)
	r.waitLog(`"msg":"egress refused"`, "still encoded")
	// Streamed (chunked, over 64 KiB): refused before any body byte.
	code, body, tr, _ = r.do(c, "GET", git+"/gzip-echo-chunked", auth, "")
	if code != 502 || body != "destination unreachable\n" {
		t.Errorf("streamed compressed echo: %d %q, want 502 and the generic answer", code, body)
	}
	check("streamed compressed echo", body, tr)
	code, body, tr, _ = r.do(c, "GET", git+"/echo-headers", auth, "")
	if code != 502 {
		t.Errorf("header echo: %d, want 502", code)
	}
	check("header echo", body, tr)
	// A small echo (known length) is refused whole; a big one is cut.
	code, body, tr, _ = r.do(c, "GET", git+"/echo-body", auth, "")
	if code != 502 {
		t.Errorf("body echo: %d, want 502", code)
	}
	check("body echo", body, tr)
	r.waitLog(`"msg":"egress refused"`, "headers reflect the credential")
	_, body, tr, err := r.do(c, "GET", git+"/echo-big-body", auth, "")
	if err == nil {
		t.Error("big body echo: read to the end")
	}
	check("big body echo", body, tr)
	r.waitLog(`"msg":"egress intercepted answer cut: it reflects the credential"`)
	_, body, tr, err = r.do(c, "GET", git+"/echo-trailer", auth, "")
	if err == nil && tr.Get("X-Echo") != "" {
		t.Error("trailer echo delivered")
	}
	check("trailer echo", body, tr)
	// 103: dropped, the code never sees it.
	var interim []int
	req, _ := http.NewRequest("GET", git+"/early-hints", nil)
	req.Header = auth.Clone()
	req = req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			interim = append(interim, code)
			check("103", "", http.Header(h))
			return nil
		}}))
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("early hints: %v %v", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "after hints" || len(interim) != 0 {
		t.Errorf("early hints: %q, interim %v, want the answer and no 1xx", b, interim)
	}
	// A redirect to another host: handed back, never followed.
	code, _, _, _ = r.do(c, "GET", git+"/redirect", auth, "")
	if code != http.StatusFound {
		t.Errorf("redirect: %d, want 302", code)
	}
	select {
	case <-r.otherHit:
		t.Error("the broker followed the redirect")
	default:
	}
	// An answer delimited by the connection's end reaches the code whole.
	// (Without the broker closing after it, the client waits out its timeout.)
	if code, body, _, err := r.do(c, "GET", git+"/http10", auth, ""); code != 200 || body != "OLD-BODY" || err != nil {
		t.Errorf("HTTP/1.0 answer: %d %q %v", code, body, err)
	}
	code, _, _, _ = r.do(c, "GET", git+"/switch", auth, "")
	if code != 502 {
		t.Errorf("unasked 101: %d, want 502", code)
	}
	r.waitLog(`"msg":"egress refused"`, "switched protocols")
	r.noSecretsLogged(t)
}

// TestInterceptPlainHTTPRefusesPlaceholders: a plain-http request to any
// host carrying a placeholder is refused, never forwarded.
func TestInterceptPlainHTTPRefusesPlaceholders(t *testing.T) {
	r := newIcptRig(t)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(r.proxy)}, Timeout: 20 * time.Second}
	for _, tc := range []struct {
		name string
		hdr  http.Header
		path string
		body string
	}{
		{"header", http.Header{"Authorization": {"Bearer " + r.ph("GIT_TOKEN")}}, "/", ""},
		{"query", nil, "/?k=" + r.ph("API_KEY"), ""},
		{"body", nil, "/", "x=" + r.ph("GIT_TOKEN")},
	} {
		code, _, _, _ := r.do(c, "POST", r.other.URL+tc.path, tc.hdr, tc.body)
		if code != 400 {
			t.Errorf("%s: %d, want 400", tc.name, code)
		}
		select {
		case <-r.otherHit:
			if tc.name != "body" {
				t.Errorf("%s: forwarded", tc.name)
			}
		default:
		}
	}
	// Without one it is forwarded as before.
	if code, body, _, _ := r.do(c, "GET", r.other.URL+"/", nil, ""); code != 200 || body != "LANDED" {
		t.Errorf("plain http: %d %q", code, body)
	}
	r.noSecretsLogged(t)
}

// TestInterceptCutDoesNotWaitForTheDestination: an answer cut by the
// reflection guard ends the code's connection at once; the broker does not
// read on to the end of the destination's answer first (it closes that
// connection). On the old code the code waited until its client's
// timeout.
func TestInterceptCutDoesNotWaitForTheDestination(t *testing.T) {
	r := newIcptRig(t)
	auth := http.Header{"Authorization": {"Bearer " + r.ph("GIT_TOKEN")}}
	_, body, _, err := r.do(r.client(r.roots), "GET", "https://"+r.git.addr()+"/echo-then-stall", auth, "")
	if err == nil || os.IsTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the cut answer: %v, want it ended by the broker", err)
	}
	if credential.NewMatcher(credential.NewSecret(credToken)).Reflected(body) {
		t.Error("the token reached the code")
	}
	r.waitLog(`"msg":"egress intercepted answer cut: it reflects the credential"`)
}

// TestInterceptDropsTheReasonPhrase: the destination's reason phrase is
// free text that no guard reads (found in review: a destination echoing
// the token there reached the code); the broker sends the status code's
// own text instead.
func TestInterceptDropsTheReasonPhrase(t *testing.T) {
	r := newIcptRig(t)
	for _, path := range []string{"/echo-status", "/echo-status-chunked"} {
		c := r.client(r.roots)
		req, _ := http.NewRequest("GET", "https://"+r.git.addr()+path, nil)
		req.Header.Set("Authorization", "Bearer "+r.ph("GIT_TOKEN"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		if got, want := resp.Status, "403 Forbidden"; got != want {
			t.Errorf("%s: status %q, want %q (the destination's phrase replaced)", path, got, want)
		}
	}
}
