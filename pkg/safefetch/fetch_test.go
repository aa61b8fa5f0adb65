package safefetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type fetchCase struct {
	name       string
	url        string
	dns        map[string][]string // extra names for this case (one answer set)
	opts       func(*Options)
	wantErr    error  // kind; nil means success
	wantIn     string // fragment of the error, or of the body on success
	wantStatus int
	wantRedir  int
	wantAddr   string // vetted address the response came from
}

func redirectTo(base, to string, code int) string {
	return fmt.Sprintf("%s/redirect?code=%d&to=%s", base, code, url.QueryEscape(to))
}

// hostileAddressCases turns every non-public address of the classification
// table into two fetches: a name that resolves to it, and the literal.
func hostileAddressCases() []fetchCase {
	var cs []fetchCase
	for i, c := range classifyCases {
		a := netip.MustParseAddr(c.addr)
		if c.want == ClassPublic || a.Zone() != "" {
			continue
		}
		name := fmt.Sprintf("h%d.example.com", i)
		// A resolver answer is classified as the kernel would dial it.
		wantDNS, wantIn := ErrAddress, "resolves to"
		if Public(a.Unmap()) {
			// vetted as the public IPv4 it maps, and dialled there
			wantDNS, wantIn = ErrConnect, a.Unmap().String()+":80: no route"
		}
		cs = append(cs, fetchCase{
			name: "dns " + c.addr, url: "http://" + name + "/", dns: map[string][]string{name: {c.addr}},
			wantErr: wantDNS, wantIn: wantIn,
		})
		host := c.addr
		if a.Is6() {
			host = "[" + c.addr + "]"
		}
		cs = append(cs, fetchCase{name: "literal " + c.addr, url: "http://" + host + "/", wantErr: ErrAddress, wantIn: Classify(a).String()})
		// and the same behind a redirect from a public page
		cs = append(cs, fetchCase{
			name: "redirect to literal " + c.addr, url: redirectTo("http://pub.example.com", "http://"+host+"/", 302),
			wantErr: ErrRedirect, wantIn: Classify(a).String(),
		})
	}
	return cs
}

