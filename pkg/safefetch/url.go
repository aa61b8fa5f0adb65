package safefetch

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// MaxURLLength bounds a URL before any parsing; longer ones are refused.
const MaxURLLength = 8192

// target is a vetted URL's destination: the ASCII hostname (or canonical IP
// literal) to verify TLS against and send as Host, and the port to dial.
type target struct {
	u       *url.URL   // with Host rewritten to its ASCII form, fragment and userinfo absent
	host    string     // ASCII, lower case, no trailing dot, no brackets
	literal netip.Addr // valid when the host is an IP literal
	port    uint16
}

// idnaProfile maps a Unicode host the way browsers do (UTS #46 with
// transitional processing off) and validates the result as a DNS name, so
// fullwidth digits and other look-alikes become the ASCII the resolver sees,
// and that ASCII is what the checks below judge.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.VerifyDNSLength(true),
	idna.StrictDomainName(false), // underscores appear in real hostnames
)

// parseURL checks a URL as a fetch target: credential-free http or https with
// a hostname or canonical IP literal. It refuses rather than repairs.
func parseURL(raw string) (*target, error) {
	if err := checkRaw(raw); err != nil {
		return nil, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, refusedURL("URL does not parse")
	}
	switch u.Scheme {
	case "http", "https":
	default:
		return nil, refusedURL("scheme %q is not http or https", u.Scheme)
	}
	if u.Opaque != "" {
		return nil, refusedURL("URL has no authority (write scheme://host/)")
	}
	if u.User != nil || strings.Contains(authority(raw), "@") {
		return nil, refusedURL("URL carries credentials (userinfo); credential-free URLs only")
	}
	if u.Host == "" {
		return nil, refusedURL("URL has no host")
	}
	if strings.Contains(authority(raw), "%") {
		return nil, refusedURL("URL host is percent-encoded")
	}
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, refusedURL("port %q is not in 1-65535", p)
		}
		port = uint16(n)
	}
	hostname := u.Hostname()
	var host string
	var lit netip.Addr
	if strings.HasPrefix(u.Host, "[") {
		a, err := netip.ParseAddr(hostname)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return nil, refusedURL("bracketed host %q is not an IPv6 address without zone", hostname)
		}
		host, lit = a.String(), a
	} else {
		host, lit, err = checkHost(hostname)
		if err != nil {
			return nil, err
		}
	}
	v := *u
	v.Fragment, v.RawFragment = "", ""
	v.User = nil
	hp := host
	if lit.Is6() {
		hp = "[" + host + "]"
	}
	if u.Port() != "" {
		hp += ":" + strconv.Itoa(int(port))
	}
	v.Host = hp
	return &target{u: &v, host: host, literal: lit, port: port}, nil
}

// checkRaw bounds a URL or reference and refuses the characters where URL
// parsers disagree: controls, spaces and backslashes (WHATWG reads "\\" as
// "/" in http URLs, so "/\\host" is protocol-relative to a browser and a path
// to Go).
func checkRaw(raw string) error {
	if len(raw) > MaxURLLength {
		return refusedURL("URL is %d bytes; the limit is %d", len(raw), MaxURLLength)
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= 0x20 || c == 0x7f || c == '\\' {
			return refusedURL("URL contains a control character, space or backslash")
		}
	}
	return nil
}

// authority returns the raw authority of an absolute URL, for checks that
// must see what url.Parse has already decoded or split off.
func authority(raw string) string {
	i := strings.Index(raw, "//")
	if i < 0 {
		return ""
	}
	s := raw[i+2:]
	if j := strings.IndexAny(s, "/?#"); j >= 0 {
		s = s[:j]
	}
	return s
}

// reservedSuffixes are names that never denote a public web site (RFC 6761,
// RFC 6762, RFC 7686, RFC 8375, ICANN's .internal). Their addresses would be
// refused anyway; refusing the name keeps the resolver out of it.
var reservedSuffixes = []string{
	"localhost", "local", "internal", "home.arpa", "arpa", "onion", "invalid", "test", "example",
	"localdomain", "lan", "intranet", "corp", "private",
}

