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
