package broker

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/richroute"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// firstByte posts streamReq with c to url and returns the time to the first
// body byte, then drains the stream.
func firstByte(b *testing.B, c *http.Client, url string, hdr map[string]string) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(streamReq))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	began := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadByte(); err != nil {
		b.Fatal(err)
	}
	d := time.Since(began)
	io.Copy(io.Discard, br)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return d
}

// BenchmarkAnthropicFirstByte: time to the first streamed byte of a real-shaped
// stream, straight from the fake upstream and through the broker's model
// route (Unix socket, rebuild, headers, filter), each on warm connections.
func BenchmarkAnthropicFirstByte(b *testing.B) {
	stream := anthropictest.TextStream("claude-test", "Hello", ", world", "!")
	h := startAnthropicHarness(b, policy.CredentialAPIKey, 0, false)
	h.pol.Rich.MaxCalls = 1000
	hdr := map[string]string{"X-Api-Key": "sandbox-dummy-key", "Content-Type": "application/json"}
	direct := &http.Client{}
	viaBroker := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
	}}}
	for _, bc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"direct", direct, h.up.URL + "/v1/messages"},
		{"broker", viaBroker, "http://broker" + richroute.RouteAnthropicMessages},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				h.up.Push(anthropictest.Reply{Events: stream})
				h.broker.mu.Lock()
				h.broker.calls = 0 // the per-turn budget is not what is measured
				h.broker.mu.Unlock()
				total += firstByte(b, bc.c, bc.url, hdr)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/first-byte")
		})
	}
}
