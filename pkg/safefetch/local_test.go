package safefetch

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// fakeLocal is a hand-written LocalAddrs: a fixed set, or a fixed error.
type fakeLocal struct {
	set map[netip.Addr]bool
	err error
}

func localOf(addrs ...string) *fakeLocal {
	f := &fakeLocal{set: map[netip.Addr]bool{}}
	for _, a := range addrs {
		f.set[netip.MustParseAddr(a)] = true
	}
	return f
}

func (f *fakeLocal) Contains(a netip.Addr) (bool, error) {
	if f.err != nil {
		return false, f.err
	}
	return f.set[a], nil
}

func TestClassifyLocal(t *testing.T) {
	box := localOf("8.8.4.4", "2001:4860:4860::8844", "10.0.0.7", "127.0.0.1", "fe80::1")
	unknown := &fakeLocal{err: errors.New("netlink: gone")}
	cases := []struct {
		addr  string
		local LocalAddrs
		want  Class
	}{
		{"8.8.4.4", box, ClassLocal},
		{"2001:4860:4860::8844", box, ClassLocal},
		{"64:ff9b::808:404", box, ClassLocal}, // NAT64 of the box's own IPv4
		{"8.8.8.8", box, ClassPublic},
		{"2001:4860:4860::8888", box, ClassPublic},
		{"64:ff9b::808:808", box, ClassPublic},
		// the static class wins where it refuses already: a better log line
		{"10.0.0.7", box, ClassPrivate},
		{"127.0.0.1", box, ClassLoopback},
		{"fe80::1", box, ClassLinkLocal},
		{"169.254.169.254", box, ClassMetadata},
		// unknown set: every public address is refused, the rest keep their class
		{"8.8.8.8", unknown, ClassLocalUnknown},
		{"2001:4860:4860::8888", unknown, ClassLocalUnknown},
		{"64:ff9b::808:808", unknown, ClassLocalUnknown},
		{"10.0.0.7", unknown, ClassPrivate},
		{"::ffff:8.8.4.4", unknown, ClassIPv4Mapped},
		{"8.8.4.4", localOf(), ClassPublic},
	}
	for _, tc := range cases {
		a := netip.MustParseAddr(tc.addr)
		if got := ClassifyLocal(a, tc.local); got != tc.want {
			t.Errorf("ClassifyLocal(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// TestDialerRefusesOwnAddress: a literal or a name resolving to the box's own
// public address is refused before any dial, as is every public address while
// the set is unknown; an exact Allow entry still connects (the operator's
// word), and other public addresses are unaffected.
func TestDialerRefusesOwnAddress(t *testing.T) {
	e := newEnv(t)
	e.d.Local = localOf(pubV4, pubV6)
	e.dns.set("self.example.com", []string{pubV4})
	e.dns.set("self6.example.com", []string{pub2V4, pubV6})
	cases := []struct{ addr, in string }{
		{pubV4 + ":80", pubV4 + ":80 is an address of this box"},
		{"[" + pubV6 + "]:443", "is an address of this box"},
		{"self.example.com:80", "self.example.com resolves to " + pubV4 + ":80, an address of this box"},
		{"self6.example.com:80", "an address of this box"}, // one own address among public ones
		{"[64:ff9b::5db8:d822]:80", "an address of this box"},
	}
	for _, tc := range cases {
		c, err := e.d.DialContext(context.Background(), "tcp", tc.addr)
		if err == nil {
			c.Close()
			t.Errorf("DialContext(%s) connected to the box's own address", tc.addr)
			continue
		}
		if !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("DialContext(%s) = %v, want ErrAddress containing %q", tc.addr, err, tc.in)
		}
	}
	if _, err := e.f.Fetch(context.Background(), "http://self.example.com/", DefaultOptions()); !errors.Is(err, ErrAddress) {
		t.Errorf("Fetch of a name resolving to the box: %v", err)
	}
	if _, err := e.f.AssertPublicURL(context.Background(), "http://"+pubV4+"/"); !errors.Is(err, ErrAddress) {
		t.Errorf("AssertPublicURL of the box's own address: %v", err)
	}
	if d := e.takeDialed(); len(d) != 0 {
		t.Errorf("refused dials reached the seam: %v", d)
	}
	if res, err := e.f.Fetch(context.Background(), "http://pub2.example.com/", DefaultOptions()); err != nil || string(res.Body) != "hello" {
		t.Errorf("another public address: %v", err)
	}

	e.d.Allow = []netip.AddrPort{netip.MustParseAddrPort(pubV4 + ":80")}
	c, err := e.d.DialContext(context.Background(), "tcp", pubV4+":80")
	if err != nil {
		t.Errorf("an exact Allow entry for the box's own address: %v", err)
	} else {
		c.Close()
	}
	if c, err := e.d.DialContext(context.Background(), "tcp", pubV4+":443"); err == nil {
		c.Close()
		t.Error("the Allow entry opened another port of the box's own address")
	}

	e.d.Allow = nil
	e.d.Local = &fakeLocal{err: errors.Join(errLocalUnknown, errors.New("netlink: test"))}
	e.takeDialed()
	for _, a := range []string{"pub2.example.com:80", pubV4 + ":80", "[" + pubV6 + "]:80"} {
		c, err := e.d.DialContext(context.Background(), "tcp", a)
		if err == nil {
			c.Close()
			t.Errorf("DialContext(%s) connected while the box's addresses are unknown", a)
		} else if !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), "own addresses are unknown") {
			t.Errorf("DialContext(%s) = %v, want the unknown-set refusal", a, err)
		}
	}
	if d := e.takeDialed(); len(d) != 0 {
		t.Errorf("dials with an unknown set reached the seam: %v", d)
	}
}

// TestUnknownAddrsFailClosed: what SystemLocalAddrs holds when the watch
// cannot start answers every question with its error.
func TestUnknownAddrsFailClosed(t *testing.T) {
	u := unknownAddrs{err: errLocalUnknown}
	if ok, err := u.Contains(netip.MustParseAddr("8.8.8.8")); ok || err == nil {
		t.Errorf("Contains = %v, %v; want an error", ok, err)
	}
	if c := ClassifyLocal(netip.MustParseAddr("8.8.8.8"), u); c != ClassLocalUnknown {
		t.Errorf("class %s, want %s", c, ClassLocalUnknown)
	}
}
