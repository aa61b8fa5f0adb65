package hosttool

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

func TestBodyText(t *testing.T) {
	cases := []struct {
		name, ct, body string
		max            int
		want, reason   string
	}{
		{"plain", "text/plain", "hello\nworld", 100, "hello\nworld", ""},
		{"plain utf8 charset", "text/plain; charset=UTF-8", "Zoë", 100, "Zoë", ""},
		{"json as is", "application/json", `{"a": [1, 2]}`, 100, `{"a": [1, 2]}`, ""},
		{"problem+json", "application/problem+json", `{"title":"x"}`, 100, `{"title":"x"}`, ""},
		{"latin1", "text/plain; charset=iso-8859-1", "caf\xe9", 100, "café", ""},
		{"invalid utf8 replaced", "text/plain", "a\xffb", 100, "a\uFFFDb", ""},
		{"controls replaced", "text/plain", "a\x00b\x1bc\td\ne\x7f", 100, "a b c\td\ne ", ""},
		{"truncated", "text/plain", strings.Repeat("x", 50), 10, strings.Repeat("x", 10) + TruncatedMarker, ""},
		{"truncated on a rune boundary", "text/plain", "ééééé", 5, "éé" + TruncatedMarker, ""},
		{"exact max", "text/plain", "12345", 5, "12345", ""},
		{"html", "text/html; charset=utf-8", `<html><head><title>T</title><style>p{}</style><script>alert(1)</script></head><body><h1>Head</h1><p>One &amp; <b>two</b></p><ul><li>a</li><li>b</li></ul><noscript>no</noscript></body></html>`, 1000, "T\nHead\nOne & two\na\nb", ""},
		{"xhtml", "application/xhtml+xml", `<html><body><p>x</p><p>y</p></body></html>`, 100, "x\ny", ""},
		{"html whitespace collapsed", "text/html", "<p>  a \n\n b  </p><div>c</div>", 100, "a b\nc", ""},
		{"html glued text", "text/html", "a<b>c</b> d", 100, "ac d", ""},
		{"html svg and template dropped", "text/html", "<p>k</p><svg><text>s</text></svg><template>t</template><iframe>i</iframe>", 100, "k", ""},
		{"html truncated", "text/html", "<p>" + strings.Repeat("word ", 100) + "</p>", 20, "word word word word" + TruncatedMarker, ""},
		{"html entity nbsp", "text/html", "a&nbsp;b", 100, "a b", ""},
		{"html unterminated script swallows the rest", "text/html", "<p>x</p><script>var a = '</p>'", 100, "x", ""},
		{"image refused", "image/png", "\x89PNG", 100, "", "content type not allowed"},
		{"pdf refused", "application/pdf", "%PDF", 100, "", "content type not allowed"},
		{"octet refused", "application/octet-stream", "x", 100, "", "content type not allowed"},
		{"javascript refused", "application/javascript", "x", 100, "", "content type not allowed"},
		{"xml refused", "application/xml", "<a/>", 100, "", "content type not allowed"},
		{"no content type", "", "x", 100, "", "content type missing or invalid"},
		{"bad content type", "text/", "x", 100, "", "content type missing or invalid"},
		{"unknown charset", "text/plain; charset=x-klingon", "x", 100, "", "charset not supported"},
	}
	for _, tc := range cases {
		got, reason := bodyText(tc.ct, []byte(tc.body), tc.max)
		if got != tc.want || reason != tc.reason {
			t.Errorf("%s: got %q (%q), want %q (%q)", tc.name, got, reason, tc.want, tc.reason)
		}
		if tc.reason == "" && len(got) > tc.max+len(TruncatedMarker) {
			t.Errorf("%s: %d bytes over the bound %d", tc.name, len(got), tc.max)
		}
	}
}

// fetchEnv is a Fetcher whose resolver answers one public address for
// www.example.com and whose dial seam routes it to a loopback server.
func fetchEnv(t *testing.T, h http.Handler) *safefetch.Fetcher {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &safefetch.Fetcher{Dialer: &safefetch.Dialer{
		Resolver: staticResolver{"www.example.com.": {netip.MustParseAddr("93.184.216.34")}, "loop.example.com.": {netip.MustParseAddr("127.0.0.1")}},
		DialAddr: func(ctx context.Context, network, address string) (net.Conn, error) {
			if address != "93.184.216.34:80" {
				return nil, errors.New("no route (test)")
			}
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		},
	}}
}

type staticResolver map[string][]netip.Addr

