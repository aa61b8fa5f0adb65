package egress

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
)

const (
	testPH    = "rtsbx_ph_0123456789abcdef0123456789abcdef"
	testValue = "tok-VALUE-42"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestSubstitute(t *testing.T) {
	for _, tt := range []struct {
		in, want, left string
		ok             bool
	}{
		{testPH, testValue, "", true},
		{"Bearer " + testPH, "Bearer " + testValue, "Bearer", true},
		{"token " + testPH, "token " + testValue, "token", true},
		{"Basic " + b64("x-access-token:"+testPH), "Basic " + b64("x-access-token:"+testValue), "x-access-token:", true},
		{"basic " + b64(testPH+":x-oauth-basic"), "basic " + b64(testValue+":x-oauth-basic"), ":x-oauth-basic", true},
		{"Basic " + b64(testPH+":"+testPH), "Basic " + b64(testValue+":"+testValue), ":", true},
		// Not a place a placeholder may be: unchanged, all of it left.
		{"Bearer pre" + testPH, "Bearer pre" + testPH, "Bearer pre" + testPH, false},
		{"Bearer " + testPH + " x", "Bearer " + testPH + " x", "Bearer " + testPH + " x", false},
		{"Basic " + b64("u:pre"+testPH), "Basic " + b64("u:pre"+testPH), "u:pre" + testPH, false},
		{"Basic !!!", "Basic !!!", "Basic !!!", false},
		{"Bearer other", "Bearer other", "Bearer other", false},
	} {
		got, left, ok := substitute(tt.in, testPH, testValue)
		if got != tt.want || left != tt.left || ok != tt.ok {
			t.Errorf("substitute(%q) = %q, %q, %v; want %q, %q, %v", tt.in, got, left, ok, tt.want, tt.left, tt.ok)
		}
	}
}

// FuzzSubstitute: whatever the code sends, a swap leaves no placeholder in
// the result, and what is left (what the broker screens) holds every
// placeholder the result would have carried unswapped.
func FuzzSubstitute(f *testing.F) {
	for _, s := range []string{testPH, "Bearer " + testPH, "Basic " + b64("u:"+testPH), "Basic " + b64(testPH+":p"), "x y z", "Basic"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		out, left, ok := substitute(v, testPH, testValue)
		if !ok {
			if out != v {
				t.Fatalf("not swapped but changed: %q -> %q", v, out)
			}
			return
		}
		plain := out
		if scheme, cred, found := strings.Cut(out, " "); found && strings.EqualFold(scheme, "Basic") {
			d, err := base64.StdEncoding.DecodeString(cred)
			if err != nil {
				t.Fatalf("swapped Basic does not decode: %q", out)
			}
			plain = string(d)
		}
		if strings.Contains(plain, testPH) && !strings.Contains(left, testPH) {
			t.Fatalf("a placeholder passes unscreened: %q -> %q (left %q)", v, out, left)
		}
		if !strings.Contains(plain, testValue) {
			t.Fatalf("swapped without the value: %q -> %q", v, out)
		}
	})
}

// TestWriteWholeAnswer: a small answer written by writeWholeAnswer is the
// same bytes as Response.Write makes of it; what it does not cover it
// leaves to Response.Write, having written nothing.
func TestWriteWholeAnswer(t *testing.T) {
	for _, tt := range []struct {
		name, raw, method string
		close, covered    bool
	}{
		{"plain", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", "GET", false, true},
		{"close", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "GET", true, true},
		{"own text", "HTTP/1.1 201 Made It\r\nX-B: 2\r\nX-A: 1\r\nX-A: 3\r\nContent-Length: 2\r\n\r\nok", "POST", false, true},
		{"no text", "HTTP/1.1 299\r\nContent-Length: 2\r\n\r\nok", "GET", false, true},
		{"http/1.0", "HTTP/1.0 404 Not Found\r\nContent-Length: 3\r\n\r\nnop", "GET", false, true},
		{"redirect", "HTTP/1.1 302 Found\r\nLocation: https://example.test/\r\nContent-Length: 1\r\n\r\nx", "GET", false, true},
		{"empty", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "GET", false, false},
		{"head", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", false, false},
		{"connection kept", "HTTP/1.1 200 OK\r\nConnection: x-other\r\nContent-Length: 2\r\n\r\nok", "GET", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parse := func() (*http.Response, []byte) {
				req, _ := http.NewRequest(tt.method, "https://example.test/", nil)
				resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(tt.raw)), req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body = io.NopCloser(bytes.NewReader(body))
				resp.Close = tt.close
				return resp, body
			}
			var got, want bytes.Buffer
			resp, body := parse()
			gw := bufio.NewWriter(&got)
			covered := writeWholeAnswer(gw, resp, body)
			gw.Flush()
			if covered != tt.covered {
				t.Fatalf("covered = %v, want %v", covered, tt.covered)
			}
			if !covered {
				if got.Len() != 0 {
					t.Fatalf("wrote %q on an answer it does not cover", got.String())
				}
				return
			}
			resp, _ = parse()
			if err := resp.Write(&want); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("got  %q\nwant %q", got.String(), want.String())
			}
		})
	}
}

