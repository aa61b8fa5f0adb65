package broker

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// BenchmarkCredentialedEgress measures one request through a run broker's
// proxy route, side by side (issue 27's closing note): a plain proxied
// http request (absolute form, the broker forwards it), the same https
// server reached through CONNECT (the client does TLS, no credential), and
// the credentialed route (the code's placeholder in an https request, the
// broker intercepts the CONNECT, opens verified TLS, swaps in the value and
// guards the answer against reflection; BenchmarkInterceptPaired pairs it
// with the tunnel on reused connections). Every
// request is a fresh connection on each side (the proxy keeps none alive),
// so TLS handshakes are in the numbers, as in a run. Sizes: a small answer
// and 1 MiB (the reflection guard's per-byte cost).
func BenchmarkCredentialedEgress(b *testing.B) {
	for _, size := range []int{16, 1 << 20} {
		body := strings.Repeat("x", size)
		plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
		b.Cleanup(plain.Close)
		s := newCredServer(b, "http://127.0.0.1:1")
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
		// A fresh run broker per measurement, with the largest byte budget
		// a grant may have: the benchmark must not meet the run's bound.
		rig := func(b *testing.B, grant bool) *credRig {
			return newCredRigWith(b, s, func(g *policy.Egress) {
				g.MaxBytesIn, g.MaxBytesOut = policy.MaxEgressBytes, policy.MaxEgressBytes
				if !grant {
					g.Credentials, g.TestRootCA = nil, ""
				}
			}, nil, plain.Listener.Addr().String())
		}
		open := func(b *testing.B, c *http.Client, rawURL string, hdr http.Header) {
			req, _ := http.NewRequest(http.MethodGet, rawURL, nil)
			req.Header = hdr
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != int64(size) {
				b.Fatalf("%s: status %d, %d bytes, want %d", rawURL, resp.StatusCode, n, size)
			}
		}
		name := map[int]string{16: "16B", 1 << 20: "1MiB"}[size]
		b.Run("plain-http/"+name, func(b *testing.B) {
			c := rig(b, true).client(false)
			for b.Loop() {
				open(b, c, plain.URL+"/", nil)
			}
		})
		b.Run("connect-https-client-tls/"+name, func(b *testing.B) {
			c := rig(b, false).client(false)
			tok := http.Header{"Authorization": {"Bearer " + credToken}} // the client holds it: what injection avoids
			for b.Loop() {
				open(b, c, "https://"+s.addr()+"/x", tok)
			}
		})
		b.Run("intercepted/"+name, func(b *testing.B) {
			r := rig(b, true)
			c := r.client(false)
			for b.Loop() {
				open(b, c, r.url("/x"), r.auth())
			}
		})
	}
}
