//go:build linux

package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/test/netns"
)

// TestProxyOwnAddressIntegration: an approved run's CONNECT and
// absolute-form requests to the box's own public address (8.8.4.4 on a dummy
// interface of the test's own network namespace), by literal or by a name
// resolving to it, are refused with 403 by the proxy's production dialer (no
// Local given: the process's rtnetlink watch); the server on that address
// sees only the test's own control connection.
func TestProxyOwnAddressIntegration(t *testing.T) {
	if !netns.Enter(t) {
		return
	}
	netns.AddLink(t, "sbx0")
	netns.AddAddr(t, "sbx0", "8.8.4.4")
	netns.AddAddr(t, "sbx0", "2001:4860:4860::8844")
	r := newRig(t, testGrant(), nil, fakeResolver{
		"self.example.com":  addrs("8.8.4.4"),
		"self6.example.com": addrs("2001:4860:4860::8844"),
	})
	for _, own := range []string{"8.8.4.4", "2001:4860:4860::8844"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(own, "0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		at := netip.MustParseAddrPort(ln.Addr().String())
		// Every accepted connection's peer, in the kernel's accept order.
		peers := make(chan string, 64)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				peers <- c.RemoteAddr().String()
				c.Close()
			}
		}()
		control := func() string { // a plain connect: the server listens
			t.Helper()
			c, err := net.Dial("tcp", at.String())
			if err != nil {
				t.Fatalf("plain connect to %s: %v", at, err)
			}
			defer c.Close()
			return c.LocalAddr().String()
		}
		if first, got := control(), <-peers; got != first {
			t.Fatalf("the server's first connection came from %s, not the control %s", got, first)
		}
		name := "self.example.com"
		if at.Addr().Is6() {
			name = "self6.example.com"
		}
		byName := net.JoinHostPort(name, fmt.Sprint(at.Port()))
		for _, req := range []string{
			fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", at, at),
			fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", byName, byName),
			fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", at, at),
			fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", byName, byName),
		} {
			if code, body := r.raw(req); code != 403 {
				t.Errorf("%q: %d %q, want 403", req, code, body)
			}
		}
		// Accepts come in connection order: anything the proxy had
		// connected comes before this second control.
		last := control()
		for got := range peers {
			if got == last {
				break
			}
			t.Errorf("the server on %s accepted a connection from %s (the proxy's)", at, got)
		}
	}
	if logs := r.logs.String(); !strings.Contains(logs, "an address of this box") {
		t.Errorf("the refusals' log lines do not name the rule:\n%s", logs)
	}
}
