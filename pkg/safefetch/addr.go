package safefetch

import (
	"net/netip"
)

// Class names what an address is, for the one question safefetch asks of it:
// may a fetch on behalf of untrusted input connect there? Only ClassPublic may.
type Class uint8

// The classes. The reference is the IANA IPv4 and IPv6 Special-Purpose Address
// Registries (RFC 6890 and its updates) plus the cloud metadata endpoints that
// sit at addresses those registries do not single out.
const (
	ClassPublic Class = iota
	ClassInvalid
	ClassUnspecified   // 0.0.0.0, ::
	ClassThisNetwork   // 0.0.0.0/8
	ClassLoopback      // 127/8, ::1
	ClassPrivate       // 10/8, 172.16/12, 192.168/16
	ClassSharedCGNAT   // 100.64/10 (RFC 6598)
	ClassLinkLocal     // 169.254/16, fe80::/10
	ClassMetadata      // cloud instance metadata and platform endpoints
	ClassMulticast     // 224/4, ff00::/8
	ClassBroadcast     // 255.255.255.255
	ClassReserved      // 240/4, and IPv6 space outside 2000::/3 not named otherwise
	ClassProtocol      // 192.0.0/24, 2001::/23 IETF protocol assignments
	ClassBenchmarking  // 198.18/15, 2001:2::/48
	ClassDocumentation // 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20
	ClassRelay6to4     // 192.88.99/24 (deprecated 6to4 relay anycast)
	ClassAS112         // 192.31.196/24, 192.175.48/24, 2620:4f:8000::/48 (DNS sinks)
	ClassAMT           // 192.52.193/24, 2001:3::/32
	ClassIPv4Mapped    // ::ffff:0:0/96
	ClassIPv4Compat    // ::/96 (deprecated IPv4-compatible)
	ClassIPv4Translated
	ClassNAT64Local // 64:ff9b:1::/48 (RFC 8215, not globally reachable)
	Class6to4       // 2002::/16
	ClassTeredo     // 2001::/32
	ClassDiscard    // 100::/64
	ClassORCHID     // 2001:10::/28, 2001:20::/28
	ClassUniqueLocal
	ClassSiteLocal // fec0::/10 (deprecated)
	ClassSRv6      // 5f00::/16 (RFC 9602)
	// ClassLocal is a public address of one of this box's own interfaces
	// (ClassifyLocal): a service listening on every interface answers it,
	// over lo, past any firewall.
	ClassLocal
	// ClassLocalUnknown is a public address while this box's own addresses
	// are unknown (ClassifyLocal): it may be one of them, so it is refused.
	ClassLocalUnknown
)

var classNames = [...]string{
	ClassPublic:         "public",
	ClassInvalid:        "invalid",
	ClassUnspecified:    "unspecified",
	ClassThisNetwork:    "this-network",
	ClassLoopback:       "loopback",
	ClassPrivate:        "private",
	ClassSharedCGNAT:    "shared address space (CGNAT)",
	ClassLinkLocal:      "link-local",
	ClassMetadata:       "cloud metadata",
	ClassMulticast:      "multicast",
	ClassBroadcast:      "broadcast",
	ClassReserved:       "reserved",
	ClassProtocol:       "IETF protocol assignment",
	ClassBenchmarking:   "benchmarking",
	ClassDocumentation:  "documentation",
	ClassRelay6to4:      "6to4 relay anycast",
	ClassAS112:          "AS112 DNS sink",
	ClassAMT:            "AMT anycast",
	ClassIPv4Mapped:     "IPv4-mapped IPv6",
	ClassIPv4Compat:     "IPv4-compatible IPv6",
	ClassIPv4Translated: "IPv4-translated IPv6",
	ClassNAT64Local:     "local-use NAT64",
	Class6to4:           "6to4",
	ClassTeredo:         "Teredo",
	ClassDiscard:        "discard-only",
	ClassORCHID:         "ORCHID",
	ClassUniqueLocal:    "unique local (ULA)",
	ClassSiteLocal:      "site-local",
	ClassSRv6:           "SRv6 SID",
	ClassLocal:          "an address of this box",
	ClassLocalUnknown:   "unverified (this box's own addresses are unknown)",
}

