package egress

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// benchHead is a small request as Go's client sends it through the
// interception (BenchmarkInterceptPaired's).
const benchHead = "GET /private HTTP/1.1\r\nHost: 127.0.0.1:40000\r\nUser-Agent: Go-http-client/1.1\r\n" +
	"Authorization: Bearer sbxph_0123456789abcdef0123456789abcdef\r\nAccept-Encoding: gzip\r\n\r\n"

// BenchmarkReadRequestHead compares the strict reader with net/http's
// ReadRequest on benchHead (issue 37's per-request cost).
//
//	go test ./pkg/egress -run '^$' -bench ReadRequestHead
func BenchmarkReadRequestHead(b *testing.B) {
	sr := strings.NewReader("")
	br := bufio.NewReader(sr)
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		hr := headReader{br: br}
		for b.Loop() {
			sr.Reset(benchHead)
			br.Reset(sr)
			if _, err := hr.read(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sr.Reset(benchHead)
			br.Reset(sr)
			if _, err := http.ReadRequest(br); err != nil {
				b.Fatal(err)
			}
		}
	})
}
