package safefetch

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
)

// BenchmarkDial puts the vetted dialer's cost per connection (parse, resolve,
// classify, pin, socket-level re-check) beside a plain net.Dialer, all to one
// loopback listener. Run with a fixed count so ephemeral ports last:
//
//	go test -run '^$' -bench Dial -benchtime 5000x ./pkg/safefetch/
func BenchmarkDial(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ap := netip.MustParseAddrPort(l.Addr().String())
	port := l.Addr().(*net.TCPAddr).Port
	nameAddr := net.JoinHostPort("bench.example.com", strconv.Itoa(port))
	dnsS := newDNS(b)
	dnsS.set("bench.example.com", []string{"127.0.0.1"})
	static := staticResolver{"bench.example.com.": {ap.Addr()}}
	ctx := context.Background()

	run := func(b *testing.B, dial func(context.Context, string, string) (net.Conn, error), addr string) {
		b.ReportAllocs()
		for b.Loop() {
			c, err := dial(ctx, "tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	}
	b.Run("literal/plain", func(b *testing.B) {
		run(b, (&net.Dialer{}).DialContext, ap.String())
	})
	b.Run("literal/vetted", func(b *testing.B) {
		run(b, (&Dialer{Allow: []netip.AddrPort{ap}}).DialContext, ap.String())
	})
	b.Run("name-memory-resolver/vetted", func(b *testing.B) {
		run(b, (&Dialer{Allow: []netip.AddrPort{ap}, Resolver: static}).DialContext, nameAddr)
	})
	b.Run("name-local-dns/plain", func(b *testing.B) {
		run(b, (&net.Dialer{Resolver: dnsS.resolver()}).DialContext, nameAddr)
	})
	b.Run("name-local-dns/vetted", func(b *testing.B) {
		run(b, (&Dialer{Allow: []netip.AddrPort{ap}, Resolver: dnsS.resolver()}).DialContext, nameAddr)
	})
}

// BenchmarkVet is the vetting alone: parse, one in-memory lookup, classify.
func BenchmarkVet(b *testing.B) {
	d := &Dialer{Resolver: staticResolver{"www.example.com.": {netip.MustParseAddr(pubV4), netip.MustParseAddr(pubV6)}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.vetHostPort(ctx, "tcp", "www.example.com:443"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	addrs := make([]netip.Addr, len(classifyCases))
	for i, c := range classifyCases {
		addrs[i] = netip.MustParseAddr(c.addr)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		Classify(addrs[i%len(addrs)])
		i++
	}
}
