package broker

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkIntercept compares one request intercepted by the broker (the
// code holds a placeholder; TLS terminated, checked, swapped, re-sent over
// the broker's TLS, the answer guarded) with the same request through a
// plain CONNECT tunnel (the code holds the token and does TLS end to end):
// a small and a 1 MiB answer, on a reused and on a fresh client
// connection. Issue 37's goal: small/reused intercepted <= 1.3x tunnel.
//
//	go test ./pkg/broker -run '^$' -bench Intercept -count 5
func BenchmarkIntercept(b *testing.B) {
	for _, mode := range []string{"tunnel", "intercept"} {
		r := newIcptRigWith(b, mode == "intercept")
		auth := "Bearer " + credToken
		tlsConf := r.git.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		if mode == "intercept" {
			auth = "Bearer " + r.ph("GIT_TOKEN")
			tlsConf = &tls.Config{RootCAs: r.roots}
		}
		for _, conn := range []string{"reused", "fresh"} {
			for _, path := range []string{"/private", "/big"} {
				size := map[string]string{"/private": "small", "/big": "1MiB"}[path]
				b.Run(mode+"/"+conn+"/"+size, func(b *testing.B) {
					tr := &http.Transport{Proxy: http.ProxyURL(r.proxy), TLSClientConfig: tlsConf,
						DisableKeepAlives: conn == "fresh", MaxIdleConnsPerHost: 1}
					defer tr.CloseIdleConnections()
					c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
					url := "https://" + r.git.addr() + path
					b.ReportAllocs()
					for b.Loop() {
						req, _ := http.NewRequest("GET", url, nil)
						req.Header.Set("Authorization", auth)
						resp, err := c.Do(req)
						if err != nil {
							b.Fatal(err)
						}
						n, err := io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if err != nil || resp.StatusCode != 200 || n == 0 {
							b.Fatalf("%d %d %v", resp.StatusCode, n, err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkInterceptPaired is BenchmarkIntercept's reused-connection cases
// measured pair by pair: each iteration sends the request once through the
// tunnel and once intercepted (alternating which goes first), so a load
// that drifts over the run weighs on both alike. It reports each side's
// mean and their ratio (intercepted / tunnel).
//
//	go test ./pkg/broker -run '^$' -bench InterceptPaired -count 5
func BenchmarkInterceptPaired(b *testing.B) {
	tun, icp := newIcptRigWith(b, false), newIcptRigWith(b, true)
	type side struct {
		c    *http.Client
		url  string
		auth string
	}
	// Each run closes its connections: the grant's connection slots are few.
	mk := func(b *testing.B, r *icptRig, conf *tls.Config, auth, path string) side {
		tr := &http.Transport{Proxy: http.ProxyURL(r.proxy), TLSClientConfig: conf, MaxIdleConnsPerHost: 1}
		b.Cleanup(tr.CloseIdleConnections)
		return side{&http.Client{Transport: tr, Timeout: 30 * time.Second}, "https://" + r.git.addr() + path, auth}
	}
	get := func(s side) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("GET", s.url, nil)
		req.Header.Set("Authorization", s.auth)
		resp, err := s.c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n == 0 {
			b.Fatalf("%d %d %v", resp.StatusCode, n, err)
		}
		return time.Since(start)
	}
	for _, path := range []string{"/private", "/big"} {
		size := map[string]string{"/private": "small", "/big": "1MiB"}[path]
		b.Run("reused/"+size, func(b *testing.B) {
			t := mk(b, tun, tun.git.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone(), "Bearer "+credToken, path)
			i := mk(b, icp, &tls.Config{RootCAs: icp.roots}, "Bearer "+icp.ph("GIT_TOKEN"), path)
			get(t) // the connections, off the clock
			get(i)
			var dt, di time.Duration
			n := 0
			for b.Loop() {
				if n%2 == 0 {
					dt += get(t)
					di += get(i)
				} else {
					di += get(i)
					dt += get(t)
				}
				n++
			}
			b.ReportMetric(float64(dt.Nanoseconds())/float64(n), "tunnel-ns/op")
			b.ReportMetric(float64(di.Nanoseconds())/float64(n), "intercept-ns/op")
			b.ReportMetric(float64(di)/float64(dt), "ratio")
		})
	}
}
