package safefetch

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseURL: whatever the input, an accepted URL is credential-free
// http(s) with a plain ASCII hostname or canonical literal, its normalized
// form parses back to the same target (in our parser and in net/url), and
// no numeric host form ever passes as a name.
func FuzzParseURL(f *testing.F) {
	for _, tc := range urlCases {
		f.Add(tc.raw)
	}
	for _, s := range []string{"http://a.b/", "https://[::1]:1/", "http://1.2.3.4/", "http://x.example.com:65535/?q#f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		tg, err := parseURL(raw)
		if err != nil {
			return
		}
		if s := tg.u.Scheme; s != "http" && s != "https" {
			t.Fatalf("%q accepted with scheme %q", raw, s)
		}
		if tg.u.User != nil || tg.port == 0 || tg.host == "" || tg.u.Fragment != "" {
			t.Fatalf("%q accepted as %+v", raw, tg)
		}
		if tg.literal.IsValid() {
			if tg.literal.Zone() != "" || tg.literal.String() != tg.host {
				t.Fatalf("%q literal %s host %s", raw, tg.literal, tg.host)
			}
		} else {
			for i := 0; i < len(tg.host); i++ {
				c := tg.host[i]
				if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
					t.Fatalf("%q accepted host %q", raw, tg.host)
				}
			}
			if _, ok := looseIPv4(tg.host); ok || endsInNumber(tg.host) {
				t.Fatalf("%q: numeric host %q passed as a name", raw, tg.host)
			}
		}
		again, err := parseURL(tg.u.String())
		if err != nil {
			t.Fatalf("normalized %q of %q refused: %v", tg.u, raw, err)
		}
		if again.host != tg.host || again.port != tg.port || again.u.String() != tg.u.String() {
			t.Fatalf("normalization not stable: %q -> %q -> %q", raw, tg.u, again.u)
		}
		std, err := url.Parse(tg.u.String())
		if err != nil || strings.Trim(std.Hostname(), "[]") != tg.host {
			t.Fatalf("net/url reads %q as host %q, we vetted %q", tg.u, std.Hostname(), tg.host)
		}
	})
}

// FuzzClassify: nothing the standard library calls special is public; an
// IPv4 address and its NAT64 form agree; mapped and zoned forms never pass.
func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases {
		a := netip.MustParseAddr(tc.addr).WithZone("")
		f.Add(a.AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		checkOracle(t, a)
		c := Classify(a)
		if a.Is4In6() && c == ClassPublic {
			t.Fatalf("mapped %s public", a)
		}
		if a.Is6() && c == ClassPublic && !globalUnicst.Contains(a) && !nat64WKP.Contains(a) {
			t.Fatalf("%s public outside 2000::/3", a)
		}
		if a.Is4() {
			v4 := a.As4()
			n := netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 10: 0, 11: 0, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
			if Public(n) != Public(a) {
				t.Fatalf("%s is %s but its NAT64 form %s is %s", a, c, n, Classify(n))
			}
			if m := netip.AddrFrom16(a.As16()); Public(m) {
				t.Fatalf("mapped %s public", m)
			}
		}
		if z := a.WithZone("x"); a.Is6() && Public(z) {
			t.Fatalf("zoned %s public", z)
		}
	})
}

// FuzzCheckHost: any string that the legacy IPv4 parsers (WHATWG, inet_aton)
// would read as an address is either the canonical dotted form or refused.
func FuzzCheckHost(f *testing.F) {
	for _, s := range []string{"127.1", "0x7f.1", "2130706433", "0177.0.0.1", "www.example.com", "1.2.3.4", "１２７.１", "a.0x", "0x.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		name, lit, err := checkHost(h)
		if err != nil {
			return
		}
		if lit.IsValid() {
			if !lit.Is4() || lit.String() != h {
				t.Fatalf("%q accepted as literal %s", h, lit)
			}
			return
		}
		if ip, ok := looseIPv4(name); ok {
			t.Fatalf("%q accepted as name %q, which denotes %s", h, name, ip)
		}
		if ip, ok := looseIPv4(strings.ToLower(h)); ok {
			t.Fatalf("%q accepted though it denotes %s", h, ip)
		}
	})
}