func fixedCases() []fetchCase {
	pub := "http://pub.example.com"
	pubs := "https://pub.example.com"
	lim := func(f func(*Options)) func(*Options) { return f }
	return []fetchCase{
		{name: "plain ok", url: pub + "/", wantIn: "hello", wantStatus: 200, wantAddr: pubV4 + ":80"},
		{name: "tls ok", url: pubs + "/", wantIn: "hello", wantStatus: 200, wantAddr: pubV4 + ":443"},
		{name: "tls SNI is the hostname", url: pubs + "/sni", wantIn: "pub.example.com", wantStatus: 200},
		{name: "ipv6 only host", url: "http://pub6.example.com/", wantIn: "hello", wantStatus: 200, wantAddr: "[" + pubV6 + "]:80"},
		{name: "explicit port", url: "http://pub.example.com:8080/", wantIn: "hello", wantStatus: 200, wantAddr: pubV4 + ":8080"},
		{name: "trailing dot host", url: "http://pub.example.com./", wantIn: "hello", wantStatus: 200},
		{name: "upper case host", url: "HTTP://PUB.EXAMPLE.COM/", wantIn: "hello", wantStatus: 200},
		{name: "idn host", url: "http://bücher.example.com/", dns: map[string][]string{"xn--bcher-kva.example.com": {pubV4}}, wantIn: "hello", wantStatus: 200},
		{name: "idn host to private", url: "http://bücher.example.com/", dns: map[string][]string{"xn--bcher-kva.example.com": {"10.1.2.3"}}, wantErr: ErrAddress, wantIn: "private"},
		{name: "404 is a result", url: pub + "/status/404", wantIn: "status body", wantStatus: 404},
		{name: "500 is a result", url: pub + "/status/500", wantIn: "status body", wantStatus: 500},
		{name: "public literal", url: "http://" + pubV4 + "/", wantIn: "hello", wantStatus: 200},
		{name: "public v6 literal", url: "http://[" + pubV6 + "]/", wantIn: "hello", wantStatus: 200},

		// resolver answers
		{name: "one public one private", url: "http://mixed.example.com/", dns: map[string][]string{"mixed.example.com": {pubV4, "10.0.0.1"}}, wantErr: ErrAddress, wantIn: "10.0.0.1"},
		{name: "private first then public", url: "http://mixed2.example.com/", dns: map[string][]string{"mixed2.example.com": {"192.168.1.1", pubV4}}, wantErr: ErrAddress, wantIn: "192.168.1.1"},
		{name: "public v4 and loopback v6", url: "http://mixed3.example.com/", dns: map[string][]string{"mixed3.example.com": {pubV4, "::1"}}, wantErr: ErrAddress, wantIn: "loopback"},
		{name: "public v6 and metadata v4", url: "http://mixed4.example.com/", dns: map[string][]string{"mixed4.example.com": {pubV6, "169.254.169.254"}}, wantErr: ErrAddress, wantIn: "metadata"},
		{name: "many public one private", url: "http://mixed5.example.com/", dns: map[string][]string{"mixed5.example.com": {pubV4, pubV4b, pub2V4, "151.101.1.70", "151.101.1.71", "100.64.0.1"}}, wantErr: ErrAddress, wantIn: "CGNAT"},
		{name: "mapped AAAA of loopback", url: "http://mapped.example.com/", dns: map[string][]string{"mapped.example.com": {"::ffff:127.0.0.1"}}, wantErr: ErrAddress, wantIn: "loopback"},
		{name: "NAT64 of metadata", url: "http://n64.example.com/", dns: map[string][]string{"n64.example.com": {"64:ff9b::a9fe:a9fe"}}, wantErr: ErrAddress, wantIn: "embeds 169.254.169.254"},
		{name: "6to4 of private", url: "http://s2t4.example.com/", dns: map[string][]string{"s2t4.example.com": {"2002:c0a8:101::1"}}, wantErr: ErrAddress, wantIn: "embeds 192.168.1.1"},
		{name: "teredo", url: "http://ter.example.com/", dns: map[string][]string{"ter.example.com": {"2001:0:4136:e378:8000:63bf:80ff:fffe"}}, wantErr: ErrAddress, wantIn: "Teredo"},
		{name: "nxdomain", url: "http://nothere.example.com/", wantErr: ErrResolve},
		{name: "no addresses", url: "http://empty.example.com/", dns: map[string][]string{"empty.example.com": {}}, wantErr: ErrResolve},
		{name: "unroutable public fails to connect", url: "http://unr.example.com/", dns: map[string][]string{"unr.example.com": {pubV4b}}, wantErr: ErrConnect},
		{name: "fallback within vetted list", url: "http://fb.example.com/", dns: map[string][]string{"fb.example.com": {pubV4b, pubV4}}, wantIn: "hello", wantStatus: 200, wantAddr: pubAddr},

		// URL refusals reach Fetch the same way
		{name: "userinfo", url: "http://user:pw@pub.example.com/", wantErr: ErrURL, wantIn: "credentials"},
		{name: "ftp", url: "ftp://pub.example.com/", wantErr: ErrURL, wantIn: "scheme"},
		{name: "decimal loopback", url: "http://2130706433/", wantErr: ErrURL, wantIn: "127.0.0.1"},
		{name: "octal loopback", url: "http://0177.0.0.1/", wantErr: ErrURL, wantIn: "127.0.0.1"},
		{name: "hex short loopback", url: "http://0x7f.1/", wantErr: ErrURL, wantIn: "127.0.0.1"},
		{name: "short loopback", url: "http://127.1/", wantErr: ErrURL, wantIn: "127.0.0.1"},
		{name: "decimal metadata", url: "http://2852039166/latest/meta-data/", wantErr: ErrURL, wantIn: "169.254.169.254"},
		{name: "localhost", url: "http://localhost/", wantErr: ErrURL},
		{name: "overlong name", url: "http://" + strings.Repeat("a.", 130) + "com/", wantErr: ErrURL},
		{name: "overlong label", url: "http://" + strings.Repeat("a", 64) + ".com/", wantErr: ErrURL},

		// redirects
		{name: "redirect followed", url: redirectTo(pub, pub+"/", 302), wantIn: "hello", wantStatus: 200, wantRedir: 1},
		{name: "301 followed", url: redirectTo(pub, "/", 301), wantIn: "hello", wantRedir: 1},
		{name: "303 followed", url: redirectTo(pub, "/", 303), wantIn: "hello", wantRedir: 1},
		{name: "307 followed", url: redirectTo(pub, "/", 307), wantIn: "hello", wantRedir: 1},
		{name: "308 followed", url: redirectTo(pub, "/", 308), wantIn: "hello", wantRedir: 1},
		{name: "300 not followed", url: redirectTo(pub, "/", 300), wantIn: "moved", wantStatus: 300},
		{name: "https to http", url: redirectTo(pubs, pub+"/", 302), wantIn: "hello", wantRedir: 1},
		{name: "http to https other host", url: redirectTo(pub, "https://pub2.example.com/sni", 302), wantIn: "pub2.example.com", wantRedir: 1},
		{name: "chain of 5 (default max)", url: pub + "/chain/5", wantIn: "end of chain", wantRedir: 5},
		{name: "chain of 6 refused", url: pub + "/chain/6", wantErr: ErrRedirect, wantIn: "more than 5"},
		{name: "chain of 10 with max 10", url: pub + "/chain/10", opts: lim(func(o *Options) { o.MaxRedirects = 10 }), wantIn: "end of chain", wantRedir: 10},
		{name: "chain of 11 with max 10", url: pub + "/chain/11", opts: lim(func(o *Options) { o.MaxRedirects = 10 }), wantErr: ErrRedirect},
		{name: "max 0 refuses a redirect", url: pub + "/chain/1", opts: lim(func(o *Options) { o.MaxRedirects = 0 }), wantErr: ErrRedirect, wantIn: "more than 0"},
		{name: "follow false returns the redirect", url: redirectTo(pub, "http://127.0.0.1/", 302), opts: lim(func(o *Options) { o.FollowRedirects = false }), wantIn: "moved", wantStatus: 302},
		{name: "redirect to loopback literal", url: redirectTo(pub, "http://127.0.0.1/", 302), wantErr: ErrRedirect, wantIn: "loopback"},
		{name: "redirect to metadata", url: redirectTo(pub, "http://169.254.169.254/latest/meta-data/", 302), wantErr: ErrRedirect, wantIn: "metadata"},
		{name: "redirect to name of loopback", url: redirectTo(pub, "http://loop.example.com/", 307), dns: map[string][]string{"loop.example.com": {"127.0.0.1"}}, wantErr: ErrAddress, wantIn: "loopback"},
		{name: "redirect to decimal loopback", url: redirectTo(pub, "http://2130706433/", 302), wantErr: ErrURL, wantIn: "127.0.0.1"},
		{name: "redirect to hex loopback", url: redirectTo(pub, "http://0x7f000001:8080/", 302), wantErr: ErrURL},
		{name: "redirect to file", url: redirectTo(pub, "file:///etc/passwd", 302), wantErr: ErrURL, wantIn: "scheme"},
		{name: "redirect to gopher", url: redirectTo(pub, "gopher://127.0.0.1:6379/_INFO", 302), wantErr: ErrURL},
		{name: "redirect with userinfo", url: redirectTo(pub, "http://u:p@pub.example.com/", 302), wantErr: ErrURL, wantIn: "credentials"},
		{name: "redirect protocol-relative to loopback", url: redirectTo(pub, "//127.0.0.1/", 302), wantErr: ErrAddress},
		{name: "redirect backslash trick", url: redirectTo(pub, "/\\127.0.0.1/", 302), wantErr: ErrURL, wantIn: "backslash"},
		{name: "redirect to [::1]", url: redirectTo(pub, "http://[::1]/", 302), wantErr: ErrAddress, wantIn: "loopback"},
		{name: "redirect to mapped literal", url: redirectTo(pub, "http://[::ffff:169.254.169.254]/", 302), wantErr: ErrAddress, wantIn: "IPv4-mapped"},
		{name: "redirect to localhost", url: redirectTo(pub, "http://localhost:8080/", 302), wantErr: ErrURL},
		{name: "redirect to internal name", url: redirectTo(pub, "http://metadata.google.internal/", 302), wantErr: ErrURL},
		{name: "two hops then private", url: redirectTo(pub, redirectTo("http://pub2.example.com", "http://10.0.0.1/", 302), 302), wantErr: ErrRedirect, wantIn: "redirect 2"},
		{name: "redirect location garbage", url: redirectTo(pub, "http://[::1", 302), wantErr: ErrRedirect, wantIn: "does not parse"},

		// bodies
		{name: "exact max bytes", url: pub + "/size/100", opts: lim(func(o *Options) { o.MaxBytes = 100 }), wantStatus: 200},
		{name: "content-length over max", url: pub + "/size/101", opts: lim(func(o *Options) { o.MaxBytes = 100 }), wantErr: ErrTooLarge, wantIn: "Content-Length"},
		{name: "chunked over max", url: pub + "/size/101?chunked=1", opts: lim(func(o *Options) { o.MaxBytes = 100 }), wantErr: ErrTooLarge, wantIn: "wire"},
		{name: "one byte max", url: pub + "/", opts: lim(func(o *Options) { o.MaxBytes = 1 }), wantErr: ErrTooLarge},
		{name: "endless body", url: pub + "/endless", wantErr: ErrTooLarge, wantIn: "wire"},
		{name: "endless body tls", url: pubs + "/endless", opts: lim(func(o *Options) { o.MaxBytes = 1 << 20 }), wantErr: ErrTooLarge},
		{name: "gzip ok", url: pub + "/small/gzip", wantIn: "decoded text"},
		{name: "zlib deflate ok", url: pub + "/small/deflate-zlib", wantIn: "decoded text"},
		{name: "raw deflate ok", url: pub + "/small/deflate-raw", wantIn: "decoded text"},
		{name: "brotli ok", url: pub + "/small/br", wantIn: "decoded text"},
		{name: "gzip bomb", url: pub + "/bomb/gzip", wantErr: ErrTooLarge, wantIn: "decoded gzip"},
		{name: "zlib bomb", url: pub + "/bomb/deflate-zlib", wantErr: ErrTooLarge, wantIn: "decoded deflate"},
		{name: "raw deflate bomb", url: pub + "/bomb/deflate-raw", wantErr: ErrTooLarge, wantIn: "decoded deflate"},
		{name: "brotli bomb", url: pub + "/bomb/br", wantErr: ErrTooLarge, wantIn: "decoded br"},
		{name: "gzip bomb under 32 MiB max", url: pub + "/bomb/gzip", opts: lim(func(o *Options) { o.MaxBytes = MaxMaxBytes }), wantIn: "", wantStatus: 200},
		{name: "brotli bomb, small wire max", url: pub + "/bomb/br", opts: lim(func(o *Options) { o.MaxBytes = 64 }), wantErr: ErrTooLarge},
		{name: "truncated gzip", url: pub + "/truncated/gzip", wantErr: ErrEncoding, wantIn: "corrupt gzip"},
		{name: "truncated brotli", url: pub + "/truncated/br", wantErr: ErrEncoding, wantIn: "corrupt br"},
		{name: "truncated zlib", url: pub + "/truncated/deflate-zlib", wantErr: ErrEncoding},
		{name: "stacked codings", url: pub + "/encoding?ce=gzip&ce=gzip", wantErr: ErrEncoding, wantIn: "stacked"},
		{name: "stacked in one header", url: pub + "/encoding?ce=" + url.QueryEscape("gzip, br"), wantErr: ErrEncoding, wantIn: "stacked"},
		{name: "unknown coding", url: pub + "/encoding?ce=compress", wantErr: ErrEncoding, wantIn: "compress"},
		{name: "zstd coding", url: pub + "/encoding?ce=zstd", wantErr: ErrEncoding},
		{name: "x-gzip", url: pub + "/encoding?ce=x-gzip", wantIn: "x", wantStatus: 200},
		{name: "gzip plus identity", url: pub + "/encoding?ce=" + url.QueryEscape("identity, gzip"), wantIn: "x", wantStatus: 200},
		{name: "not gzip bytes", url: pub + "/encoding?ce=br", wantErr: ErrEncoding},

		// slow servers and deadlines
		{name: "slow headers", url: pub + "/slow-headers", opts: lim(func(o *Options) { o.Timeout = 300 * time.Millisecond }), wantErr: ErrDeadline},
		{name: "slow body", url: pub + "/slow-body", opts: lim(func(o *Options) { o.Timeout = 300 * time.Millisecond }), wantErr: ErrDeadline},
		{name: "slow dns", url: "http://slowdns.example.com/", opts: lim(func(o *Options) { o.Timeout = 300 * time.Millisecond }), wantErr: ErrDeadline},
		{name: "tls server never speaks", url: "https://sink.example.com/", dns: map[string][]string{"sink.example.com": {pubV4c}}, opts: lim(func(o *Options) { o.Timeout = 300 * time.Millisecond }), wantErr: ErrDeadline},
		{name: "1 ms timeout", url: pub + "/slow-headers", opts: lim(func(o *Options) { o.Timeout = time.Millisecond }), wantErr: ErrDeadline},

		// TLS verifies the hostname, not the pinned address
		{name: "tls wrong name", url: "https://other.example.net/", wantErr: ErrConnect, wantIn: "certificate"},
		{name: "tls to a literal not in the cert", url: "https://" + pubV4 + "/", wantErr: ErrConnect, wantIn: "certificate"},
	}
}

