package safefetch

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/miekg/dns"
)

// dnsServer is a real DNS server on 127.0.0.1, so the production resolver
// (Go's, over UDP) answers the tests. Each name has a sequence of answer
// sets: the n-th query of a type gets the n-th set (the last one repeats),
// which is how a test rebinds a name between hops.
type dnsServer struct {
	addr string
	mu   sync.Mutex
	zone map[string][][]string
	slow map[string]bool
	hits map[string]int // "name/A", "name/AAAA"
	done chan struct{}
}

func newDNS(t testing.TB) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{addr: pc.LocalAddr().String(), zone: map[string][][]string{}, slow: map[string]bool{},
		hits: map[string]int{}, done: make(chan struct{})}
	srv := &dns.Server{PacketConn: pc, Handler: s}
	go srv.ActivateAndServe()
	t.Cleanup(func() {
		close(s.done)
		srv.Shutdown()
	})
	return s
}

// set gives name its answer sets, in query order.
func (s *dnsServer) set(name string, sets ...[]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.zone[dns.Fqdn(strings.ToLower(name))] = sets
}

func (s *dnsServer) setSlow(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slow[dns.Fqdn(name)] = true
}

func (s *dnsServer) queries(name, qtype string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[dns.Fqdn(name)+"/"+qtype]
}

func (s *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	// Authoritative: Go's resolver retries a non-authoritative empty answer
	// as a lame referral, which would double the query counts.
	m.Authoritative, m.RecursionAvailable = true, true
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	key := name + "/" + dns.TypeToString[q.Qtype]
	s.mu.Lock()
	sets, ok := s.zone[name]
	n := s.hits[key]
	s.hits[key]++
	slow := s.slow[name]
	s.mu.Unlock()
	if slow {
		select { // never answers while the test runs
		case <-s.done:
		case <-time.After(30 * time.Second):
		}
		return
	}
	if !ok {
		m.Rcode = dns.RcodeNameError
		w.WriteMsg(m)
		return
	}
	set := sets[min(n, len(sets)-1)]
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: 0}
	}
	for _, a := range set {
		ip := netip.MustParseAddr(a)
		switch {
		case q.Qtype == dns.TypeA && ip.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: ip.AsSlice()})
		case q.Qtype == dns.TypeAAAA && ip.Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: ip.AsSlice()})
		}
	}
	w.WriteMsg(m)
}

func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.addr)
	}}
}

// Public addresses the test DNS hands out; the dial seam routes them to
// loopback test servers. Nothing else is routed: a dial anywhere else fails
// and is recorded, so the network stays on loopback.
const (
	pubV4   = "93.184.216.34"
	pubV4b  = "93.184.216.35" // routed nowhere: fallback cases
	pubV4c  = "93.184.216.36" // routed to a TCP sink that never speaks
	pubV6   = "2606:2800:220:1:248:1893:25c8:1946"
	pub2V4  = "151.101.1.69"
	pubAddr = pubV4 + ":80"
)

type env struct {
	dns   *dnsServer
	f     *Fetcher
	d     *Dialer
	plain *httptest.Server
	tls   *httptest.Server
	hits  *hitCounter

	mu     sync.Mutex
	routes map[netip.AddrPort]string
	dialed []netip.AddrPort
}

type hitCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hitCounter) add(path string) {
	h.mu.Lock()
	h.n[path]++
	h.mu.Unlock()
}

