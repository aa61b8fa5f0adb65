package egress

import (
	"bufio"
	"io"
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

// benchAnswer is a small answer as the bench's destination sends it.
const benchAnswer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Mon, 07 Dec 2026 18:00:00 GMT\r\nContent-Length: 16\r\n\r\n0123456789abcdef"

// BenchmarkReadAnswer compares the answers' fast path with net/http's
// ReadResponse on benchAnswer.
//
//	go test ./pkg/egress -run '^$' -bench ReadAnswer
func BenchmarkReadAnswer(b *testing.B) {
	sr := strings.NewReader("")
	br := bufio.NewReader(sr)
	req := &http.Request{Method: "GET"}
	for _, bc := range []struct {
		name string
		read func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"fast", readAnswer}, {"net-http", http.ReadResponse}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sr.Reset(benchAnswer)
				br.Reset(sr)
				if _, err := bc.read(br, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriteFields compares writeFields with Header.WriteSubset on
// benchHead's outgoing header block.
//
//	go test ./pkg/egress -run '^$' -bench WriteFields
func BenchmarkWriteFields(b *testing.B) {
	h := http.Header{"User-Agent": {"Go-http-client/1.1"}, "Authorization": {"Bearer 0123456789abcdef0123456789abcdef"},
		"Accept-Encoding": {"identity"}, "X-Request-Id": {"abc"}}
	w := bufio.NewWriter(io.Discard)
	b.Run("writeFields", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeFields(w, h, requestFramed)
			w.Reset(io.Discard)
		}
	})
	exclude := map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true}
	b.Run("WriteSubset", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = h.WriteSubset(w, exclude)
			w.Reset(io.Discard)
		}
	})
}
