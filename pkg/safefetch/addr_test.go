package safefetch

import (
	"net/netip"
	"testing"
)

// classifyCases covers every range of the IANA special-purpose registries,
// both edges of the larger ones, the metadata endpoints, and transition forms
// embedding public and non-public IPv4.
var classifyCases = []struct {
	addr string
	want Class
}{
	// public
	{"8.8.8.8", ClassPublic},
	{"1.1.1.1", ClassPublic},
	{"93.184.216.34", ClassPublic},
	{"9.255.255.255", ClassPublic},
	{"11.0.0.0", ClassPublic},
	{"100.63.255.255", ClassPublic},
	{"100.128.0.0", ClassPublic},
	{"126.255.255.255", ClassPublic},
	{"128.0.0.0", ClassPublic},
	{"169.253.255.255", ClassPublic},
	{"169.255.0.0", ClassPublic},
	{"172.15.255.255", ClassPublic},
	{"172.32.0.0", ClassPublic},
	{"192.0.1.255", ClassPublic},
	{"192.0.3.0", ClassPublic},
	{"192.167.255.255", ClassPublic},
	{"192.169.0.0", ClassPublic},
	{"198.17.255.255", ClassPublic},
	{"198.20.0.0", ClassPublic},
	{"223.255.255.255", ClassPublic},
	{"2606:4700:4700::1111", ClassPublic},
	{"2001:4860:4860::8888", ClassPublic},
	{"2a00:1450:4001:80b::200e", ClassPublic},
	{"2001:200::1", ClassPublic}, // just above 2001::/23
	{"64:ff9b::808:808", ClassPublic},
	{"64:ff9b::1.1.1.1", ClassPublic},
	// unspecified, this network
	{"0.0.0.0", ClassUnspecified},
	{"0.0.0.1", ClassThisNetwork},
	{"0.255.255.255", ClassThisNetwork},
	{"::", ClassUnspecified},
	// loopback
	{"127.0.0.1", ClassLoopback},
	{"127.0.0.0", ClassLoopback},
	{"127.255.255.255", ClassLoopback},
	{"127.1.2.3", ClassLoopback},
	{"::1", ClassLoopback},
	// private
	{"10.0.0.0", ClassPrivate},
	{"10.255.255.255", ClassPrivate},
	{"172.16.0.0", ClassPrivate},
	{"172.31.255.255", ClassPrivate},
	{"192.168.0.1", ClassPrivate},
	{"192.168.255.255", ClassPrivate},
	// CGNAT
	{"100.64.0.0", ClassSharedCGNAT},
	{"100.127.255.255", ClassSharedCGNAT},
	// link-local
	{"169.254.0.1", ClassLinkLocal},
	{"169.254.255.255", ClassLinkLocal},
	{"fe80::1", ClassLinkLocal},
	{"febf:ffff::1", ClassLinkLocal},
	{"fe80::1%eth0", ClassLinkLocal},
	// metadata
	{"169.254.169.254", ClassMetadata},
	{"169.254.169.253", ClassMetadata},
	{"169.254.169.123", ClassMetadata},
	{"169.254.170.2", ClassMetadata},
	{"169.254.170.23", ClassMetadata},
	{"169.254.0.23", ClassMetadata},
	{"100.100.100.200", ClassMetadata},
	{"168.63.129.16", ClassMetadata},
	{"192.0.0.192", ClassMetadata},
	{"fd00:ec2::254", ClassMetadata},
	{"fd00:ec2::253", ClassMetadata},
	{"fd00:ec2::123", ClassMetadata},
	{"fd00:ec2::23", ClassMetadata},
	{"64:ff9b::a9fe:a9fe", ClassMetadata}, // NAT64 of 169.254.169.254
	// multicast, broadcast, reserved
	{"224.0.0.1", ClassMulticast},
	{"239.255.255.255", ClassMulticast},
	{"ff02::1", ClassMulticast},
	{"ff05::1:3", ClassMulticast},
	{"ff01::1", ClassMulticast},
	{"255.255.255.255", ClassBroadcast},
	{"240.0.0.1", ClassReserved},
	{"255.255.255.254", ClassReserved},
	// IETF protocol assignments, AS112, AMT, 6to4 relay
	{"192.0.0.0", ClassProtocol},
	{"192.0.0.8", ClassProtocol},
	{"192.0.0.9", ClassProtocol},
	{"192.0.0.170", ClassProtocol},
	{"192.0.0.255", ClassProtocol},
	{"192.31.196.1", ClassAS112},
	{"192.175.48.1", ClassAS112},
	{"2620:4f:8000::1", ClassAS112},
	{"192.52.193.1", ClassAMT},
	{"2001:3::1", ClassAMT},
	{"192.88.99.1", ClassRelay6to4},
	{"2001:1::1", ClassProtocol},
	{"2001:1::2", ClassProtocol},
	{"2001:4:112::1", ClassProtocol},
	{"2001:1ff:ffff::1", ClassProtocol},
	// benchmarking
	{"198.18.0.0", ClassBenchmarking},
	{"198.19.255.255", ClassBenchmarking},
	{"2001:2::1", ClassBenchmarking},
	{"2001:2:0:ffff::1", ClassBenchmarking},
	// documentation
	{"192.0.2.1", ClassDocumentation},
	{"198.51.100.7", ClassDocumentation},
	{"203.0.113.255", ClassDocumentation},
	{"233.252.0.5", ClassDocumentation},
	{"2001:db8::1", ClassDocumentation},
	{"2001:db8:ffff:ffff::1", ClassDocumentation},
	{"3fff::1", ClassDocumentation},
	{"3fff:fff::1", ClassDocumentation},
	// IPv6 transition forms
	{"::ffff:127.0.0.1", ClassIPv4Mapped},
	{"::ffff:8.8.8.8", ClassIPv4Mapped}, // refused whatever it embeds
	{"::ffff:169.254.169.254", ClassIPv4Mapped},
	{"::ffff:0:7f00:1", ClassIPv4Translated},
	{"::127.0.0.1", ClassIPv4Compat},
	{"::8.8.8.8", ClassIPv4Compat},
	{"::2", ClassIPv4Compat},
	{"64:ff9b::7f00:1", ClassLoopback},     // NAT64 of 127.0.0.1
	{"64:ff9b::10.0.0.1", ClassPrivate},    // NAT64 of 10.0.0.1
	{"64:ff9b::192.168.1.1", ClassPrivate}, // NAT64 of 192.168.1.1
	{"64:ff9b::100.64.0.1", ClassSharedCGNAT},
	{"64:ff9b::0.0.0.0", ClassUnspecified},
	{"64:ff9b:1::808:808", ClassNAT64Local},
	{"64:ff9b:1:ffff::1", ClassNAT64Local},
	{"2002:7f00:1::1", Class6to4},
	{"2002:808:808::1", Class6to4},
	{"2002:a9fe:a9fe::", Class6to4},
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", ClassTeredo},
	{"2001::1", ClassTeredo},
	// other IPv6 special space
	{"100::1", ClassDiscard},
	{"100::ffff:ffff:ffff:ffff", ClassDiscard},
	{"2001:10::1", ClassORCHID},
	{"2001:20::1", ClassORCHID},
	{"2001:2f:ffff::1", ClassORCHID},
	{"fc00::1", ClassUniqueLocal},
	{"fd12:3456:789a::1", ClassUniqueLocal},
	{"fdff:ffff::1", ClassUniqueLocal},
	{"fec0::1", ClassSiteLocal},
	{"feff::1", ClassSiteLocal},
	{"5f00::1", ClassSRv6},
	{"100:0:0:1::1", ClassReserved}, // outside 100::/64 and outside 2000::/3
	{"1::1", ClassReserved},
	{"4000::1", ClassReserved},
	{"e000::1", ClassReserved},
	{"64:ff9a::1", ClassReserved},
	{"::ffff:ffff:ffff:ffff", ClassReserved},
}

