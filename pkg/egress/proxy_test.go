package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// testGrant is a generous grant; tests narrow one bound at a time.
func testGrant() policy.Egress {
	return policy.Egress{MaxConnections: 4, MaxBytesOut: 1 << 20, MaxBytesIn: 1 << 20, ConnectionTimeoutMs: 30_000}
}

func serverAddr(t *testing.T, srv *httptest.Server) netip.AddrPort {
	t.Helper()
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

// TestProxySuccess: an https request through CONNECT (TLS verifying the
// name the resolver seam maps to the allowed loopback server) and a plain
// http request in absolute form, both to exact egress.allow entries; the
// destination sees no proxy or forwarding header; the log names host:port
// and bytes, never the path, query or body.
func TestProxySuccess(t *testing.T) {
	var seen atomic.Pointer[http.Request]
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r)
		io.WriteString(w, "BODY-MARKER "+r.Host+" "+r.URL.RequestURI())
	})
	tlsSrv := httptest.NewTLSServer(handler)
	defer tlsSrv.Close()
	plain := httptest.NewServer(handler)
	defer plain.Close()
	ta, pa := serverAddr(t, tlsSrv), serverAddr(t, plain)
	// httptest's certificate names example.com; the resolver seam maps it to
	// the loopback server, which only the Allow entry makes dialable.
	r := newRig(t, testGrant(), []netip.AddrPort{ta, pa},
		fakeResolver{"example.com": addrs("127.0.0.1"), "plain.example.net": addrs("127.0.0.1")})

	resp, err := r.client(tlsSrv).Get(fmt.Sprintf("https://example.com:%d/secret/path?token=QUERY-MARKER", ta.Port()))
	if err != nil {
		t.Fatalf("https through CONNECT: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("BODY-MARKER example.com:%d /secret/path?token=QUERY-MARKER", ta.Port()); resp.StatusCode != 200 || string(body) != want {
		t.Errorf("https: %d %q, want 200 %q", resp.StatusCode, body, want)
	}

	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://plain.example.net:%d/secret/path?token=QUERY-MARKER", pa.Port()), nil)
	req.Header.Set("Proxy-Authorization", "Basic Z3Vlc3Q6c2VjcmV0")
	req.Header.Set("X-Forwarded-For", "10.9.8.7")
	req.Header.Set("Forwarded", "for=10.9.8.7")
	req.Header.Set("X-Guest", "kept")
	resp, err = r.client(nil).Do(req)
	if err != nil {
		t.Fatalf("absolute-form http: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("BODY-MARKER plain.example.net:%d /secret/path?token=QUERY-MARKER", pa.Port()); resp.StatusCode != 200 || string(body) != want {
		t.Errorf("http: %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	got := seen.Load()
	for _, h := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Forwarded-For", "Forwarded", "Via"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("destination saw %s: %q", h, v)
		}
	}
	if got.Header.Get("X-Guest") != "kept" {
		t.Errorf("the guest's own header was not passed on: %v", got.Header)
	}
	// A connection's line is written when it closes, which may be after the
	// client has its answer: wait for each line, not for the slots (freed
	// just before the line is written).
	r.waitLog(1, `"msg":"egress connection"`, `"kind":"CONNECT"`, fmt.Sprintf(`"dest":"example.com:%d"`, ta.Port()))
	r.waitLog(1, `"msg":"egress connection"`, `"kind":"http"`, fmt.Sprintf(`"dest":"plain.example.net:%d"`, pa.Port()))
	r.checkOpen(0)
	logs := r.logs.String()
	for _, want := range []string{fmt.Sprintf(`"dest":"example.com:%d"`, ta.Port()), fmt.Sprintf(`"dest":"plain.example.net:%d"`, pa.Port()),
		`"addr":"127.0.0.1:`, `"bytes_in":`, `"bytes_out":`, `"kind":"CONNECT"`, `"kind":"http"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	for _, leak := range []string{"BODY-MARKER", "QUERY-MARKER", "secret/path", "Z3Vlc3Q6c2VjcmV0", "kept"} {
		if strings.Contains(logs, leak) {
			t.Errorf("log leaks %q:\n%s", leak, logs)
		}
	}
}

// TestProxyRefusals: every destination the dialer must refuse, in CONNECT
// and absolute form, is answered with the generic status and nothing
// reaches the loopback server (which is listening on an address the
// refused forms denote). Only its other port is allowed.
func TestProxyRefusals(t *testing.T) {
	target := serveEach(t, func(net.Conn) {})
	allowed := echoServer(t)
	p := fmt.Sprint(target.port())
	r := newRig(t, testGrant(), []netip.AddrPort{allowed.addr}, fakeResolver{
		"private.example.com":  addrs("10.0.0.5"),
		"loop.example.com":     addrs("127.0.0.1"),
		"mixed.example.com":    addrs("93.184.216.34", "127.0.0.1"),
		"metadata.example.com": addrs("169.254.169.254"),
		"mapped.example.com":   addrs("::ffff:127.0.0.1"),
		"v6loop.example.com":   addrs("::1"),
		"allowed.example.com":  addrs("127.0.0.1"),
	})
	connect := func(target string) string {
		return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	}
	get := func(target string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x.example.com\r\n\r\n", target)
	}
	cases := []struct {
		name, request string
		want          int
	}{
		{"connect loopback", connect("127.0.0.1:" + p), 403},
		{"connect loopback v6", connect("[::1]:" + p), 403},
		{"connect mapped loopback", connect("[::ffff:127.0.0.1]:" + p), 403},
		{"connect metadata", connect("169.254.169.254:80"), 403},
		{"connect metadata v6", connect("[fd00:ec2::254]:80"), 403},
		{"connect private literal", connect("10.0.0.5:443"), 403},
		{"connect private 192.168", connect("192.168.1.1:443"), 403},
		{"connect private 172.16", connect("172.16.0.1:443"), 403},
		{"connect cgnat", connect("100.64.0.1:443"), 403},
		{"connect unspecified", connect("0.0.0.0:" + p), 403},
		{"connect name to private", connect("private.example.com:443"), 403},
		{"connect name to loopback", connect("loop.example.com:" + p), 403},
		{"connect name to public and loopback", connect("mixed.example.com:" + p), 403},
		{"connect name to metadata", connect("metadata.example.com:80"), 403},
		{"connect name to mapped loopback", connect("mapped.example.com:" + p), 403},
		{"connect name to v6 loopback", connect("v6loop.example.com:" + p), 403},
		{"connect decimal loopback", connect("2130706433:" + p), 403},
		{"connect octal loopback", connect("0177.0.0.1:" + p), 403},
		{"connect hex loopback", connect("0x7f.0.0.1:" + p), 403},
		{"connect short loopback", connect("127.1:" + p), 403},
		{"connect trailing-dot loopback", connect("127.0.0.1.:" + p), 403},
		{"connect localhost", connect("localhost:" + p), 403},
		{"connect single label", connect("intranet:" + p), 403},
		{"connect .internal", connect("metadata.google.internal:80"), 403},
		{"connect allowed address other port", connect("127.0.0.1:" + p), 403},
		{"connect allowed name other port", connect("allowed.example.com:" + p), 403},
		{"connect port 0", connect("127.0.0.1:0"), 403},
		{"connect port too big", connect("93.184.216.34:65536"), 403},
		{"connect no port", connect("93.184.216.34"), 403},
		{"connect userinfo", "CONNECT user:pw@allowed.example.com:" + fmt.Sprint(allowed.port()) + " HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"connect path form", "CONNECT /x HTTP/1.1\r\nHost: allowed.example.com\r\n\r\n", 400},
		{"connect overlong", connect(strings.Repeat("LONG-DEST-MARKER.", 16) + "example.com:443"), 400},
		{"absolute overlong host", get("http://" + strings.Repeat("LONG-DEST-MARKER.", 16) + "example.com/"), 400},
		{"absolute loopback", get("http://127.0.0.1:" + p + "/"), 403},
		{"absolute metadata", get("http://169.254.169.254/latest/meta-data/"), 403},
		{"absolute name to private", get("http://private.example.com/"), 403},
		{"absolute decimal loopback", get("http://2130706433:" + p + "/"), 403},
		{"absolute hex loopback", get("http://0x7f000001:" + p + "/"), 403},
		{"absolute userinfo", get("http://user:pw@allowed.example.com:" + fmt.Sprint(allowed.port()) + "/"), 403},
		{"absolute https", get("https://allowed.example.com:" + fmt.Sprint(allowed.port()) + "/"), 400},
		{"absolute ftp", get("ftp://allowed.example.com/"), 400},
		{"absolute file", get("file:///etc/passwd"), 400},
		{"origin form", get("/"), 400},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400},
	}
	for _, c := range cases {
		code, body := r.raw(c.request)
		if code != c.want {
			t.Errorf("%s: %d %q, want %d", c.name, code, body, c.want)
		}
		if code >= 400 && body != publicText[code] {
			t.Errorf("%s: body %q, want the generic %q", c.name, body, publicText[code])
		}
	}
	if n := target.settle(t); n != 0 {
		t.Errorf("the refused server was reached %d times", n)
	}
	if n := allowed.settle(t); n != 0 {
		t.Errorf("the allowed server was reached %d times by refused requests", n)
	}
	// A destination longer than any valid one is not logged.
	if strings.Contains(r.logs.String(), "LONG-DEST-MARKER") {
		t.Errorf("an overlong destination reached the log:\n%s", r.logs.String())
	}
	r.checkOpen(0) // a refused dial gives its slot back before the answer
}

// TestProxyConnectionBound: at most MaxConnections destination connections
// at once; one more is answered 429 without a dial, and a slot is free
// again once a tunnel closes.
func TestProxyConnectionBound(t *testing.T) {
	echo := echoServer(t)
	g := testGrant()
	g.MaxConnections = 2
	r := newRig(t, g, []netip.AddrPort{echo.addr}, nil)
	dest := echo.addr.String()
	a, _, _ := r.tunnel(dest)
	b, _, _ := r.tunnel(dest)
	if a == nil || b == nil {
		t.Fatal("the first two tunnels were refused")
	}
	defer b.Close()
	// The proxy answers 200 once its dial has connected; the server's
	// Accept may return the connection later.
	echo.waitAccepted(t, 2)
	if _, _, code := r.tunnel(dest); code != http.StatusTooManyRequests {
		t.Errorf("third tunnel: %d, want 429", code)
	}
	a.Close()
	r.waitLog(1, `"msg":"egress connection"`) // a's, once its slot is free
	r.checkOpen(1)
	c, br, _ := r.tunnel(dest)
	if c == nil {
		t.Fatal("a freed slot was not reused")
	}
	defer c.Close()
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the tunnel: %q %v", buf, err)
	}
	// The echo means the server has accepted c; a listener hands out
	// connections in the order they were made, so one dialled for the
	// refused tunnel (before its 429) would be counted by now.
	if n := echo.conns.Load(); n != 3 {
		t.Errorf("echo server accepted %d connections, want 3 (the refused tunnel must not dial)", n)
	}
}

// TestProxyBytesInBound: a destination sending more than MaxBytesIn is cut
// at the bound (the client gets at most that many bytes), and every later
// request of the turn is answered 429.
func TestProxyBytesInBound(t *testing.T) {
	src := sourceServer(t, 64<<10)
	g := testGrant()
	g.MaxBytesIn = 10_000
	r := newRig(t, g, []netip.AddrPort{src.addr}, nil)
	c, br, _ := r.tunnel(src.addr.String())
	if c == nil {
		t.Fatal("tunnel refused")
	}
	n, _ := io.Copy(io.Discard, br)
	c.Close()
	if n != 10_000 {
		t.Errorf("client received %d bytes, want exactly the 10000 bound", n)
	}
	r.waitLog(1, `"msg":"egress connection cut"`, ErrBytes.Error())
	r.checkOpen(0)
	if _, _, code := r.tunnel(src.addr.String()); code != http.StatusTooManyRequests {
		t.Errorf("after the budget: %d, want 429", code)
	}
}

// TestProxyIdleTunnelsHoldNoBudget: tunnels waiting for their destination
// take nothing from the turn's byte budget, so another tunnel still gets
// every byte the budget allows (a read used to reserve its whole buffer while
// it waited, and the busy tunnel was cut long before the bound).
func TestProxyIdleTunnelsHoldNoBudget(t *testing.T) {
	silent := serveEach(t, func(conn net.Conn) { io.Copy(io.Discard, conn) })
	src := sourceServer(t, 50_000)
	g := testGrant()
	g.MaxConnections = 4
	g.MaxBytesIn = 100_000 // less than the idle tunnels' read buffers together
	reads := &readWatch{}
	r := newRigDialer(t, g, &safefetch.Dialer{Allow: []netip.AddrPort{silent.addr, src.addr}, DialAddr: reads.dial})
	for range 3 {
		c, _, _ := r.tunnel(silent.addr.String())
		if c == nil {
			t.Fatal("idle tunnel refused")
		}
		defer c.Close()
	}
	r.checkOpen(3) // each slot is taken before its 200
	// Every idle relay is in its destination Read (where a reservation
	// would have been made already) before the download starts.
	reads.waitReading(t, silent.addr, 3)
	c, br, _ := r.tunnel(src.addr.String())
	if c == nil {
		t.Fatal("download tunnel refused")
	}
	defer c.Close()
	if n, _ := io.Copy(io.Discard, br); n != 50_000 {
		t.Errorf("download got %d bytes, want all 50000 (the budget allows %d)\n%s", n, g.MaxBytesIn, r.logs.String())
	}
	if strings.Contains(r.logs.String(), ErrBytes.Error()) {
		t.Errorf("a connection was cut for a budget that was not spent:\n%s", r.logs.String())
	}
}

// TestProxyBytesOutBound: a client sending more than MaxBytesOut is cut:
// the destination receives at most the bound.
func TestProxyBytesOutBound(t *testing.T) {
	sink, got := sinkServer(t)
	g := testGrant()
	g.MaxBytesOut = 10_000
	r := newRig(t, g, []netip.AddrPort{sink.addr}, nil)
	c, _, _ := r.tunnel(sink.addr.String())
	if c == nil {
		t.Fatal("tunnel refused")
	}
	defer c.Close()
	go io.Copy(c, io.LimitReader(zeros{}, 1<<20))
	select {
	case n := <-got:
		if n > 10_000 {
			t.Errorf("destination received %d bytes, over the 10000 bound", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the destination connection was not cut")
	}
	r.waitLog(1, `"msg":"egress connection cut"`, ErrBytes.Error())
	r.checkOpen(0)
	if _, _, code := r.tunnel(sink.addr.String()); code != http.StatusTooManyRequests {
		t.Errorf("after the budget: %d, want 429", code)
	}
}

// TestProxyAbsoluteFormBytesBound: the same budget holds for absolute-form
// requests: an answer over it is cut, not delivered whole.
func TestProxyAbsoluteFormBytesBound(t *testing.T) {
	big := strings.Repeat("x", 50_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) }))
	defer srv.Close()
	g := testGrant()
	g.MaxBytesIn = 20_000
	r := newRig(t, g, []netip.AddrPort{serverAddr(t, srv)}, nil)
	resp, err := r.client(nil).Get(srv.URL + "/")
	if err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil && len(body) == len(big) {
			t.Fatalf("a %d-byte answer passed a 20000-byte budget", len(body))
		}
	}
	r.waitLog(1, `"msg":"egress connection cut"`, ErrBytes.Error())
	r.checkOpen(0)
	resp, err = r.client(nil).Get(srv.URL + "/")
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after the budget: %v %v, want 429", resp, err)
	}
}

// TestProxyLifetimeBound: a tunnel is cut at ConnectionTimeoutMs however
// active or idle it is.
func TestProxyLifetimeBound(t *testing.T) {
	echo := echoServer(t)
	g := testGrant()
	g.ConnectionTimeoutMs = policy.MinEgressTimeoutMs
	r := newRig(t, g, []netip.AddrPort{echo.addr}, nil)
	start := time.Now()
	c, br, _ := r.tunnel(echo.addr.String())
	if c == nil {
		t.Fatal("tunnel refused")
	}
	defer c.Close()
	_, err := io.Copy(io.Discard, br) // idle until cut
	if d := time.Since(start); err != nil || d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("tunnel ended after %s (%v), want about 1 s", d, err)
	}
	r.waitLog(1, `"msg":"egress connection cut"`, ErrLifetime.Error())
	r.checkOpen(0)
}

// TestProxyTurnOver: after the turn deadline every proxy request is 503.
func TestProxyTurnOver(t *testing.T) {
	echo := echoServer(t)
	r := newRig(t, testGrant(), []netip.AddrPort{echo.addr}, nil)
	r.proxy.deadline = time.Now().Add(-time.Second)
	if _, _, code := r.tunnel(echo.addr.String()); code != http.StatusServiceUnavailable {
		t.Errorf("after the deadline: %d, want 503", code)
	}
	if n := echo.settle(t); n != 0 {
		t.Errorf("a request after the deadline reached the destination (%d connections)", n)
	}
}

// TestProxyRefusalBudget: after MaxRefusals refused requests even an
// allowed destination is refused, before any dial.
func TestProxyRefusalBudget(t *testing.T) {
	echo := echoServer(t)
	r := newRig(t, testGrant(), []netip.AddrPort{echo.addr}, nil)
	for i := 0; i < MaxRefusals; i++ {
		if code, _ := r.raw("CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: x\r\n\r\n"); code != 403 {
			t.Fatalf("refusal %d: %d", i, code)
		}
	}
	if _, _, code := r.tunnel(echo.addr.String()); code != http.StatusForbidden {
		t.Errorf("after the refusal budget: %d, want 403", code)
	}
	if n := echo.settle(t); n != 0 {
		t.Errorf("the allowed destination was dialled after the refusal budget (%d connections)", n)
	}
	if n := strings.Count(r.logs.String(), "egress refused"); n != MaxRefusals {
		t.Errorf("%d refusal lines, want %d (later ones unlogged)", n, MaxRefusals)
	}
}

// TestIsProxyRequest: only CONNECT and absolute-form targets select the route.
func TestIsProxyRequest(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"CONNECT example.com:443 HTTP/1.1", true},
		{"GET http://example.com/ HTTP/1.1", true},
		{"POST http://broker/model HTTP/1.1", true},
		{"POST /model HTTP/1.1", false},
		{"POST //example.com/x HTTP/1.1", false},
		{"OPTIONS * HTTP/1.1", false},
		{"GET /http://example.com/ HTTP/1.1", false},
	} {
		req, err := http.ReadRequest(bufioString(c.line + "\r\nHost: h\r\n\r\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		if got := IsProxyRequest(req); got != c.want {
			t.Errorf("%s: IsProxyRequest = %v, want %v", c.line, got, c.want)
		}
	}
}

// TestProxyBadAnswerNotLogged: a destination's malformed answer is a 502 and
// the log names its category, never the bytes the destination sent.
func TestProxyBadAnswerNotLogged(t *testing.T) {
	c := serveEach(t, func(conn net.Conn) {
		conn.Read(make([]byte, 4096))
		io.WriteString(conn, "GARBAGE-ANSWER-MARKER not http\r\n\r\n")
	})
	r := newRig(t, testGrant(), []netip.AddrPort{c.addr}, nil)
	code, body := r.raw(fmt.Sprintf("GET http://%s/x HTTP/1.1\r\nHost: x\r\n\r\n", c.addr))
	if code != http.StatusBadGateway || body != publicText[http.StatusBadGateway] {
		t.Errorf("malformed answer: %d %q, want 502 generic", code, body)
	}
	if logs := r.logs.String(); strings.Contains(logs, "GARBAGE-ANSWER-MARKER") || !strings.Contains(logs, "destination exchange failed") {
		t.Errorf("log:\n%s", logs)
	}
}

// TestProxyTunnelHalfClose: a client that ends its input still gets the
// destination's answer: end of input half-closes the destination side.
func TestProxyTunnelHalfClose(t *testing.T) {
	c := serveEach(t, func(conn net.Conn) {
		n, _ := io.Copy(io.Discard, conn) // until the client's end of input
		fmt.Fprintf(conn, "read %d", n)
	})
	r := newRig(t, testGrant(), []netip.AddrPort{c.addr}, nil)
	conn, br, _ := r.tunnel(c.addr.String())
	if conn == nil {
		t.Fatal("tunnel refused")
	}
	defer conn.Close()
	io.WriteString(conn, "12345")
	conn.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "read 5" {
		t.Errorf("after half-close: %q %v, want %q", got, err, "read 5")
	}
}

// TestProxyConnectEarlyBytes: bytes sent right behind the CONNECT header,
// before the 200 (already in the server's buffer), reach the destination.
func TestProxyConnectEarlyBytes(t *testing.T) {
	echo := echoServer(t)
	r := newRig(t, testGrant(), []netip.AddrPort{echo.addr}, nil)
	c, err := net.Dial("tcp", r.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nEARLY", echo.addr, echo.addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "EARLY" {
		t.Errorf("early bytes echoed as %q (%v)", buf, err)
	}
}