func runFetchCase(t *testing.T, e *env, tc fetchCase) {
	for n, a := range tc.dns {
		e.dns.set(n, a)
	}
	o := DefaultOptions()
	if tc.opts != nil {
		tc.opts(&o)
	}
	e.takeDialed()
	res, err := e.f.Fetch(context.Background(), tc.url, o)
	dialed := e.takeDialed()
	for _, ap := range dialed {
		if !Public(ap.Addr()) {
			t.Errorf("%s: dialled non-public %s", tc.name, ap)
		}
	}
	if tc.wantErr != nil {
		if err == nil {
			t.Errorf("%s: fetch %s succeeded (status %d), want %v", tc.name, tc.url, res.Status, tc.wantErr)
			return
		}
		if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantIn) {
			t.Errorf("%s: error %q, want %v containing %q", tc.name, err, tc.wantErr, tc.wantIn)
		}
		if (errors.Is(err, ErrAddress) || errors.Is(err, ErrURL)) && !errors.Is(err, ErrRedirect) && len(dialed) != 0 {
			t.Errorf("%s: refused first hop still dialled %v", tc.name, dialed)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: fetch %s: %v", tc.name, tc.url, err)
		return
	}
	if !strings.Contains(string(res.Body), tc.wantIn) {
		t.Errorf("%s: body %.80q, want it to contain %q", tc.name, res.Body, tc.wantIn)
	}
	if tc.wantStatus != 0 && res.Status != tc.wantStatus {
		t.Errorf("%s: status %d, want %d", tc.name, res.Status, tc.wantStatus)
	}
	if res.Redirects != tc.wantRedir {
		t.Errorf("%s: %d redirects, want %d", tc.name, res.Redirects, tc.wantRedir)
	}
	if tc.wantAddr != "" && res.Addr.String() != tc.wantAddr {
		t.Errorf("%s: came from %s, want %s", tc.name, res.Addr, tc.wantAddr)
	}
	if int64(len(res.Body)) > o.MaxBytes {
		t.Errorf("%s: body %d bytes over %d", tc.name, len(res.Body), o.MaxBytes)
	}
}

