package broker

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// echoText is what an echo destination sends back: the request's header
// block (sorted) and its body.
func echoText(r *http.Request) []byte {
	var b bytes.Buffer
	names := make([]string, 0, len(r.Header))
	for k := range r.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range r.Header[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	io.Copy(&b, r.Body)
	return b.Bytes()
}

// encodeBody compresses p as the named Content-Encoding would (rawdeflate:
// a bare DEFLATE stream labelled "deflate", as some servers send it).
func encodeBody(t testing.TB, enc string, p []byte) []byte {
	var b bytes.Buffer
	var w io.WriteCloser
	switch enc {
	case "gzip":
		w = gzip.NewWriter(&b)
	case "deflate":
		w = zlib.NewWriter(&b)
	case "rawdeflate":
		w, _ = flate.NewWriter(&b, flate.DefaultCompression)
	case "br":
		w = brotli.NewWriter(&b)
	default:
		t.Fatalf("unknown encoding %q", enc)
	}
	w.Write(p)
	w.Close()
	return b.Bytes()
}

// percentAll escapes every byte of p as %XX: hex upper, lower, or
// alternating per byte (mixed).
func percentAll(p []byte, hexCase string) []byte {
	const up, lo = "0123456789ABCDEF", "0123456789abcdef"
	out := make([]byte, 0, 3*len(p))
	for i, c := range p {
		digits := up
		if hexCase == "lower" || hexCase == "mixed" && i%2 == 1 {
			digits = lo
		}
		out = append(out, '%', digits[c>>4], digits[c&15])
	}
	return out
}

// runSideViews is what the run could make of an answer it got: the header
// block, the body, the body decompressed by every decoder a client has and
// the body percent-decoded. It is the test's own oracle, independent of the
// broker's matcher.
func runSideViews(hdr http.Header, body string) map[string]string {
	views := map[string]string{"headers": fmt.Sprint(hdr), "body": body}
	readers := map[string]func(io.Reader) (io.Reader, error){
		"gunzip":     func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
		"zlib":       func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) },
		"rawdeflate": func(r io.Reader) (io.Reader, error) { return flate.NewReader(r), nil },
		"brotli":     func(r io.Reader) (io.Reader, error) { return brotli.NewReader(r), nil },
	}
	for name, open := range readers {
		if r, err := open(strings.NewReader(body)); err == nil {
			out, _ := io.ReadAll(r) // what was decoded before any error counts
			views[name] = string(out)
		}
	}
	var dec []byte
	for i := 0; i < len(body); i++ {
		if body[i] == '%' && i+2 < len(body) {
			var c byte
			if _, err := fmt.Sscanf(body[i+1:i+3], "%02x", &c); err == nil {
				dec = append(dec, c)
				i += 2
				continue
			}
		}
		dec = append(dec, body[i])
	}
	views["percent-decoded"] = string(dec)
	return views
}

// tokenReached names the first view of the run's answer holding the token.
func tokenReached(hdr http.Header, body string) string {
	for name, v := range runSideViews(hdr, body) {
		if strings.Contains(v, credToken) {
			return name
		}
	}
	return ""
}

