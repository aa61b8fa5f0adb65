package broker

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// benchBody is a realistic small model request.
const benchBody = `{"model":"policy-model","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"What time is it?"}],` +
	`"tools":[{"type":"function","function":{"name":"host_clock","description":"Read the current UTC time","parameters":{"type":"object","properties":{},"additionalProperties":false}}}]}`

func benchCalls(b *testing.B, client *http.Client, url string, reset func()) {
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if reset != nil {
			reset()
		}
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(benchBody))
		req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Microseconds()), "median-µs")
}

// BenchmarkModelDirect calls the fake upstream without the broker.
func BenchmarkModelDirect(b *testing.B) {
	up := newFakeUpstream(&testing.T{}, okAnswer)
	defer up.srv.Close()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	benchCalls(b, c, up.srv.URL+"/v1/chat/completions", nil)
}

// BenchmarkModelViaBroker makes the same call through the broker on its Unix
// socket; the difference of the medians is the broker's added latency.
func BenchmarkModelViaBroker(b *testing.B) {
	t := &testing.T{}
	h := newHarness(t, func(p *policy.Policy) { p.Limits.MaxCalls = 1000 })
	defer h.cancel()
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.sock)
		},
		DisableCompression: true,
	}}
	reset := func() { h.broker.mu.Lock(); h.broker.calls = 0; h.broker.mu.Unlock() }
	benchCalls(b, c, "http://broker/model", reset)
}
