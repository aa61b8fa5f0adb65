package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// fakeResolver answers names from a table (the names carry the dialer's
// trailing dot); anything else does not exist.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[strings.TrimSuffix(host, ".")]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// counted is a loopback test server that counts every connection it accepts.
type counted struct {
	ln    net.Listener
	addr  netip.AddrPort
	conns atomic.Int64
}

func (c *counted) port() uint16 { return c.addr.Port() }

// newCountingListener listens on 127.0.0.1 and counts accepts.
func newCountingListener(t *testing.T) (*counted, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &counted{addr: netip.MustParseAddrPort(ln.Addr().String())}
	t.Cleanup(func() { ln.Close() })
	return c, countingListener{ln, c}
}

type countingListener struct {
	net.Listener
	c *counted
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.c.conns.Add(1)
	}
	return c, err
}

// rig is a proxy served over HTTP on loopback, its logs and its seams.
type rig struct {
	t     *testing.T
	proxy *Proxy
	url   *url.URL
	logs  *syncBuffer
}

func newRig(t *testing.T, grant policy.Egress, allow []netip.AddrPort, res fakeResolver) *rig {
	t.Helper()
	logs := &syncBuffer{}
	d := &safefetch.Dialer{Allow: allow, Resolver: res}
	p := New(d, grant, time.Now().Add(time.Hour), slog.New(slog.NewJSONHandler(logs, nil)))
	srv := httptest.NewUnstartedServer(p)
	srv.Config.DisableGeneralOptionsHandler = true // as the broker's server
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return &rig{t: t, proxy: p, url: u, logs: logs}
}

// client is an HTTP client that goes through the proxy, trusting roots.
func (r *rig) client(srv *httptest.Server) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(r.url), DisableKeepAlives: true}
	if srv != nil && srv.TLS != nil {
		tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// raw sends request bytes on a fresh proxy connection and reads the answer.
func (r *rig) raw(request string) (int, string) {
	c, err := net.Dial("tcp", r.url.Host)
	if err != nil {
		r.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	go io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// tunnel opens a CONNECT tunnel to dest and returns the raw connection
// after a 200, or the status.
func (r *rig) tunnel(dest string) (net.Conn, *bufio.Reader, int) {
	c, err := net.Dial("tcp", r.url.Host)
	if err != nil {
		r.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		r.t.Fatalf("CONNECT %s: %v", dest, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, nil, resp.StatusCode
	}
	return c, br, resp.StatusCode
}

// waitOpen waits until the proxy holds n destination connections.
func (r *rig) waitOpen(n int64) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.proxy.open.Load() != n {
		if time.Now().After(deadline) {
			r.t.Fatalf("open destination connections = %d, want %d", r.proxy.open.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serveEach serves every connection of a new counting listener with handle,
// in its own goroutine, and closes the connection after it.
func serveEach(t *testing.T, handle func(net.Conn)) *counted {
	c, ln := newCountingListener(t)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); handle(conn) }()
		}
	}()
	return c
}

// echoServer answers each connection by echoing what it reads.
func echoServer(t *testing.T) *counted {
	return serveEach(t, func(conn net.Conn) { io.Copy(conn, conn) })
}

// sinkServer reads everything and reports how much when the client closes.
func sinkServer(t *testing.T) (*counted, chan int64) {
	got := make(chan int64, 8)
	c := serveEach(t, func(conn net.Conn) { n, _ := io.Copy(io.Discard, conn); got <- n })
	return c, got
}

// sourceServer writes n bytes to each connection, then closes it.
func sourceServer(t *testing.T, n int64) *counted {
	return serveEach(t, func(conn net.Conn) { io.Copy(conn, io.LimitReader(zeros{}, n)) })
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func bufioString(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