// TestCredentialedEgressEncodedEcho is issue 33 item 3 against a loopback
// HTTPS echo server: an answer still compressed (gzip, zlib deflate, raw
// deflate, br) after the broker asked for identity is refused, an echo
// with every byte %XX-escaped is cut, and the run's side gets 0 bytes of
// the token from either; the destination is asked for identity whatever
// the run sent, and an identity answer without the token passes.
func TestCredentialedEgressEncodedEcho(t *testing.T) {
	s := newCredServer(t, "http://127.0.0.1:1")
	var mu sync.Mutex
	var acceptSeen []string
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		acceptSeen = append(acceptSeen, strings.Join(r.Header.Values("Accept-Encoding"), ","))
		mu.Unlock()
		enc, ok := strings.CutPrefix(r.URL.Path, "/echo/")
		switch {
		case r.URL.Path == "/negotiated": // compresses only when asked, as a server should
			body := []byte("PRIVATE-BODY-91d3")
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				body = encodeBody(t, "gzip", body)
			}
			w.Write(body)
		case ok && strings.HasPrefix(enc, "pct-"):
			w.Write(percentAll(echoText(r), strings.TrimPrefix(enc, "pct-")))
		case ok: // compresses whatever was asked: a hostile or careless echo
			label := enc
			if enc == "rawdeflate" {
				label = "deflate"
			}
			w.Header().Set("Content-Encoding", label)
			w.Write(encodeBody(t, enc, echoText(r)))
		default:
			http.NotFound(w, r)
		}
	})
	lastAccept := func() string { mu.Lock(); defer mu.Unlock(); return acceptSeen[len(acceptSeen)-1] }
	askAll := http.Header{"Accept-Encoding": {"gzip, deflate, br"}}

	for _, enc := range []string{"gzip", "deflate", "rawdeflate", "br"} {
		t.Run("compressed echo "+enc+" is refused", func(t *testing.T) {
			r := newCredRig(t, s, true)
			code, body, hdr := r.get(r.url("/echo/"+enc), withAuth(askAll, r.auth()), false)
			if view := tokenReached(hdr, body); view != "" {
				t.Errorf("the token reached the run (%s of a %d answer)", view, code)
			}
			if code != http.StatusBadGateway || body != "destination unreachable\n" {
				t.Errorf("got %d %q, want 502 with the generic text", code, body)
			}
			if got := lastAccept(); got != "identity" {
				t.Errorf("the destination was asked for Accept-Encoding %q, want identity", got)
			}
			r.waitLog(`"msg":"egress refused"`, "still encoded", `"credential":"git"`, `"dest":"`+s.addr()+`"`)
			checkNoToken(t, "the broker's log", r.logs.String())
		})
	}
	for _, hexCase := range []string{"upper", "lower", "mixed"} {
		t.Run("percent-escaped echo "+hexCase+" is cut", func(t *testing.T) {
			r := newCredRig(t, s, true)
			code, body, hdr := r.get(r.url("/echo/pct-"+hexCase), r.auth(), false)
			if view := tokenReached(hdr, body); view != "" {
				t.Errorf("the token reached the run (%s of a %d answer)", view, code)
			}
			if code == http.StatusOK && !strings.Contains(body, "<cut") {
				t.Errorf("got %d with the whole answer, want it cut", code)
			}
			checkNoToken(t, "the broker's log", r.logs.String())
		})
	}
	t.Run("an identity answer passes whatever the run asked for", func(t *testing.T) {
		r := newCredRig(t, s, true)
		for _, hdr := range []http.Header{nil, {"Accept-Encoding": {"gzip"}}, askAll} {
			code, body, got := r.get(r.url("/negotiated"), withAuth(hdr, r.auth()), false)
			if code != http.StatusOK || body != "PRIVATE-BODY-91d3" || got.Get("Content-Encoding") != "" {
				t.Errorf("asking %v: %d %q (Content-Encoding %q), want 200 and the identity body",
					hdr, code, body, got.Get("Content-Encoding"))
			}
			if a := lastAccept(); a != "identity" {
				t.Errorf("asking %v: the destination was asked for %q, want identity", hdr, a)
			}
		}
	})
}

// TestCredentialedEgressHeaderAlias: a run's header whose name folds to the
// credential header's (case, and '_' or another separator for '-': CGI,
// PHP and Rack read Private_Token and Private-Token both as
// HTTP_PRIVATE_TOKEN) is refused before the destination is reached.
func TestCredentialedEgressHeaderAlias(t *testing.T) {
	s := newCredServer(t, "http://127.0.0.1:1")
	r := newCredRigWith(t, s, func(g *policy.Egress) {
		g.Credentials[0].Header, g.Credentials[0].Format = "Private-Token", policy.FormatRaw
	}, nil)
	for _, name := range []string{"Private_Token", "private_token", "PRIVATE_TOKEN", "Private_token", "Private.Token"} {
		before := s.requests()
		code, body, hdr := r.get(r.url("/private"), http.Header{"Private-Token": {r.env.Env["GIT_TOKEN"]}, name: {"guessed"}}, false)
		if code != http.StatusBadRequest || body != "bad proxy request\n" {
			t.Errorf("%s: %d %q, want 400", name, code, body)
		}
		if n := s.requests() - before; n != 0 {
			t.Errorf("%s: the destination was reached %d times", name, n)
		}
		if view := tokenReached(hdr, body); view != "" {
			t.Errorf("%s: the token reached the run (%s)", name, view)
		}
	}
	// A name that only looks alike is not refused.
	before := s.requests()
	if code, _, _ := r.get(r.url("/private"), http.Header{"Private-Token": {r.env.Env["GIT_TOKEN"]}, "Private-Tokens": {"x"}}, false); code == http.StatusBadRequest {
		t.Errorf("Private-Tokens: 400, want it passed on")
	}
	if s.requests() == before {
		t.Errorf("Private-Tokens: the destination was not reached")
	}
	r.waitLog(`"msg":"egress refused"`, "own credential header", `"credential":"git"`)
	checkNoToken(t, "the broker's log", r.logs.String())
}

// withAuth is h with the declared header's placeholder added.
func withAuth(h, auth http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	for k, v := range auth {
		out[k] = v
	}
	return out
}
