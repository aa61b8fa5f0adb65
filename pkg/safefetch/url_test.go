package safefetch

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// urlCases: ok ones give the normalized URL, host and port; refused ones a
// fragment of the message, so each refusal is for the reason it names.
var urlCases = []struct {
	raw     string
	wantURL string // "" means refused
	host    string
	port    uint16
	refusal string
}{
	{raw: "http://www.example.com/", wantURL: "http://www.example.com/", host: "www.example.com", port: 80},
	{raw: "https://www.example.com/a?b=c", wantURL: "https://www.example.com/a?b=c", host: "www.example.com", port: 443},
	{raw: "HTTPS://WWW.Example.COM/Path", wantURL: "https://www.example.com/Path", host: "www.example.com", port: 443},
	{raw: "https://www.example.com:8443/", wantURL: "https://www.example.com:8443/", host: "www.example.com", port: 8443},
	{raw: "http://www.example.com:0080/", wantURL: "http://www.example.com:80/", host: "www.example.com", port: 80},
	{raw: "http://www.example.com:/", wantURL: "http://www.example.com/", host: "www.example.com", port: 80},
	{raw: "https://www.example.com/#frag", wantURL: "https://www.example.com/", host: "www.example.com", port: 443},
	{raw: "https://www.example.com./", wantURL: "https://www.example.com/", host: "www.example.com", port: 443},
	{raw: "http://8.8.8.8/", wantURL: "http://8.8.8.8/", host: "8.8.8.8", port: 80},
	{raw: "http://[2606:4700:4700::1111]:8080/", wantURL: "http://[2606:4700:4700::1111]:8080/", host: "2606:4700:4700::1111", port: 8080},
	{raw: "http://[2606:4700:4700:0::1111]/", wantURL: "http://[2606:4700:4700::1111]/", host: "2606:4700:4700::1111", port: 80},
	{raw: "https://bücher.example.com/", wantURL: "https://xn--bcher-kva.example.com/", host: "xn--bcher-kva.example.com", port: 443},
	{raw: "https://xn--bcher-kva.example.com/", wantURL: "https://xn--bcher-kva.example.com/", host: "xn--bcher-kva.example.com", port: 443},
	{raw: "https://ÉXAMPLE.com/", wantURL: "https://xn--xample-9ua.com/", host: "xn--xample-9ua.com", port: 443},
	{raw: "https://www.example.com/%2e%2e/", wantURL: "https://www.example.com/%2e%2e/", host: "www.example.com", port: 443},
	{raw: "http://my_host.example.com/", wantURL: "http://my_host.example.com/", host: "my_host.example.com", port: 80},
	{raw: "http://1e100.net/", wantURL: "http://1e100.net/", host: "1e100.net", port: 80},
	{raw: "http://0x.example.com/", wantURL: "http://0x.example.com/", host: "0x.example.com", port: 80},

	// schemes and shapes
	{raw: "ftp://www.example.com/", refusal: "not http or https"},
	{raw: "file:///etc/passwd", refusal: "not http or https"},
	{raw: "gopher://www.example.com:70/", refusal: "not http or https"},
	{raw: "javascript:alert(1)", refusal: "not http or https"},
	{raw: "data:text/plain,hi", refusal: "not http or https"},
	{raw: "dict://127.0.0.1:11211/", refusal: "not http or https"},
	{raw: "ws://www.example.com/", refusal: "not http or https"},
	{raw: "www.example.com/", refusal: "not http or https"},
	{raw: "//www.example.com/", refusal: "not http or https"},
	{raw: "http:www.example.com", refusal: "no authority"},
	{raw: "http:/www.example.com", refusal: "no host"},
	{raw: "http:///www.example.com", refusal: "no host"},
	{raw: "http://", refusal: "no host"},
	{raw: "http://:80/", refusal: "empty host"},
	{raw: "", refusal: "not http or https"},
	{raw: "http://www.example.com/" + strings.Repeat("a", MaxURLLength), refusal: "the limit is"},
	// characters parsers disagree on
	{raw: "http://www.example.com\\@127.0.0.1/", refusal: "backslash"},
	{raw: "http://127.0.0.1\\.example.com/", refusal: "backslash"},
	{raw: "http://www.example.com /", refusal: "space"},
	{raw: "http://www.example.com/\t", refusal: "control"},
	{raw: "http://www.example.com/\n", refusal: "control"},
	{raw: "http://www.exa\x00mple.com/", refusal: "control"},
	{raw: "http://www.example.com\x7f/", refusal: "control"},
	// credentials
	{raw: "http://user:pass@www.example.com/", refusal: "credentials"},
	{raw: "http://user@www.example.com/", refusal: "credentials"},
	{raw: "http://@www.example.com/", refusal: "credentials"},
	{raw: "http://:@www.example.com/", refusal: "credentials"},
	{raw: "http://www.example.com@127.0.0.1/", refusal: "credentials"},
	{raw: "http://127.0.0.1@www.example.com/", refusal: "credentials"},
	{raw: "http://a@b@www.example.com/", refusal: "credentials"},
	{raw: "http://user%40x@www.example.com/", refusal: "credentials"},
	// ports
	{raw: "http://www.example.com:0/", refusal: "1-65535"},
	{raw: "http://www.example.com:65536/", refusal: "1-65535"},
	{raw: "http://www.example.com:99999999999/", refusal: "1-65535"},
	{raw: "http://www.example.com:-1/", refusal: "does not parse"},
	{raw: "http://www.example.com:80a/", refusal: "does not parse"},
	{raw: "http://www.example.com:0x50/", refusal: "does not parse"},
	{raw: "http://[::1]:0/", refusal: "1-65535"},
	// encoded IPv4: refused outright, naming what it denotes
	{raw: "http://2130706433/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://017700000001/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://0x7f000001/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://0X7F000001/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://0177.0.0.1/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://0177.0000.0000.0001/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://0x7f.0.0.1/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://0x7f.1/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://127.1/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://127.0.1/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://127.000.000.001/", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://127.0.0.1./", refusal: "non-canonical IPv4 form of 127.0.0.1"},
	{raw: "http://0/", refusal: "non-canonical IPv4 form of 0.0.0.0"},
	{raw: "http://0x0/", refusal: "non-canonical IPv4 form of 0.0.0.0"},
	{raw: "http://2852039166/", refusal: "non-canonical IPv4 form of 169.254.169.254 (cloud metadata)"},
	{raw: "http://0xa9fea9fe/", refusal: "non-canonical IPv4 form of 169.254.169.254"},
	{raw: "http://0251.0376.0251.0376/", refusal: "non-canonical IPv4 form of 169.254.169.254"},
	{raw: "http://169.254.43518/", refusal: "non-canonical IPv4 form of 169.254.169.254"},
	{raw: "http://10.1/", refusal: "non-canonical IPv4 form of 10.0.0.1"},
	{raw: "http://0xc0.0xa8.1.1/", refusal: "non-canonical IPv4 form of 192.168.1.1"},
	{raw: "http://134744072/", refusal: "non-canonical IPv4 form of 8.8.8.8 (public)"},
	{raw: "http://08.8.8.8/", refusal: "ends in a number"},
	{raw: "http://256.0.0.1/", refusal: "ends in a number"},
	{raw: "http://1.2.3.4.5/", refusal: "ends in a number"},
	{raw: "http://4294967296/", refusal: "ends in a number"},
	{raw: "http://www.example.123/", refusal: "ends in a number"},
	{raw: "http://www.example.0x1f/", refusal: "ends in a number"},
	{raw: "http://www.example.0x/", refusal: "ends in a number"},
	{raw: "http://%31%32%37.0.0.1/", refusal: "does not parse"},
	{raw: "http://www.example%2ecom/", refusal: "does not parse"},
	{raw: "http://１２７.０.０.１/", refusal: "non-canonical IPv4 form of 127.0.0.1"}, // fullwidth, mapped by IDNA
	{raw: "http://127。0。0。1/", refusal: "non-canonical IPv4 form of 127.0.0.1"}, // ideographic full stops
	// IP literals in other forms
	{raw: "http://[127.0.0.1]/", refusal: "does not parse"},
	{raw: "http://[fe80::1%25eth0]/", refusal: "percent-encoded"},
	{raw: "http://[::1/", refusal: "does not parse"},
	{raw: "http://[::ffff:127.0.0.1]/", wantURL: "http://[::ffff:127.0.0.1]/", host: "::ffff:127.0.0.1", port: 80}, // parsed; the address check refuses it
	{raw: "http://::1/", refusal: "does not parse"},
	// names
	{raw: "http://localhost/", refusal: "single label"},
	{raw: "http://localhost./", refusal: "single label"},
	{raw: "http://LOCALHOST/", refusal: "single label"},
	{raw: "http://foo.localhost/", refusal: "special-use name \"localhost\""},
	{raw: "http://metadata.google.internal/", refusal: "special-use name \"internal\""},
	{raw: "http://printer.local/", refusal: "special-use name \"local\""},
	{raw: "http://router.home.arpa/", refusal: "special-use name"},
	{raw: "http://1.0.0.127.in-addr.arpa/", refusal: "special-use name \"arpa\""},
	{raw: "http://abc.onion/", refusal: "special-use name \"onion\""},
	{raw: "http://x.invalid/", refusal: "special-use name"},
	{raw: "http://intranet/", refusal: "single label"},
	{raw: "http://metadata/", refusal: "single label"},
	{raw: "http://www.example.com../", refusal: "not a valid DNS name"},
	{raw: "http://.example.com/", refusal: "not a valid"},
	{raw: "http://www..example.com/", refusal: "not a valid"},
	{raw: "http://-www.example.com/", refusal: "not a valid"},
	{raw: "http://www-.example.com/", refusal: "not a valid"},
	{raw: "http://" + strings.Repeat("a", 64) + ".example.com/", refusal: "not a valid"},
	{raw: "http://" + strings.Repeat("abcdefghi.", 26) + "com/", refusal: "a DNS name is at most 253"},
	{raw: "http://" + strings.Repeat("abcdefgh.", 28) + "com/", refusal: "not a valid DNS name"},
	{raw: "http://www.exa!mple.com/", refusal: "not a valid DNS name"},
	{raw: "http://www.exa$mple.com/", refusal: "not a valid DNS name"},
	{raw: "http://xn--.example.com/", refusal: "internationalized"},
	{raw: "http://xn--zzzzzzzzz.example.com/", refusal: "internationalized"},
	{raw: "http://a\u200db.example.com/", refusal: "internationalized"}, // zero-width joiner
	{raw: "http://\u202eexample.com/", refusal: "internationalized"},    // bidi override
}

func TestParseURL(t *testing.T) {
	for _, tc := range urlCases {
		got, err := parseURL(tc.raw)
		if tc.wantURL == "" {
			if err == nil {
				t.Errorf("parseURL(%q) = %s, want refusal %q", tc.raw, got.u, tc.refusal)
				continue
			}
			if !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), tc.refusal) {
				t.Errorf("parseURL(%q) error %q, want ErrURL containing %q", tc.raw, err, tc.refusal)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseURL(%q): %v", tc.raw, err)
			continue
		}
		if got.u.String() != tc.wantURL || got.host != tc.host || got.port != tc.port {
			t.Errorf("parseURL(%q) = %s host %s port %d, want %s %s %d", tc.raw, got.u, got.host, got.port, tc.wantURL, tc.host, tc.port)
		}
	}
}

func TestLooseIPv4(t *testing.T) {
	cases := []struct{ in, want string }{
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0177.1", "127.0.0.1"},
		{"0x7f.0x0.0x0.0x1", "127.0.0.1"},
		{"127.16777215", "127.255.255.255"},
		{"127.65535.1", ""}, // middle part over 255
		{"1.2.65535", "1.2.255.255"},
		{"1.2.65536", ""},
		{"0x100.1", ""},
		{"4294967295", "255.255.255.255"},
		{"4294967296", ""},
		{"0x", "0.0.0.0"},
		{"0x.0x.0x.0x", "0.0.0.0"},
		{"09", ""},
		{"1..1", ""},
		{"1.2.3.4.5", ""},
		{"a.b", ""},
		{"", ""},
		{"1.2.3.4.", "1.2.3.4"},
		{"00000000000000000000000000000000000000001", ""},
	}
	for _, tc := range cases {
		got, ok := looseIPv4(tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("looseIPv4(%q) = %s, want failure", tc.in, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tc.want) {
			t.Errorf("looseIPv4(%q) = %s,%v, want %s", tc.in, got, ok, tc.want)
		}
	}
}