func TestFetchHostileTable(t *testing.T) {
	e := newEnv(t)
	e.dns.setSlow("slowdns.example.com")
	cases := append(fixedCases(), hostileAddressCases()...)
	if len(cases) < 200 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		runFetchCase(t, e, tc)
	}
	t.Logf("%d fetch cases", len(cases))
}

// TestRebindingBetweenHops: the name is public for the first hop and loopback
// for the second; each hop resolves anew, so the second is refused.
func TestRebindingBetweenHops(t *testing.T) {
	e := newEnv(t)
	e.dns.set("rebind.example.com", []string{pubV4}, []string{"127.0.0.1"})
	_, err := e.f.Fetch(context.Background(), redirectTo("http://rebind.example.com", "http://rebind.example.com/", 302), DefaultOptions())
	if !errors.Is(err, ErrRedirect) || !errors.Is(err, ErrAddress) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("err = %v, want the rebound second hop refused", err)
	}
	if n := e.dns.queries("rebind.example.com", "A"); n != 2 {
		t.Errorf("A queries = %d, want 2 (one per hop)", n)
	}
	if got := e.hits.get("/redirect"); got != 1 {
		t.Errorf("first hop served %d times", got)
	}
	for _, ap := range e.takeDialed() {
		if ap.Addr() != netip.MustParseAddr(pubV4) {
			t.Errorf("dialled %s", ap)
		}
	}
}