// checkHost validates a URL or dial host that is not bracketed. It returns
// the ASCII name (lower case, no trailing dot) or, for a canonical dotted IPv4
// literal, the address. Every other numeric form (decimal 2130706433, octal
// 0177.0.0.1, hex 0x7f.1, short 127.1, a trailing dot 127.0.0.1.) is refused
// outright: such forms are where URL parsers, resolvers and later readers
// disagree, no public site needs one, and the error names what they denote.
func checkHost(h string) (string, netip.Addr, error) {
	if h == "" {
		return "", netip.Addr{}, refusedURL("empty host")
	}
	if len(h) > 255 {
		return "", netip.Addr{}, refusedURL("host is %d bytes; a DNS name is at most 253", len(h))
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Is4() && a.String() == h {
			return h, a, nil
		}
		return "", netip.Addr{}, refusedURL("host %q is an IP address in a non-canonical form (IPv6 needs brackets)", h)
	}
	ascii := h
	if !isASCII(h) || strings.Contains(strings.ToLower(h), "xn--") {
		a, err := idnaProfile.ToASCII(h)
		if err != nil || !utf8.ValidString(h) {
			return "", netip.Addr{}, refusedURL("host is not a valid internationalized domain name")
		}
		// The ASCII form is what gets resolved and sent; it must itself be
		// a valid IDN that maps to itself, or a later reader may differ.
		if again, err := idnaProfile.ToASCII(a); err != nil || again != a {
			return "", netip.Addr{}, refusedURL("host is not a valid internationalized domain name")
		}
		ascii = a
	}
	ascii = strings.ToLower(ascii)
	name := strings.TrimSuffix(ascii, ".")
	if ip, ok := looseIPv4(name); ok {
		return "", netip.Addr{}, refusedURL("host %q is a non-canonical IPv4 form of %s (%s); write the dotted-decimal address", h, ip, Classify(ip))
	}
	if endsInNumber(name) {
		return "", netip.Addr{}, refusedURL("host %q ends in a number but is not an IPv4 address", h)
	}
	if name == "" || len(name) > 253 {
		return "", netip.Addr{}, refusedURL("host %q is not a valid DNS name", h)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return "", netip.Addr{}, refusedURL("host %q is not a valid DNS name", h)
		}
	}
	if len(labels) < 2 {
		// A single label goes through the resolver's search list: an
		// internal name by construction.
		return "", netip.Addr{}, refusedURL("host %q is a single label; a public host name has a dot", h)
	}
	for _, s := range reservedSuffixes {
		if name == s || strings.HasSuffix(name, "."+s) {
			return "", netip.Addr{}, refusedURL("host %q is under the special-use name %q", h, s)
		}
	}
	return name, netip.Addr{}, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func validLabel(l string) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// endsInNumber is the WHATWG URL standard's test: a host whose last label
// (ignoring one trailing dot) is all digits or 0x-hex is parsed as IPv4 by
// browsers, so it can never be a hostname.
func endsInNumber(h string) bool {
	h = strings.TrimSuffix(h, ".")
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if allDigits(last, 10) {
		return true
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		return last == "0x" || last == "0X" || allDigits(last[2:], 16)
	}
	return false
}

// looseIPv4 parses the legacy IPv4 forms of the WHATWG URL standard and
// inet_aton: one to four parts, each decimal, octal (leading 0) or hex (0x),
// the last part filling the remaining bytes. ok is false when s is not such a
// form.
func looseIPv4(s string) (netip.Addr, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		nums[i] = n
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
		v |= n << (8 * (3 - i))
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

func parseIPv4Part(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		p, base = p[2:], 16
		if p == "" {
			return 0, true
		}
	case len(p) >= 2 && p[0] == '0':
		p, base = p[1:], 8
	case p == "":
		return 0, false
	}
	if len(p) > 32 || !allDigits(p, base) {
		return 0, false
	}
	n, err := strconv.ParseUint(p, base, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

func allDigits(s string, base int) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= '0' && c <= '9' && int(c-'0') < base ||
			base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
		if !ok {
			return false
		}
	}
	return true
}

func refusedURL(format string, args ...any) error {
	return &Error{Kind: ErrURL, msg: fmt.Sprintf(format, args...)}
}