func (s staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := s[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestFetch(t *testing.T) {
	f := fetchEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<title>Hi</title><p>body text</p>")
		case "/json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"k":"v"}`)
		case "/img":
			w.Header().Set("Content-Type", "image/png")
			io.WriteString(w, "png")
		case "/missing":
			http.NotFound(w, r)
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, strings.Repeat("x", 2000))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/to-loopback":
			http.Redirect(w, r, "http://127.0.0.1/", http.StatusFound)
		}
	}))
	bounds := FetchBounds{Timeout: 5 * time.Second, MaxBytes: 1000, MaxTextBytes: 100}
	cases := []struct {
		name, input string
		bounds      *FetchBounds
		want        string
		err         error
		log         FetchLog
	}{
		{"html", `{"url":"http://www.example.com/page?secret=1"}`, nil, "Hi\nbody text", nil, FetchLog{Host: "www.example.com", Status: 200}},
		{"json", `{"url":"http://www.example.com/json"}`, nil, `{"k":"v"}`, nil, FetchLog{Host: "www.example.com", Status: 200}},
		{"image", `{"url":"http://www.example.com/img"}`, nil, "", ErrFailed, FetchLog{Host: "www.example.com", Status: 200, Reason: "content type not allowed"}},
		{"404", `{"url":"http://www.example.com/missing"}`, nil, "", ErrFailed, FetchLog{Host: "www.example.com", Status: 404, Reason: "status not 2xx"}},
		{"body over maxBytes", `{"url":"http://www.example.com/big"}`, nil, "", ErrTooLarge, FetchLog{Host: "www.example.com", Reason: "body too large"}},
		{"text truncated", `{"url":"http://www.example.com/big"}`, &FetchBounds{Timeout: 5 * time.Second, MaxBytes: 5000, MaxTextBytes: 10}, "xxxxxxxxxx" + TruncatedMarker, nil, FetchLog{Host: "www.example.com", Status: 200}},
		{"slow", `{"url":"http://www.example.com/slow"}`, &FetchBounds{Timeout: 200 * time.Millisecond, MaxBytes: 1000, MaxTextBytes: 100}, "", ErrTimeout, FetchLog{Host: "www.example.com", Reason: "deadline exceeded"}},
		{"loopback", `{"url":"http://127.0.0.1/"}`, nil, "", ErrFailed, FetchLog{Host: "127.0.0.1", Reason: "address refused"}},
		{"name of loopback", `{"url":"http://loop.example.com/"}`, nil, "", ErrFailed, FetchLog{Host: "loop.example.com", Reason: "address refused"}},
		{"metadata", `{"url":"http://169.254.169.254/latest/meta-data/"}`, nil, "", ErrFailed, FetchLog{Host: "169.254.169.254", Reason: "address refused"}},
		{"redirect to loopback", `{"url":"http://www.example.com/to-loopback"}`, nil, "", ErrFailed, FetchLog{Host: "www.example.com", Reason: "redirect refused"}},
		{"decimal", `{"url":"http://2130706433/"}`, nil, "", ErrFailed, FetchLog{Reason: "URL refused"}},
		{"userinfo", `{"url":"http://u:p@www.example.com/"}`, nil, "", ErrFailed, FetchLog{Reason: "URL refused"}},
		{"file", `{"url":"file:///etc/passwd"}`, nil, "", ErrFailed, FetchLog{Reason: "URL refused"}},
		{"extra field", `{"url":"http://www.example.com/page","method":"POST"}`, nil, "", ErrFailed, FetchLog{Reason: `input is not {"url": string}`}},
		{"url not a string", `{"url":5}`, nil, "", ErrFailed, FetchLog{Reason: `input is not {"url": string}`}},
		{"empty url", `{"url":""}`, nil, "", ErrFailed, FetchLog{Reason: `input is not {"url": string}`}},
		{"no url", `{}`, nil, "", ErrFailed, FetchLog{Reason: `input is not {"url": string}`}},
		{"bad options", `{"url":"http://www.example.com/page"}`, &FetchBounds{Timeout: 0, MaxBytes: 1000, MaxTextBytes: 100}, "", ErrFailed, FetchLog{Host: "www.example.com", Reason: "options out of range"}},
	}
	for _, tc := range cases {
		b := bounds
		if tc.bounds != nil {
			b = *tc.bounds
		}
		got, lg, err := Fetch(context.Background(), f, []byte(tc.input), b)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) || lg != tc.log {
			t.Errorf("%s: got %q, %+v, %v; want %q, %+v, %v", tc.name, got, lg, err, tc.want, tc.log, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error names the URL: %v", tc.name, err)
		}
	}
}
