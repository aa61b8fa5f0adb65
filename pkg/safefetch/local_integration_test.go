//go:build linux

package safefetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/test/netns"
)

// The addresses these tests give their own interfaces: public to the static
// classifier (Google's second resolver), and present only inside the test's
// own network namespace, which has no route anywhere else.
const (
	ownV4 = "8.8.4.4"
	ownV6 = "2001:4860:4860::8844"
)

// countingServer is an HTTP server on addr that counts the connections it
// accepts.
func countingServer(t *testing.T, addr string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	n := &atomic.Int64{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "the box's own service") }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				n.Add(1)
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String()), n
}

// TestOwnAddressIntegration: with a public-looking address on an interface
// of the box (a dummy interface in the test's own network namespace) and a
// server listening on it, the production dialer and fetcher (no Local given:
// the process's rtnetlink watch) refuse it, by literal and by a name that
// resolves to it, while a plain connect shows the server answers and an
// exact Allow entry still reaches it.
func TestOwnAddressIntegration(t *testing.T) {
	if !netns.Enter(t) {
		return
	}
	w, ok := SystemLocalAddrs(nil).(*AddrWatch)
	if !ok {
		t.Fatalf("SystemLocalAddrs is %T, not a watch", SystemLocalAddrs(nil))
	}
	netns.AddLink(t, "sbx0")
	netns.AddAddr(t, "sbx0", ownV4)
	netns.AddAddr(t, "sbx0", ownV6)
	waitState(t, w, "the new addresses", func(s *addrState) bool { return has(ownV4)(s) && has(ownV6)(s) })

	names := resolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "self.example.com.":
			return []netip.Addr{netip.MustParseAddr(ownV4)}, nil
		case "self6.example.com.":
			return []netip.Addr{netip.MustParseAddr(ownV6)}, nil
		}
		return nil, errors.New("no such name")
	})
	for _, own := range []string{ownV4, ownV6} {
		ap, accepted := countingServer(t, own)
		c, err := net.Dial("tcp", ap.String()) // the control: the server answers
		if err != nil {
			t.Fatalf("plain connect to %s: %v", ap, err)
		}
		c.Close()

		d := &Dialer{Resolver: names}
		f := &Fetcher{Dialer: d}
		name := "self.example.com"
		if netip.MustParseAddr(own).Is6() {
			name = "self6.example.com"
		}
		for _, target := range []string{ap.String(), net.JoinHostPort(name, fmt.Sprint(ap.Port()))} {
			c, err := d.DialContext(context.Background(), "tcp", target)
			if err == nil {
				c.Close()
				t.Errorf("DialContext(%s) reached the box's own address", target)
			} else if !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), "an address of this box") {
				t.Errorf("DialContext(%s) = %v, want the own-address refusal", target, err)
			}
			u := "http://" + target + "/"
			if _, err := f.Fetch(context.Background(), u, DefaultOptions()); !errors.Is(err, ErrAddress) {
				t.Errorf("Fetch(%s) = %v, want the own-address refusal", u, err)
			}
		}
		allowed := &Fetcher{Dialer: &Dialer{Allow: []netip.AddrPort{ap}}}
		res, err := allowed.Fetch(context.Background(), "http://"+ap.String()+"/", DefaultOptions())
		if err != nil || string(res.Body) != "the box's own service" {
			t.Errorf("an exact Allow entry for %s: %v", ap, err)
		}
		// The control and the allowed fetch: nothing else got through.
		if n := accepted.Load(); n != 2 {
			t.Errorf("the server on %s accepted %d connections, want 2 (control, Allow)", ap, n)
		}
	}

	netns.IP(t, "addr", "del", ownV4+"/32", "dev", "sbx0")
	netns.IP(t, "-6", "addr", "del", ownV6+"/128", "dev", "sbx0")
	waitState(t, w, "the addresses removed", func(s *addrState) bool { return hasNot(ownV4)(s) && hasNot(ownV6)(s) })
	for _, a := range []string{ownV4, ownV6} {
		if c := ClassifyLocal(netip.MustParseAddr(a), nil); c != ClassPublic {
			t.Errorf("%s after its removal is %s, want public again", a, c)
		}
	}
}