func (h *hitCounter) get(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[path]
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{dns: newDNS(t), routes: map[netip.AddrPort]string{}, hits: &hitCounter{n: map[string]int{}}}
	h := testHandler(e.hits)
	quiet := log.New(io.Discard, "", 0) // refused handshakes are the point of some cases
	e.plain = httptest.NewUnstartedServer(h)
	e.plain.Config.ErrorLog = quiet
	e.plain.Start()
	t.Cleanup(e.plain.Close)
	e.tls = httptest.NewUnstartedServer(h)
	e.tls.Config.ErrorLog = quiet
	e.tls.StartTLS()
	t.Cleanup(e.tls.Close)
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	go func() { // accepts and never speaks: a server slow to handshake
		var held []net.Conn
		for {
			c, err := sink.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	for _, a := range []string{pubV4, pubV6, pub2V4} {
		e.route(a, 80, e.plain.Listener.Addr().String())
		e.route(a, 443, e.tls.Listener.Addr().String())
		e.route(a, 8080, e.plain.Listener.Addr().String())
	}
	e.route(pubV4c, 80, sink.Addr().String())
	e.route(pubV4c, 443, sink.Addr().String())
	pool := x509.NewCertPool()
	pool.AddCert(e.tls.Certificate())
	// The box owns none of the test's public addresses (tests for the
	// box's own addresses set a Local of their own).
	e.d = &Dialer{Resolver: e.dns.resolver(), DialAddr: e.dial, Local: localOf()}
	e.f = &Fetcher{Dialer: e.d, RootCAs: pool, UserAgent: "safefetch-test"}
	e.dns.set("pub.example.com", []string{pubV4})
	e.dns.set("pub6.example.com", []string{pubV6})
	e.dns.set("dual.example.com", []string{pubV4, pubV6})
	e.dns.set("pub2.example.com", []string{pub2V4})
	e.dns.set("other.example.net", []string{pubV4})
	return e
}

func (e *env) route(addr string, port uint16, to string) {
	e.routes[netip.AddrPortFrom(netip.MustParseAddr(addr), port)] = to
}

// dial is the test seam behind the Dialer: it sees only vetted addresses.
func (e *env) dial(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("seam got %q, not ip:port", address)
	}
	e.mu.Lock()
	e.dialed = append(e.dialed, ap)
	to, ok := e.routes[ap]
	e.mu.Unlock()
	if !ok {
		return nil, errors.New("no route to host (test network)")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

func (e *env) takeDialed() []netip.AddrPort {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.dialed
	e.dialed = nil
	return d
}

var (
	bombsOnce sync.Once
	bombs     map[string][]byte
)

const bombSize = 16 << 20

// compressedBombs returns 16 MiB of zeros in each coding (a few KiB each).
func compressedBombs() map[string][]byte {
	bombsOnce.Do(func() {
		zeros := make([]byte, bombSize)
		bombs = map[string][]byte{}
		for _, c := range []string{"gzip", "deflate-zlib", "deflate-raw", "br"} {
			bombs[c] = compress(c, zeros)
		}
	})
	return bombs
}

func compress(coding string, data []byte) []byte {
	var b bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w, _ = gzip.NewWriterLevel(&b, gzip.BestCompression)
	case "deflate-zlib":
		w, _ = zlib.NewWriterLevel(&b, zlib.BestCompression)
	case "deflate-raw":
		w, _ = flate.NewWriter(&b, flate.BestCompression)
	case "br":
		w = brotli.NewWriterLevel(&b, 5)
	}
	w.Write(data)
	w.Close()
	return b.Bytes()
}

func codingHeader(c string) string {
	if strings.HasPrefix(c, "deflate") {
		return "deflate"
	}
	return c
}

// testHandler serves the behaviours the fetch table needs, by path.
func testHandler(hits *hitCounter) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		hits.add(r.URL.Path)
		io.WriteString(w, "hello")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		hits.add(r.URL.Path)
		code := http.StatusFound
		fmt.Sscan(r.URL.Query().Get("code"), &code)
		w.Header().Set("Location", r.URL.Query().Get("to"))
		w.WriteHeader(code)
		io.WriteString(w, "moved")
	})
	mux.HandleFunc("/chain/{n}", func(w http.ResponseWriter, r *http.Request) {
		hits.add("/chain")
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		if n == 0 {
			io.WriteString(w, "end of chain")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/chain/%d", n-1), http.StatusFound)
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		hits.add(r.URL.Path)
		for _, k := range []string{"Accept-Encoding", "Authorization", "Cookie", "X-Trusted", "User-Agent"} {
			fmt.Fprintf(w, "%s=%s\n", k, r.Header.Get(k))
		}
		fmt.Fprintf(w, "Host=%s\n", r.Host)
	})
	mux.HandleFunc("/sni", func(w http.ResponseWriter, r *http.Request) {
		hits.add(r.URL.Path)
		if r.TLS == nil {
			io.WriteString(w, "no tls")
			return
		}
		io.WriteString(w, r.TLS.ServerName)
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		var code int
		fmt.Sscan(r.PathValue("code"), &code)
		w.WriteHeader(code)
		io.WriteString(w, "status body")
	})
	mux.HandleFunc("/size/{n}", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", fmt.Sprint(n))
		}
		if n > 0 {
			w.Write([]byte("a"))
			w.(http.Flusher).Flush() // no automatic Content-Length
			w.Write(bytes.Repeat([]byte("a"), n-1))
		}
	})
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		buf := bytes.Repeat([]byte("x"), 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/slow-headers", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/slow-body", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for r.Context().Err() == nil {
			w.Write([]byte("."))
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
	})
	mux.HandleFunc("/bomb/{coding}", func(w http.ResponseWriter, r *http.Request) {
		c := r.PathValue("coding")
		w.Header().Set("Content-Encoding", codingHeader(c))
		w.Write(compressedBombs()[c])
	})
	mux.HandleFunc("/small/{coding}", func(w http.ResponseWriter, r *http.Request) {
		c := r.PathValue("coding")
		w.Header().Set("Content-Encoding", codingHeader(c))
		w.Write(compress(c, []byte("decoded text")))
	})
	mux.HandleFunc("/truncated/{coding}", func(w http.ResponseWriter, r *http.Request) {
		c := r.PathValue("coding")
		w.Header().Set("Content-Encoding", codingHeader(c))
		b := compress(c, bytes.Repeat([]byte("some text "), 1000))
		w.Write(b[:len(b)/2])
	})
	mux.HandleFunc("/encoding", func(w http.ResponseWriter, r *http.Request) {
		for _, v := range r.URL.Query()["ce"] {
			w.Header().Add("Content-Encoding", v)
		}
		w.Write(compress("gzip", []byte("x")))
	})
	return mux
}