func TestClassify(t *testing.T) {
	for _, tc := range classifyCases {
		a, err := netip.ParseAddr(tc.addr)
		if err != nil {
			t.Fatalf("bad case %q: %v", tc.addr, err)
		}
		if got := Classify(a); got != tc.want {
			t.Errorf("Classify(%s) = %s, want %s", tc.addr, got, tc.want)
		}
		if got := Public(a); got != (tc.want == ClassPublic) {
			t.Errorf("Public(%s) = %v", tc.addr, got)
		}
	}
	if got := Classify(netip.Addr{}); got != ClassInvalid {
		t.Errorf("Classify(zero) = %s, want invalid", got)
	}
}

func TestClassNamesComplete(t *testing.T) {
	for c := ClassPublic; c <= ClassLocalUnknown; c++ {
		if c.String() == "unknown" {
			t.Errorf("class %d has no name", c)
		}
	}
	if Class(200).String() != "unknown" {
		t.Error("out-of-range class has a name")
	}
}

func TestEmbedded(t *testing.T) {
	cases := []struct{ in, want string }{
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"::ffff:0:a00:1", "10.0.0.1"},
		{"::10.0.0.1", "10.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "169.254.169.254"},
		{"2002:c0a8:101::1", "192.168.1.1"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"}, // Teredo client, inverted
		{"2606:4700::1", ""},
		{"::1", ""},
		{"8.8.8.8", ""},
	}
	for _, tc := range cases {
		got, ok := Embedded(netip.MustParseAddr(tc.in))
		if tc.want == "" {
			if ok {
				t.Errorf("Embedded(%s) = %s, want none", tc.in, got)
			}
			continue
		}
		if !ok || got.String() != tc.want {
			t.Errorf("Embedded(%s) = %s,%v, want %s", tc.in, got, ok, tc.want)
		}
	}
}

// TestClassifyAgreesWithNetip checks, over every /8 and many addresses,
// that nothing the standard library calls special is public here.
func TestClassifyAgreesWithNetip(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		a := netip.AddrFrom4([4]byte{byte(i >> 8), byte(i), byte(i * 7), byte(i * 13)})
		checkOracle(t, a)
		var b [16]byte
		b[0], b[1], b[2], b[15] = byte(i>>8), byte(i), byte(i*3), byte(i)
		checkOracle(t, netip.AddrFrom16(b))
	}
}

func checkOracle(t *testing.T, a netip.Addr) {
	t.Helper()
	special := a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsMulticast() || a.IsUnspecified() || a.IsInterfaceLocalMulticast() || a.Is4In6() || !a.IsGlobalUnicast()
	if special && Public(a) {
		t.Fatalf("%s is special to netip but public here (%s)", a, Classify(a))
	}
}
