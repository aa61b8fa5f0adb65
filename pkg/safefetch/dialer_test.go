package safefetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestDialerRefusals(t *testing.T) {
	e := newEnv(t)
	e.dns.set("loop.example.com", []string{"127.0.0.1"})
	e.dns.set("v6only.example.com", []string{pubV6})
	cases := []struct {
		network, addr string
		err           error
		in            string
	}{
		{"udp", "pub.example.com:53", ErrAddress, "not tcp"},
		{"unix", "/run/x.sock", ErrAddress, "not tcp"},
		{"ip4:icmp", "pub.example.com", ErrAddress, "not tcp"},
		{"tcp", "pub.example.com", ErrAddress, "host:port"},
		{"tcp", "pub.example.com:0", ErrAddress, "1-65535"},
		{"tcp", "pub.example.com:65536", ErrAddress, "1-65535"},
		{"tcp", "pub.example.com:http", ErrAddress, "1-65535"},
		{"tcp", "127.0.0.1:80", ErrAddress, "loopback"},
		{"tcp", "[::1]:80", ErrAddress, "loopback"},
		{"tcp", "[fe80::1%eth0]:80", ErrAddress, "without zone"},
		{"tcp", "[::ffff:127.0.0.1]:80", ErrAddress, "IPv4-mapped"},
		{"tcp", "169.254.169.254:80", ErrAddress, "metadata"},
		{"tcp", "2130706433:80", ErrURL, "127.0.0.1"},
		{"tcp", "0x7f.1:80", ErrURL, "127.0.0.1"},
		{"tcp", "localhost:80", ErrURL, "single label"},
		{"tcp", "loop.example.com:80", ErrAddress, "resolves to 127.0.0.1:80"},
		{"tcp4", "v6only.example.com:80", ErrResolve, "no tcp4 address"},
		{"tcp", "nothere.example.com:80", ErrResolve, ""},
	}
	for _, tc := range cases {
		c, err := e.d.DialContext(context.Background(), tc.network, tc.addr)
		if err == nil {
			c.Close()
			t.Errorf("DialContext(%s, %s) connected", tc.network, tc.addr)
			continue
		}
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("DialContext(%s, %s) = %v, want %v containing %q", tc.network, tc.addr, err, tc.err, tc.in)
		}
	}
	if d := e.takeDialed(); len(d) != 0 {
		t.Errorf("refused dials reached the seam: %v", d)
	}
	// and the vetted ones connect through the seam
	for _, a := range []string{"pub.example.com:80", pubV4 + ":443", "[" + pubV6 + "]:80", "dual.example.com:80"} {
		c, err := e.d.DialContext(context.Background(), "tcp", a)
		if err != nil {
			t.Errorf("DialContext(%s): %v", a, err)
			continue
		}
		c.Close()
	}
	c, err := e.d.DialContext(context.Background(), "tcp6", "dual.example.com:80")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if d := e.takeDialed(); d[len(d)-1].String() != "["+pubV6+"]:80" {
		t.Errorf("tcp6 dial went to %v", d)
	}
}

// TestAllowEscapeHatch uses the production dial path (no seam) against a
// real loopback server: the exact allowed address:port connects, a second
// port on the same address stays refused, and so do names.
func TestAllowEscapeHatch(t *testing.T) {
	hits := &hitCounter{n: map[string]int{}}
	srv := httptest.NewServer(testHandler(hits))
	defer srv.Close()
	var otherHits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
	}))
	defer other.Close()
	allowed := netip.MustParseAddrPort(srv.Listener.Addr().String())
	dnsS := newDNS(t)
	dnsS.set("mirror.example.com", []string{"127.0.0.1"})
	d := &Dialer{Allow: []netip.AddrPort{allowed}, Resolver: dnsS.resolver()}
	f := &Fetcher{Dialer: d}

	res, err := f.Fetch(context.Background(), srv.URL+"/pkg", DefaultOptions())
	if err != nil || string(res.Body) != "hello" || res.Addr != allowed {
		t.Fatalf("allowed destination: %v %v", err, res)
	}
	u := fmt.Sprintf("http://mirror.example.com:%d/byname", allowed.Port())
	if res, err = f.Fetch(context.Background(), u, DefaultOptions()); err != nil || string(res.Body) != "hello" {
		t.Fatalf("allowed destination by name: %v", err)
	}
	for _, u := range []string{
		other.URL + "/", // same address, other port
		fmt.Sprintf("http://[::1]:%d/", allowed.Port()),                      // other address, same port
		fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", allowed.Port()),         // mapped form of the allowed address
		fmt.Sprintf("http://2130706433:%d/", allowed.Port()),                 // encoded form
		fmt.Sprintf("http://mirror.example.com:%d/", allowed.Port()+1),       // name, other port
		fmt.Sprintf("http://localhost:%d/", allowed.Port()),                  // special-use name
		redirectTo(srv.URL, other.URL+"/", 302),                              // allowed hop redirecting elsewhere
		redirectTo(srv.URL, "http://169.254.169.254/latest/meta-data/", 302), // and to metadata
	} {
		if _, err := f.Fetch(context.Background(), u, DefaultOptions()); err == nil {
			t.Errorf("%s: fetched, want refusal", u)
		}
	}
	if c, err := d.DialContext(context.Background(), "tcp", other.Listener.Addr().String()); err == nil {
		c.Close()
		t.Error("DialContext reached the second port")
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the second port was reached %d times", n)
	}
	if hits.get("/pkg") != 1 || hits.get("/byname") != 1 || hits.get("/redirect") != 2 {
		t.Errorf("allowed server hits: %v", hits.n)
	}
}

