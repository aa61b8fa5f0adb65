package broker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// egressEcho is a loopback echo server that counts connections.
func egressEcho(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String(), &n
}

// TestProxyRouteAbsentWithoutGrant: without an egress grant, CONNECT and
// absolute-form requests, even to an egressAllow destination, meet the
// broker's strict refusals (the JSON ones, counted against the refusal
// budget) and reach nothing.
func TestProxyRouteAbsentWithoutGrant(t *testing.T) {
	dest, hits := egressEcho(t)
	h := newHarness(t, func(p *policy.Policy) { p.EgressAllow = []string{dest} })
	cases := []struct {
		name, method, request string
		want                  int
	}{
		{"CONNECT allowed", "CONNECT", fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest), http.StatusMethodNotAllowed},
		{"CONNECT metadata", "CONNECT", "CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusMethodNotAllowed},
		{"absolute GET", "GET", fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest), http.StatusMethodNotAllowed},
		{"absolute POST", "POST", rawPost("http://"+dest+"/model", "{}", nil), http.StatusBadRequest},
		{"absolute POST to the model route", "POST", rawPost("http://broker/model", "{}", nil), http.StatusBadRequest},
	}
	for _, c := range cases {
		code, body := h.raw(c.method, c.request)
		if code != c.want || !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("%s: %d %s, want %d with the broker's JSON refusal", c.name, code, body, c.want)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the destination was reached %d times without a grant", n)
	}
	if n := h.upstreamSeen(); n != 0 {
		t.Errorf("an upstream was reached %d times", n)
	}
	if got := h.broker.refusals.Load(); got != int64(len(cases)) {
		t.Errorf("refusals counted %d, want %d", got, len(cases))
	}
}

// brokerTunnel opens a CONNECT tunnel through the broker socket.
func brokerTunnel(t *testing.T, h *harness, dest string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		t.Fatalf("CONNECT: %v", err)
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, nil, resp.StatusCode
	}
	return c, br, 200
}

// TestProxyRouteWithGrant: a granted turn's socket serves CONNECT to its
// egressAllow destination and refuses others with 403; an absolute-form
// request naming the broker's own routes goes to the proxy (and fails
// there), never to the model; every strict refusal of the other routes
// still holds.
func TestProxyRouteWithGrant(t *testing.T) {
	dest, hits := egressEcho(t)
	h := newHarness(t, func(p *policy.Policy) {
		p.EgressAllow = []string{dest}
		g := policy.DefaultEgress()
		p.Egress = &g
	})
	c, br, code := brokerTunnel(t, h, dest)
	if code != 200 {
		t.Fatalf("CONNECT to the allowed destination: %d", code)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo through the broker: %q %v", buf, err)
	}
	c.Close()
	for _, d := range []string{"169.254.169.254:80", "127.0.0.1:1", "10.0.0.1:443"} {
		if _, _, code := brokerTunnel(t, h, d); code != http.StatusForbidden {
			t.Errorf("CONNECT %s: %d, want 403", d, code)
		}
	}
	if code, _ := h.raw("POST", rawPost("http://broker/model", "{}", nil)); code != http.StatusForbidden {
		t.Errorf("absolute-form to the broker's model route: %d, want the proxy's 403 (single-label name)", code)
	}
	strict := []struct {
		name, method, request string
		want                  int
	}{
		{"GET /model", "GET", rawReq("GET", "/model", "HTTP/1.1", "", nil), http.StatusMethodNotAllowed},
		{"OPTIONS *", "OPTIONS", rawReq("OPTIONS", "*", "HTTP/1.1", "", nil), http.StatusMethodNotAllowed},
		{"encoded path", "POST", rawPost("/model%20", "{}", nil), http.StatusBadRequest},
		{"proxy header", "POST", rawPost("/model", "{}", []string{"Proxy-Authorization: Basic eA=="}), http.StatusBadRequest},
	}
	for _, s := range strict {
		if code, body := h.raw(s.method, s.request); code != s.want || !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("%s: %d %s, want %d", s.name, code, body, s.want)
		}
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("destination reached %d times, want 1", n)
	}
	if n := h.upstreamSeen(); n != 0 {
		t.Errorf("an upstream was reached %d times", n)
	}
}

// TestProxyTunnelEndsAtTurnDeadline: a live tunnel is cut when the turn
// deadline passes, although its own lifetime is longer.
func TestProxyTunnelEndsAtTurnDeadline(t *testing.T) {
	dest, _ := egressEcho(t)
	h := newHarness(t, func(p *policy.Policy) {
		p.EgressAllow = []string{dest}
		g := policy.DefaultEgress()
		p.Egress = &g
		p.DeadlineUnixMs = time.Now().Add(1500 * time.Millisecond).UnixMilli()
	})
	c, br, code := brokerTunnel(t, h, dest)
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Logf("tunnel read ended: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("tunnel outlived the turn deadline by %s", d)
	}
}

// TestEgressOnlyPolicy: a code run's broker (an egressOnly policy: no model,
// no tools, no credentials) serves the proxy route to its allowed
// destination and refuses every route a turn's broker has, well-formed
// calls included, so a run can never reach the model or a tool.
func TestEgressOnlyPolicy(t *testing.T) {
	dest, hits := egressEcho(t)
	h := newHarness(t, func(p *policy.Policy) {
		p.EgressAllow = []string{dest}
		g := policy.DefaultEgress()
		p.Egress = &g
		p.EgressOnly = true
		p.Model = policy.Model{}
		p.Tools = nil
		p.MCP = nil
	})
	c, br, code := brokerTunnel(t, h, dest)
	if code != 200 {
		t.Fatalf("CONNECT to the allowed destination: %d", code)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo through the broker: %q %v", buf, err)
	}
	c.Close()
	for _, route := range []string{"/model", "/tools/clock", "/fetch", "/mcp/x/y"} {
		if code, body := h.raw("POST", rawPost(route, `{"messages":[]}`, nil)); code != http.StatusNotFound || !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("POST %s: %d %s, want 404", route, code, body)
		}
	}
	if n := h.upstreamSeen(); n != 0 {
		t.Errorf("an upstream was reached %d times", n)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("destination reached %d times, want 1", n)
	}
}