// TestAddrWatchIntegration: the watch follows the kernel, through its
// publication channel (never a sleep): addresses added and removed, one
// address on two interfaces, an interface deleted with its addresses.
func TestAddrWatchIntegration(t *testing.T) {
	if !netns.Enter(t) {
		return
	}
	w, err := WatchLocalAddrs(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !contains(t, w, "127.0.0.1") || !contains(t, w, "::1") {
		t.Fatal("lo's addresses missing from the first dump")
	}
	netns.AddLink(t, "sbx0")
	for _, a := range []string{ownV4, ownV6} {
		dev := []string{"dev", "sbx0", "nodad"}
		fam, plen := "-6", "/128"
		if netip.MustParseAddr(a).Is4() {
			fam, plen, dev = "-4", "/32", dev[:2]
		}
		netns.IP(t, append([]string{fam, "addr", "add", a + plen}, dev...)...)
		waitState(t, w, a+" added", has(a))
		// On lo as well; dropped from sbx0, it stays (lo carries it).
		netns.IP(t, fam, "addr", "add", a+plen, "dev", "lo")
		netns.IP(t, fam, "addr", "del", a+plen, "dev", "sbx0")
		marker := "9.9.9.9"
		if fam == "-6" {
			marker = "2620:fe::9"
		}
		netns.IP(t, fam, "addr", "add", marker+plen, "dev", "sbx0")
		waitState(t, w, "the marker after the deletion", has(marker)) // events arrive in order
		if !contains(t, w, a) {
			t.Errorf("%s left the set while lo still carries it", a)
		}
		netns.IP(t, fam, "addr", "del", a+plen, "dev", "lo")
		waitState(t, w, a+" removed", hasNot(a))
	}
	// An interface deleted takes its addresses with it.
	netns.AddLink(t, "sbx1")
	netns.IP(t, "addr", "add", "1.0.0.1/32", "dev", "sbx1")
	waitState(t, w, "1.0.0.1 added", has("1.0.0.1"))
	netns.IP(t, "link", "del", "sbx1")
	waitState(t, w, "1.0.0.1 gone with its interface", hasNot("1.0.0.1"))
	if n := w.resyncs.Load(); n != 0 {
		t.Errorf("%d full dumps after dropped events, want none here", n)
	}
}

// TestAddrWatchOverflowIntegration: events that overflow the subscription's
// buffer before the watch reads them are recovered by a full dump (ENOBUFS).
func TestAddrWatchOverflowIntegration(t *testing.T) {
	if !netns.Enter(t) {
		return
	}
	src, err := openSubscription(1) // the kernel's minimum buffer
	if err != nil {
		t.Fatal(err)
	}
	netns.AddLink(t, "sbx0")
	var batch strings.Builder
	const n = 400
	for i := range n {
		fmt.Fprintf(&batch, "addr add 11.0.%d.%d/32 dev sbx0\n", i/250, 1+i%250)
	}
	addBatch(t, batch.String())
	w, err := newAddrWatch(slog.New(slog.DiscardHandler), src, dumpAddrs)
	if err != nil {
		src.close()
		t.Fatal(err)
	}
	defer w.Close()
	netns.IP(t, "addr", "add", "9.9.9.9/32", "dev", "sbx0")
	waitState(t, w, "the resync and the marker", func(s *addrState) bool { return w.resyncs.Load() > 0 && has("9.9.9.9")(s) })
	for i := range n {
		if a := fmt.Sprintf("11.0.%d.%d", i/250, 1+i%250); !contains(t, w, a) {
			t.Fatalf("%s missing after the resync", a)
		}
	}
}

func addBatch(t *testing.T, cmds string) {
	t.Helper()
	f := t.TempDir() + "/batch"
	if err := os.WriteFile(f, []byte(cmds), 0o600); err != nil {
		t.Fatal(err)
	}
	netns.IP(t, "-batch", f)
}

// TestSubscriptionDrainIntegration: after the kernel reported dropped events
// (ENOBUFS) it drops further ones silently until the queue has been emptied
// once; drain empties it, so an address added after it is not lost.
func TestSubscriptionDrainIntegration(t *testing.T) {
	if !netns.Enter(t) {
		return
	}
	src, err := openSubscription(1) // the kernel's minimum buffer
	if err != nil {
		t.Fatal(err)
	}
	defer src.close()
	netns.AddLink(t, "sbx0")
	var batch strings.Builder
	for i := range 200 {
		fmt.Fprintf(&batch, "addr add 11.0.0.%d/32 dev sbx0\n", 1+i)
	}
	addBatch(t, batch.String())
	buf := make([]byte, 1<<16)
	if _, _, err := src.recv(buf); !errors.Is(err, unix.ENOBUFS) {
		t.Fatalf("first read after the flood: %v, want ENOBUFS", err)
	}
	if err := src.drain(); err != nil {
		t.Fatal(err)
	}
	netns.IP(t, "addr", "add", "9.9.9.9/32", "dev", "sbx0")
	n, fromKernel, err := src.recv(buf)
	if err != nil || !fromKernel {
		t.Fatalf("read after the marker: %v (from the kernel: %v)", err, fromKernel)
	}
	m := map[ifAddr]struct{}{}
	if _, err := applyAddrMessages(m, buf[:n], false); err != nil {
		t.Fatal(err)
	}
	ifi, err := net.InterfaceByName("sbx0")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m[ifAddr{index: uint32(ifi.Index), addr: netip.MustParseAddr("9.9.9.9")}]; len(m) != 1 || !ok {
		var got []string
		for k := range m {
			got = append(got, k.addr.String())
		}
		t.Errorf("after the drain the next event is %v, want the marker 9.9.9.9 (lost while the socket stayed congested?)", got)
	}
}