func TestPinControl(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	real := netip.MustParseAddrPort(l.Addr().String())
	nd := &net.Dialer{Control: pinControl(netip.AddrPortFrom(real.Addr(), real.Port()+1))}
	if c, err := nd.Dial("tcp", real.String()); err == nil {
		c.Close()
		t.Fatal("socket connected to an address other than the vetted one")
	} else if !strings.Contains(err.Error(), "not the vetted") {
		t.Fatalf("err = %v", err)
	}
	nd = &net.Dialer{Control: pinControl(real)}
	c, err := nd.Dial("tcp", real.String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestValidateAllow(t *testing.T) {
	cases := []struct {
		in string
		ok bool
	}{
		{"10.0.0.5:3142", true},
		{"192.168.1.10:443", true},
		{"127.0.0.1:8080", true},
		{"[fd00::5]:443", true},
		{"[::1]:80", true},
		{"8.8.8.8:53", true},
		{"10.0.0.5:0", false},
		{"10.0.0.5", false},
		{"0.0.0.0:80", false},
		{"[::]:80", false},
		{"0.1.2.3:80", false},
		{"224.0.0.1:80", false},
		{"[ff02::1]:80", false},
		{"255.255.255.255:80", false},
		{"169.254.169.254:80", false},
		{"[fd00:ec2::254]:80", false},
		{"100.100.100.200:80", false},
		{"[::ffff:10.0.0.5]:80", false},
		{"[fe80::1%eth0]:80", false},
		{"mirror.lan:80", false},
		{"010.0.0.5:80", false},
		{"10.0.0.5:http", false},
	}
	for _, tc := range cases {
		got, err := ParseAllow([]string{tc.in})
		if tc.ok != (err == nil) {
			t.Errorf("ParseAllow(%q) = %v, %v; want ok=%v", tc.in, got, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), strings.Trim(strings.Split(tc.in, "%")[0], "[]")[:3])) {
			t.Errorf("ParseAllow(%q) error %q does not name the entry", tc.in, err)
		}
	}
	if err := ValidateAllow([]netip.AddrPort{{}}); err == nil {
		t.Error("zero AddrPort allowed")
	}
}

// TestDialWithoutDeadlineIsBounded: a caller's context without a deadline
// still cannot hang on a resolver that never answers.
func TestResolveTimeoutBound(t *testing.T) {
	block := resolverFunc(func(ctx context.Context, _, _ string) ([]netip.Addr, error) {
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > ResolveTimeout {
			t.Errorf("resolution without the %s bound", ResolveTimeout)
		}
		return nil, errors.New("servfail")
	})
	d := &Dialer{Resolver: block}
	if _, err := d.DialContext(context.Background(), "tcp", "x.example.com:80"); !errors.Is(err, ErrResolve) {
		t.Errorf("err = %v", err)
	}
}

type resolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (f resolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

// TestResolverSeesFQDN: the lookup carries a trailing dot, so a resolver's
// search list never turns a public-looking name into an internal one.
func TestResolverSeesFQDN(t *testing.T) {
	var got string
	d := &Dialer{Resolver: resolverFunc(func(_ context.Context, network, host string) ([]netip.Addr, error) {
		got = network + " " + host
		return nil, errors.New("stop")
	})}
	d.DialContext(context.Background(), "tcp", "www.example.com:443")
	if got != "ip www.example.com." {
		t.Errorf("resolver asked %q", got)
	}
}