// TestOneLookupPerHop: a name that rebinds right after its first answer is
// still fetched from the first answer: no second lookup ever happens.
func TestOneLookupPerHop(t *testing.T) {
	e := newEnv(t)
	e.dns.set("flip.example.com", []string{pubV4}, []string{"127.0.0.1"})
	res, err := e.f.Fetch(context.Background(), "https://flip.example.com/sni", DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Body) != "flip.example.com" || res.Addr.String() != pubV4+":443" {
		t.Errorf("body %q from %s", res.Body, res.Addr)
	}
	if a, aaaa := e.dns.queries("flip.example.com", "A"), e.dns.queries("flip.example.com", "AAAA"); a != 1 || aaaa != 1 {
		t.Errorf("queries A=%d AAAA=%d, want 1 each", a, aaaa)
	}
}

func TestNoEnvironmentProxy(t *testing.T) {
	var proxyHits atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxyHits.Add(1)
		w.Write([]byte("from proxy"))
	}))
	defer proxy.Close()
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	e := newEnv(t)
	for _, u := range []string{"http://pub.example.com/", "https://pub.example.com/"} {
		res, err := e.f.Fetch(context.Background(), u, DefaultOptions())
		if err != nil || string(res.Body) != "hello" {
			t.Fatalf("%s: %v %v", u, err, res)
		}
	}
	if proxyHits.Load() != 0 {
		t.Errorf("environment proxy was used %d times", proxyHits.Load())
	}
}