func (c Class) String() string {
	if int(c) < len(classNames) && classNames[c] != "" {
		return classNames[c]
	}
	return "unknown"
}

type rangeClass struct {
	p netip.Prefix
	c Class
}

// Metadata endpoints first: several sit inside ranges that would also refuse
// them, but naming them is worth it in a log line; 168.63.129.16 (Azure
// WireServer) is otherwise an ordinary public address and must be listed.
var metadataAddrs = []rangeClass{
	{netip.MustParsePrefix("169.254.169.254/32"), ClassMetadata}, // AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, Hetzner
	{netip.MustParsePrefix("169.254.169.253/32"), ClassMetadata}, // AWS VPC DNS
	{netip.MustParsePrefix("169.254.169.123/32"), ClassMetadata}, // AWS time sync
	{netip.MustParsePrefix("169.254.170.2/32"), ClassMetadata},   // AWS ECS task metadata
	{netip.MustParsePrefix("169.254.170.23/32"), ClassMetadata},  // AWS EKS pod identity
	{netip.MustParsePrefix("169.254.0.23/32"), ClassMetadata},    // Tencent Cloud
	{netip.MustParsePrefix("100.100.100.200/32"), ClassMetadata}, // Alibaba Cloud
	{netip.MustParsePrefix("168.63.129.16/32"), ClassMetadata},   // Azure WireServer (a public address)
	{netip.MustParsePrefix("192.0.0.192/32"), ClassMetadata},     // Oracle Cloud (classic)
	{netip.MustParsePrefix("fd00:ec2::254/128"), ClassMetadata},  // AWS IMDS over IPv6
	{netip.MustParsePrefix("fd00:ec2::253/128"), ClassMetadata},  // AWS VPC DNS over IPv6
	{netip.MustParsePrefix("fd00:ec2::123/128"), ClassMetadata},  // AWS time sync over IPv6
	{netip.MustParsePrefix("fd00:ec2::23/128"), ClassMetadata},   // AWS EKS pod identity over IPv6
}

// IPv4: everything is public except these (IANA IPv4 special-purpose registry,
// with its "globally reachable" exceptions refused too: none serves the web).
var v4Ranges = []rangeClass{
	{netip.MustParsePrefix("0.0.0.0/32"), ClassUnspecified},
	{netip.MustParsePrefix("0.0.0.0/8"), ClassThisNetwork},
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassSharedCGNAT},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate},
	{netip.MustParsePrefix("192.0.0.0/24"), ClassProtocol},
	{netip.MustParsePrefix("192.0.2.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("192.31.196.0/24"), ClassAS112},
	{netip.MustParsePrefix("192.52.193.0/24"), ClassAMT},
	{netip.MustParsePrefix("192.88.99.0/24"), ClassRelay6to4},
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate},
	{netip.MustParsePrefix("192.175.48.0/24"), ClassAS112},
	{netip.MustParsePrefix("198.18.0.0/15"), ClassBenchmarking},
	{netip.MustParsePrefix("198.51.100.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("203.0.113.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("233.252.0.0/24"), ClassDocumentation}, // MCAST-TEST-NET
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), ClassBroadcast},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},
}

