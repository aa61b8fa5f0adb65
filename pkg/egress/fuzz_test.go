package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
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

// FuzzWriteWhole: for any request the parser accepts (and the answer to
// it), writeWholeRequest and writeWholeAnswer write exactly what
// Request.Write and Response.Write would, or nothing.
func FuzzWriteWhole(f *testing.F) {
	f.Add("GET /a%20b?q=1 HTTP/1.1\r\nHost: h.test:8443\r\nUser-Agent: x\r\nX-A: 1\r\nX-A: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-B: y\r\n\r\nok")
	f.Add("POST /p HTTP/1.1\r\nHost: [::1]:1\r\nContent-Length: 3\r\n\r\nabc", "HTTP/1.0 404 Gone Away\r\nContent-Length: 1\r\n\r\nx")
	f.Add("OPTIONS * HTTP/1.1\r\nHost: h\r\nUser-Agent:\r\n\r\n", "HTTP/1.1 204 No Content\r\n\r\n")
	f.Fuzz(func(t *testing.T, rawReq, rawResp string) {
		mk := func() (*http.Request, bool) {
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(rawReq)))
			if err != nil {
				return nil, false
			}
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, false
			}
			out := &http.Request{Method: req.Method, URL: req.URL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: req.Header, Host: req.Host, ContentLength: req.ContentLength, Body: http.NoBody}
			if len(b) > 0 {
				out.Body, out.ContentLength = memBody{bytes.NewReader(b)}, int64(len(b))
			}
			return out, true
		}
		out, ok := mk()
		if !ok {
			return
		}
		var got, want bytes.Buffer
		gw := bufio.NewWriter(&got)
		if writeWholeRequest(gw, out) {
			gw.Flush()
			again, _ := mk()
			if err := again.Write(&want); err != nil || got.String() != want.String() {
				t.Fatalf("request: got %q, Request.Write %q (%v)", got.String(), want.String(), err)
			}
		} else if gw.Buffered() != 0 {
			t.Fatal("wrote part of a request it does not cover")
		}
		parse := func() (*http.Response, []byte, bool) {
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(rawResp)), out)
			if err != nil {
				return nil, nil, false
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return nil, nil, false
			}
			delete(resp.Header, "Connection")
			resp.Body = io.NopCloser(bytes.NewReader(body))
			return resp, body, true
		}
		resp, body, ok := parse()
		if !ok {
			return
		}
		got.Reset()
		want.Reset()
		gw.Reset(&got)
		if writeWholeAnswer(gw, resp, body) {
			gw.Flush()
			again, _, _ := parse()
			if err := again.Write(&want); err != nil || got.String() != want.String() {
				t.Fatalf("answer: got %q, Response.Write %q (%v)", got.String(), want.String(), err)
			}
		} else if gw.Buffered() != 0 {
			t.Fatal("wrote part of an answer it does not cover")
		}
	})
}

// FuzzWriteFields: for any header block (names and values of any bytes,
// framed names among them), writeFields writes exactly what
// Header.WriteSubset writes with the exclude set Request.Write and
// Response.Write use.
func FuzzWriteFields(f *testing.F) {
	f.Add("X-A", "1", "Host", "h", "x-b", " two\r\nlines \t", "\xff")
	f.Add("Content-Length", "3", "Trailer", "T", "Bad Name", "v", "")
	f.Add("Accept-Encoding", "identity", "Authorization", "Bearer \x80\n", "User-Agent", "Go", "Transfer-Encoding")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3, k4 string) {
		h := http.Header{k1: {v1}, k2: {v2, v1}, k3: {v3}, k4: {}}
		for _, c := range []struct {
			name    string
			framed  func(string) bool
			exclude map[string]bool
		}{
			{"request", requestFramed, map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}},
			{"answer", answerFramed, map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Trailer": true}},
		} {
			var got, want bytes.Buffer
			w := bufio.NewWriter(&got)
			writeFields(w, h, c.framed)
			w.Flush()
			if err := h.WriteSubset(&want, c.exclude); err != nil || got.String() != want.String() {
				t.Fatalf("%s: got %q, WriteSubset %q (%v)", c.name, got.String(), want.String(), err)
			}
		}
	})
}
