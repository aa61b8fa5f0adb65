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
	"slices"
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

// waitTimeout bounds every wait on a condition: reaching it is a failure,
// never a pace.
const waitTimeout = 10 * time.Second

// watch wakes its waiters after every change of what it guards, so a test
// blocks until the condition it asserts holds: no sleep, no poll.
type watch struct {
	mu   sync.Mutex
	wake chan struct{} // closed by the next notify
}

// notify wakes every waiter; call it after each change.
func (w *watch) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.wake != nil {
		close(w.wake)
		w.wake = nil
	}
}

// until blocks until ok holds, re-checking it after each notify, and fails
// the test after waitTimeout with what.
func (w *watch) until(t *testing.T, ok func() bool, what func() string) {
	t.Helper()
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for {
		// Take the channel before the check: a change after the check
		// closes it, so no wake-up is missed.
		w.mu.Lock()
		if w.wake == nil {
			w.wake = make(chan struct{})
		}
		wake := w.wake
		w.mu.Unlock()
		if ok() {
			return
		}
		select {
		case <-wake:
		case <-timeout.C:
			t.Fatalf("not within %s: %s", waitTimeout, what())
		}
	}
}

// syncBuffer is a log sink safe for concurrent writers that tests can wait
// on (slog's JSON handler writes each record in one Write).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	w  watch
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.b.Write(p)
	s.mu.Unlock()
	s.w.notify()
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines counts the log lines holding every one of subs.
func (s *syncBuffer) lines(subs ...string) int {
	n := 0
	for _, l := range strings.Split(s.String(), "\n") {
		all := l != ""
		for _, sub := range subs {
			all = all && strings.Contains(l, sub)
		}
		if all {
			n++
		}
	}
	return n
}

// counted is a loopback test server that counts every connection it
// accepts; tests wait on the count, which lags the client's dial (the
// kernel completes a connection before the server's Accept returns it).
type counted struct {
	ln    net.Listener
	addr  netip.AddrPort
	conns atomic.Int64
	w     watch
	mu    sync.Mutex
	peers []string // remote addresses, in accept order
}

func (c *counted) port() uint16 { return c.addr.Port() }

// waitAccepted waits until the server has accepted n connections.
func (c *counted) waitAccepted(t *testing.T, n int64) {
	t.Helper()
	c.w.until(t, func() bool { return c.conns.Load() >= n },
		func() string { return fmt.Sprintf("%s accepted %d connections, want %d", c.addr, c.conns.Load(), n) })
}

// settle returns how many connections the server accepted before a probe
// it dials now. A listener accepts in the order connections were made, so
// every connection made before settle was called is counted, however late
// the server's Accept ran.
func (c *counted) settle(t *testing.T) int {
	t.Helper()
	probe, err := net.Dial("tcp", c.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	me := probe.LocalAddr().String()
	at := func() int { c.mu.Lock(); defer c.mu.Unlock(); return slices.Index(c.peers, me) }
	c.w.until(t, func() bool { return at() >= 0 }, func() string { return fmt.Sprintf("%s did not accept the probe", c.addr) })
	return at()
}

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
		l.c.mu.Lock()
		l.c.peers = append(l.c.peers, c.RemoteAddr().String())
		l.c.mu.Unlock()
		l.c.conns.Add(1)
		l.c.w.notify()
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
	return newRigDialer(t, grant, &safefetch.Dialer{Allow: allow, Resolver: res})
}

// newRigDialer is newRig with a dialer of the test's own.
func newRigDialer(t *testing.T, grant policy.Egress, d *safefetch.Dialer) *rig {
	t.Helper()
	logs := &syncBuffer{}
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

// waitLog waits until at least n log lines hold every one of subs. A
// destination connection's line is the last thing its Close does, after
// the slot is freed; it is written when the connection ends, which may be
// after the guest has its answer.
func (r *rig) waitLog(n int, subs ...string) {
	r.t.Helper()
	r.logs.w.until(r.t, func() bool { return r.logs.lines(subs...) >= n },
		func() string {
			return fmt.Sprintf("%d log lines with %q, want %d:\n%s", r.logs.lines(subs...), subs, n, r.logs.String())
		})
}

// checkOpen fails the test unless the proxy holds n destination
// connections now.
func (r *rig) checkOpen(n int64) {
	r.t.Helper()
	if got := r.proxy.open.Load(); got != n {
		r.t.Errorf("open destination connections = %d, want %d", got, n)
	}
}

// readWatch is a dial seam (safefetch.Dialer.DialAddr) that counts, per
// dialled "ip:port", the destination connections whose Read the proxy has
// entered: the moment a relay starts waiting for its destination.
type readWatch struct {
	mu      sync.Mutex
	entered map[string]int
	w       watch
}

func (rw *readWatch) dial(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, rw: rw, addr: address}, nil
}

// waitReading waits until n connections to addr have entered Read.
func (rw *readWatch) waitReading(t *testing.T, addr netip.AddrPort, n int) {
	t.Helper()
	got := func() int { rw.mu.Lock(); defer rw.mu.Unlock(); return rw.entered[addr.String()] }
	rw.w.until(t, func() bool { return got() >= n },
		func() string { return fmt.Sprintf("%d connections to %s reading, want %d", got(), addr, n) })
}

type watchedConn struct {
	net.Conn
	rw   *readWatch
	addr string
	once sync.Once
}

func (c *watchedConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		c.rw.mu.Lock()
		if c.rw.entered == nil {
			c.rw.entered = map[string]int{}
		}
		c.rw.entered[c.addr]++
		c.rw.mu.Unlock()
		c.rw.w.notify()
	})
	return c.Conn.Read(b)
}

// CloseWrite keeps the relay's half-close.
func (c *watchedConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

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