// TestHopTransport pins the transport's shape: a proxy from the
// environment would be read once per process, so a behavioural test alone
// could pass by the order tests run in.
func TestHopTransport(t *testing.T) {
	tr := hopTransport(nil, nil)
	if tr.Proxy != nil || !tr.DisableKeepAlives || !tr.DisableCompression || tr.TLSNextProto == nil ||
		len(tr.TLSNextProto) != 0 || tr.ForceAttemptHTTP2 || tr.MaxResponseHeaderBytes != maxHeaderBytes || tr.Dial != nil || tr.DialTLS != nil {
		t.Errorf("hop transport %+v", tr)
	}
}

func TestTLSNeedsTrustedRoots(t *testing.T) {
	e := newEnv(t)
	f := &Fetcher{Dialer: e.d} // system roots: the test CA is unknown
	_, err := f.Fetch(context.Background(), "https://pub.example.com/", DefaultOptions())
	if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err = %v, want certificate failure", err)
	}
}

func TestHeaders(t *testing.T) {
	e := newEnv(t)
	o := DefaultOptions()
	o.Header = http.Header{"Authorization": {"Bearer host-token"}, "X-Trusted": {"yes"}, "Cookie": {"a=b"}}
	res, err := e.f.Fetch(context.Background(), "http://pub.example.com/headers", o)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Accept-Encoding=gzip, deflate, br\n", "Authorization=Bearer host-token\n", "X-Trusted=yes\n", "User-Agent=safefetch-test\n", "Host=pub.example.com\n", "Cookie=a=b\n"} {
		if !strings.Contains(string(res.Body), want) {
			t.Errorf("same origin: missing %q in\n%s", want, res.Body)
		}
	}
	// Same origin redirect keeps them; another origin loses credentials.
	res, err = e.f.Fetch(context.Background(), redirectTo("http://pub.example.com", "/headers", 302), o)
	if err != nil || !strings.Contains(string(res.Body), "Authorization=Bearer host-token\n") {
		t.Errorf("same-origin redirect: %v\n%s", err, res.Body)
	}
	res, err = e.f.Fetch(context.Background(), redirectTo("http://pub.example.com", "http://pub2.example.com/headers", 302), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Authorization=\n", "Cookie=\n", "X-Trusted=yes\n", "Host=pub2.example.com\n"} {
		if !strings.Contains(string(res.Body), want) {
			t.Errorf("cross-origin redirect: missing %q in\n%s", want, res.Body)
		}
	}
	if o.Header.Get("Authorization") == "" {
		t.Error("Fetch modified the caller's header map")
	}
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Options)
		ok   bool
		in   string
	}{
		{"defaults", func(o *Options) {}, true, ""},
		{"zero value", func(o *Options) { *o = Options{} }, false, "Timeout 0s"},
		{"timeout 1ms", func(o *Options) { o.Timeout = time.Millisecond }, true, ""},
		{"timeout under 1ms", func(o *Options) { o.Timeout = 999 * time.Microsecond }, false, "Timeout"},
		{"timeout 120s", func(o *Options) { o.Timeout = 120 * time.Second }, true, ""},
		{"timeout over 120s", func(o *Options) { o.Timeout = 120*time.Second + 1 }, false, "Timeout"},
		{"negative timeout", func(o *Options) { o.Timeout = -time.Second }, false, "Timeout"},
		{"max bytes 1", func(o *Options) { o.MaxBytes = 1 }, true, ""},
		{"max bytes 0", func(o *Options) { o.MaxBytes = 0 }, false, "MaxBytes"},
		{"max bytes 32 MiB", func(o *Options) { o.MaxBytes = 32 << 20 }, true, ""},
		{"max bytes over 32 MiB", func(o *Options) { o.MaxBytes = 32<<20 + 1 }, false, "MaxBytes"},
		{"max bytes negative", func(o *Options) { o.MaxBytes = -1 }, false, "MaxBytes"},
		{"redirects 0", func(o *Options) { o.MaxRedirects = 0 }, true, ""},
		{"redirects 10", func(o *Options) { o.MaxRedirects = 10 }, true, ""},
		{"redirects 11", func(o *Options) { o.MaxRedirects = 11 }, false, "MaxRedirects"},
		{"redirects -1", func(o *Options) { o.MaxRedirects = -1 }, false, "MaxRedirects"},
		{"accept-encoding", func(o *Options) { o.Header = http.Header{"Accept-Encoding": {"zstd"}} }, false, "cannot be set"},
		{"host header", func(o *Options) { o.Header = http.Header{"host": {"x"}} }, false, "cannot be set"},
		{"transfer-encoding", func(o *Options) { o.Header = http.Header{"Transfer-Encoding": {"chunked"}} }, false, "cannot be set"},
		{"bad header name", func(o *Options) { o.Header = http.Header{"Bad Name": {"x"}} }, false, "invalid"},
		{"header value with newline", func(o *Options) { o.Header = http.Header{"X-A": {"a\r\nHost: evil"}} }, false, "invalid value"},
		{"fine header", func(o *Options) { o.Header = http.Header{"X-A": {"a"}} }, true, ""},
	}
	e := newEnv(t)
	for _, tc := range cases {
		o := DefaultOptions()
		tc.mod(&o)
		err := o.Validate()
		if tc.ok != (err == nil) || err != nil && (!errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.in)) {
			t.Errorf("%s: Validate() = %v, want ok=%v containing %q", tc.name, err, tc.ok, tc.in)
		}
		if !tc.ok {
			// Fetch refuses before any resolution or connection.
			if _, ferr := e.f.Fetch(context.Background(), "http://pub.example.com/", o); !errors.Is(ferr, ErrOptions) {
				t.Errorf("%s: Fetch error %v, want ErrOptions", tc.name, ferr)
			}
		}
	}
	if n := e.dns.queries("pub.example.com", "A"); n != 0 {
		t.Errorf("invalid options still resolved (%d queries)", n)
	}
}

