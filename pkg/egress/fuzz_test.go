package egress

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// FuzzProxyRequest: whatever request line and Host header reach the proxy
// route, the only socket addresses it ever dials are public or the one
// allowed address:port (every name resolves to loopback, link-local and
// private addresses here), and a refusal body is one of the generic texts.
func FuzzProxyRequest(f *testing.F) {
	for _, s := range []string{
		"CONNECT 127.0.0.1:8080", "CONNECT 127.0.0.1:8081", "CONNECT 169.254.169.254:80", "CONNECT 2130706433:8080",
		"CONNECT [::ffff:127.0.0.1]:8080", "CONNECT user@127.0.0.1:8080", "CONNECT a.example.com:8080",
		"CONNECT 0x7f.1:8080", "CONNECT [::1]:8080", "CONNECT 93.184.216.34:443",
		"GET http://127.0.0.1:8080/", "GET http://127.0.0.1:8081/", "GET http://a.example.com:8080/x?y",
		"GET http://[fe80::1%25eth0]:8080/", "GET http://0177.0.0.1:8080/", "GET http://u:p@127.0.0.1:8080/",
		"GET https://127.0.0.1:8080/", "GET HTTP://127.0.0.1:8080/", "POST http://93.184.216.34/", "GET //127.0.0.1:8080/",
	} {
		f.Add(s, "127.0.0.1:8080")
	}
	allowed := netip.MustParseAddrPort("127.0.0.1:8080")
	f.Fuzz(func(t *testing.T, line, host string) {
		if strings.ContainsAny(line+host, "\r\n") {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(line + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")))
		if err != nil || !IsProxyRequest(req) {
			return
		}
		var mu sync.Mutex
		var dialled []string
		d := &safefetch.Dialer{
			Allow:    []netip.AddrPort{allowed},
			Resolver: resolveAll{addrs("127.0.0.1", "10.0.0.1", "169.254.169.254")},
			DialAddr: func(_ context.Context, _, address string) (net.Conn, error) {
				mu.Lock()
				dialled = append(dialled, address)
				mu.Unlock()
				return nil, errors.New("fuzz: no network")
			},
		}
		p := New(d, testGrant(), time.Now().Add(time.Hour), slog.New(slog.DiscardHandler))
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req.WithContext(context.Background()))
		for _, a := range dialled {
			ap, err := netip.ParseAddrPort(a)
			if err != nil || ap != allowed && !safefetch.Public(ap.Addr()) {
				t.Errorf("%q (Host %q) dialled %s", line, host, a)
			}
		}
		if w.Code >= 400 {
			if _, ok := publicText[w.Code]; !ok || w.Body.String() != publicText[w.Code] {
				t.Errorf("%q: %d %q is not a generic refusal", line, w.Code, w.Body.String())
			}
		}
	})
}

// resolveAll answers every name with the same addresses.
type resolveAll struct{ a []netip.Addr }

func (r resolveAll) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r.a, nil
}