// TestWriteWholeRequest: an outgoing request written by writeWholeRequest
// is the same bytes as Request.Write makes of it; what it does not cover
// it leaves to Request.Write, having written nothing.
func TestWriteWholeRequest(t *testing.T) {
	for _, tt := range []struct {
		name, raw string
		host      string // replaces the parsed Host when set
		trailer   bool
		covered   bool
	}{
		{"get", "GET /x HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer v\r\nAccept: */*\r\n\r\n", "", false, true},
		{"own agent", "GET /x HTTP/1.1\r\nHost: h.test:8443\r\nUser-Agent:  curl/8 \r\n\r\n", "", false, true},
		{"empty agent", "GET /x HTTP/1.1\r\nHost: h.test\r\nUser-Agent:\r\n\r\n", "", false, true},
		{"escapes", "GET /a%20b/%2F?q=%41&r=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-A: 1\r\nX-A: 2\r\n\r\n", "", false, true},
		{"post", "POST /p HTTP/1.1\r\nHost: h.test\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello", "", false, true},
		{"post empty", "POST /p HTTP/1.1\r\nHost: h.test\r\nContent-Length: 0\r\n\r\n", "", false, true},
		{"delete", "DELETE /d HTTP/1.1\r\nHost: h.test\r\n\r\n", "", false, true},
		{"head", "HEAD /d HTTP/1.1\r\nHost: h.test\r\n\r\n", "", false, true},
		{"options star", "OPTIONS * HTTP/1.1\r\nHost: h.test\r\n\r\n", "", false, true},
		{"ipv6", "GET / HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n", "", false, true},
		{"zone", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", "[fe80::1%25eth0]:443", false, false},
		{"unicode host", "GET / HTTP/1.1\r\nHost: h\r\n\r\n", "bücher.test", false, false},
		{"trailer", "POST /p HTTP/1.1\r\nHost: h.test\r\nContent-Length: 1\r\n\r\nx", "", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mk := func() *http.Request {
				req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tt.raw)))
				if err != nil {
					t.Fatal(err)
				}
				out := &http.Request{Method: req.Method, URL: req.URL, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: req.Header, Host: req.Host, ContentLength: req.ContentLength, Body: req.Body}
				if tt.host != "" {
					out.Host = tt.host
				}
				if req.Body != http.NoBody {
					b, _ := io.ReadAll(req.Body)
					out.Body = memBody{bytes.NewReader(b)}
				}
				if tt.trailer {
					out.Trailer = http.Header{"X-T": nil}
				}
				return out
			}
			var got, want bytes.Buffer
			gw := bufio.NewWriter(&got)
			covered := writeWholeRequest(gw, mk())
			gw.Flush()
			if covered != tt.covered {
				t.Fatalf("covered = %v, want %v", covered, tt.covered)
			}
			if !covered {
				if got.Len() != 0 {
					t.Fatalf("wrote %q on a request it does not cover", got.String())
				}
				return
			}
			if err := mk().Write(&want); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("got  %q\nwant %q", got.String(), want.String())
			}
		})
	}
}

// TestHopRequest: the fields dropped from an intercepted request, and
// only those (hop-by-hop and the proxy's own, canonical names).
func TestHopRequest(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool
	}{
		{"Connection", true}, {"Proxy-Connection", true}, {"Keep-Alive", true}, {"Proxy-Authorization", true},
		{"Proxy-Authenticate", true}, {"Te", true}, {"Transfer-Encoding", true}, {"Upgrade", true}, {"Expect", true},
		{"Authorization", false}, {"Accept-Encoding", false}, {"Trailer", false}, {"Host", false}, {"", false},
		{"connection", false}, // not canonical: the parsed block has none
	} {
		if got := hopRequest(c.name); got != c.want {
			t.Errorf("hopRequest(%q): got %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAnswerBufNeverNil: a small answer's buffer is never nil, an empty
// one on a new connection included, since relay reads nil as the
// streaming path.
func TestAnswerBufNeverNil(t *testing.T) {
	for _, n := range []int{0, 1, maxReusedAnswer, maxReusedAnswer + 1} {
		s := &interceptSession{}
		if got := s.answerBuf(n); got == nil || len(got) != n {
			t.Errorf("answerBuf(%d) = nil or %d bytes, want %d bytes, not nil", n, len(got), n)
		}
	}
}