// IPv6: only global unicast 2000::/3 (and NAT64 of a public IPv4) can be
// public; inside it, these are not. Order matters: more specific first.
var v6Ranges = []rangeClass{
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("::ffff:0:0/96"), ClassIPv4Mapped},
	{netip.MustParsePrefix("::ffff:0:0:0/96"), ClassIPv4Translated}, // RFC 2765 SIIT
	{netip.MustParsePrefix("::/96"), ClassIPv4Compat},
	{netip.MustParsePrefix("64:ff9b:1::/48"), ClassNAT64Local},
	{netip.MustParsePrefix("100::/64"), ClassDiscard},
	{netip.MustParsePrefix("2001:2::/48"), ClassBenchmarking},
	{netip.MustParsePrefix("2001:3::/32"), ClassAMT},
	{netip.MustParsePrefix("2001:10::/28"), ClassORCHID},
	{netip.MustParsePrefix("2001:20::/28"), ClassORCHID},
	{netip.MustParsePrefix("2001:db8::/32"), ClassDocumentation},
	{netip.MustParsePrefix("2001::/32"), ClassTeredo},
	{netip.MustParsePrefix("2001::/23"), ClassProtocol},
	{netip.MustParsePrefix("2002::/16"), Class6to4},
	{netip.MustParsePrefix("2620:4f:8000::/48"), ClassAS112},
	{netip.MustParsePrefix("3fff::/20"), ClassDocumentation},
	{netip.MustParsePrefix("5f00::/16"), ClassSRv6},
	{netip.MustParsePrefix("fc00::/7"), ClassUniqueLocal},
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
	{netip.MustParsePrefix("fec0::/10"), ClassSiteLocal},
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
}

var (
	nat64WKP     = netip.MustParsePrefix("64:ff9b::/96")
	globalUnicst = netip.MustParsePrefix("2000::/3")
)

// Classify says what a is. Only ClassPublic is fit to connect to on behalf of
// untrusted input. Decisions beyond the registries, strictest first:
//   - IPv4-mapped, IPv4-compatible and IPv4-translated IPv6 are refused whatever
//     they embed: no resolver has a reason to answer them, and the kernel would
//     turn them into IPv4 connections behind the classification's back.
//   - 6to4 (2002::/16) and Teredo (2001::/32) are refused outright: they are
//     deprecated tunnels whose relays we cannot vet, and they embed IPv4
//     addresses (Embedded reports which, for a log line).
//   - NAT64 64:ff9b::/96 is what DNS64 hands an IPv6-only host for every IPv4
//     site, so it is public exactly when the IPv4 address it embeds is.
//   - Any address with a zone is refused (only link-local and multicast have one).
func Classify(a netip.Addr) Class {
	if !a.IsValid() {
		return ClassInvalid
	}
	if a.Zone() != "" {
		return ClassLinkLocal
	}
	for _, r := range metadataAddrs {
		if r.p.Contains(a) {
			return r.c
		}
	}
	if a.Is4() {
		for _, r := range v4Ranges {
			if r.p.Contains(a) {
				return r.c
			}
		}
		return ClassPublic
	}
	if nat64WKP.Contains(a) {
		return Classify(embeddedLow32(a))
	}
	for _, r := range v6Ranges {
		if r.p.Contains(a) {
			return r.c
		}
	}
	if !globalUnicst.Contains(a) {
		return ClassReserved
	}
	return ClassPublic
}

// Public reports whether a may be connected to on behalf of untrusted input.
func Public(a netip.Addr) bool { return Classify(a) == ClassPublic }

// Embedded returns the IPv4 address an IPv6 transition form carries
// (IPv4-mapped, -compatible, -translated, NAT64, 6to4, Teredo client), for log
// lines and tests; ok is false for any other address.
func Embedded(a netip.Addr) (v4 netip.Addr, ok bool) {
	if !a.Is6() || a.Zone() != "" {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case a.Is4In6(), nat64WKP.Contains(a):
		return embeddedLow32(a), true
	case netip.MustParsePrefix("::ffff:0:0:0/96").Contains(a):
		return embeddedLow32(a), true
	case netip.MustParsePrefix("::/96").Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return embeddedLow32(a), true
	case netip.MustParsePrefix("2002::/16").Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case netip.MustParsePrefix("2001::/32").Contains(a):
		// Teredo: the client's address is the last 32 bits, inverted.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

func embeddedLow32(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
}