func TestAssertPublicURL(t *testing.T) {
	e := newEnv(t)
	e.dns.set("loop.example.com", []string{"127.0.0.1"})
	cases := []struct {
		url, want string
		err       error
	}{
		{"https://pub.example.com/a#frag", "https://pub.example.com/a", nil},
		{"https://bücher.example.com/", "", ErrResolve}, // not in the zone
		{"http://loop.example.com/", "", ErrAddress},
		{"http://127.0.0.1/", "", ErrAddress},
		{"http://2130706433/", "", ErrURL},
		{"http://u@pub.example.com/", "", ErrURL},
		{"ftp://pub.example.com/", "", ErrURL},
	}
	for _, tc := range cases {
		got, err := e.f.AssertPublicURL(context.Background(), tc.url)
		if got != tc.want || !errors.Is(err, tc.err) && (tc.err != nil || err != nil) {
			t.Errorf("AssertPublicURL(%q) = %q, %v; want %q, %v", tc.url, got, err, tc.want, tc.err)
		}
	}
	if len(e.takeDialed()) != 0 {
		t.Error("AssertPublicURL connected")
	}
}

// TestConnectDeadlinePerAddress checks the 3 s bound is what each address
// gets, and that fallback moves on after it (with a shortened bound).
func TestConnectDeadlinePerAddress(t *testing.T) {
	// Each address's deadline lies ConnectTimeout after a moment between
	// DialContext's start and that address's dial: bounds that hold however
	// slowly the machine runs (a split or shared deadline falls short).
	var deadlines, dialed []time.Time
	d := &Dialer{
		Resolver: staticResolver{"x.example.com.": {netip.MustParseAddr(pubV4b), netip.MustParseAddr(pubV4)}},
		DialAddr: func(ctx context.Context, network, address string) (net.Conn, error) {
			dl, ok := ctx.Deadline()
			if !ok {
				t.Error("dial without deadline")
			}
			deadlines, dialed = append(deadlines, dl), append(dialed, time.Now())
			return nil, errors.New("refused")
		},
	}
	began := time.Now()
	_, err := d.DialContext(context.Background(), "tcp", "x.example.com:80")
	if !errors.Is(err, ErrConnect) || len(deadlines) != 2 {
		t.Fatalf("err %v after %d dials, want ErrConnect after 2", err, len(deadlines))
	}
	for i, dl := range deadlines {
		if dl.Before(began.Add(ConnectTimeout)) || dl.After(dialed[i].Add(ConnectTimeout)) {
			t.Errorf("address %d: deadline %s after the dial began, %s after its dial; want %s after a moment between",
				i+1, dl.Sub(began), dl.Sub(dialed[i]), ConnectTimeout)
		}
	}

	// A blackholed first address costs one connect deadline, then the second answers.
	// Checked on the dials' deadlines and times, not on the fetch's wall
	// time (which a busy machine stretches): the silent address's attempt
	// is bounded by the shortened deadline, and the second address is
	// dialled only once that deadline passed.
	e := newEnv(t)
	e.d.connectTimeout = 200 * time.Millisecond
	e.dns.set("bh.example.com", []string{pubV4c, pubV4})
	type attempt struct{ at, deadline time.Time }
	var attempts []attempt
	e.d.DialAddr = func(ctx context.Context, network, address string) (net.Conn, error) {
		dl, _ := ctx.Deadline()
		attempts = append(attempts, attempt{time.Now(), dl})
		return e.dial(ctx, network, address)
	}
	res, err := e.f.Fetch(context.Background(), "https://bh.example.com/", DefaultOptions())
	if err != nil || res.Addr.String() != pubV4+":443" || len(attempts) != 2 {
		t.Fatalf("fallback after a silent server: %v %v after %d dials", err, res, len(attempts))
	}
	if silent := attempts[0]; silent.deadline.IsZero() || silent.deadline.After(silent.at.Add(200*time.Millisecond)) {
		t.Errorf("the silent address's attempt had deadline %v, want at most 200ms after its dial", silent.deadline.Sub(silent.at))
	}
	if gap := attempts[1].at.Sub(attempts[0].at); gap < 200*time.Millisecond {
		t.Errorf("second address dialled %v after the first, before its 200ms deadline", gap)
	}
}

func TestCallerCancelIsNotADeadline(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := e.f.Fetch(ctx, "http://pub.example.com/slow-headers", DefaultOptions())
	if !errors.Is(err, ErrCanceled) || errors.Is(err, ErrDeadline) || !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want ErrCanceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := e.d.DialContext(ctx, "tcp", "pub.example.com:80"); !errors.Is(err, ErrCanceled) {
		t.Errorf("dial with a cancelled context: %v", err)
	}
}

type staticResolver map[string][]netip.Addr

func (s staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := s[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return append([]netip.Addr(nil), a...), nil
}

func TestRedirectBodyNotReadWhenFollowing(t *testing.T) {
	e := newEnv(t)
	o := DefaultOptions()
	o.MaxBytes = 1 // the redirect's own body ("moved") would not fit
	o.FollowRedirects = true
	_, err := e.f.Fetch(context.Background(), redirectTo("http://pub.example.com", "/size/1", 302), o)
	if err != nil {
		t.Fatalf("following a redirect read its body: %v", err)
	}
	o.FollowRedirects = false
	if _, err := e.f.Fetch(context.Background(), redirectTo("http://pub.example.com", "/size/1", 302), o); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a returned redirect's body is bounded too: %v", err)
	}
}
