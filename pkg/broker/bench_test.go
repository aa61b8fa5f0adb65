package broker

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
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

// tokenDense is a body of maxBytes made of as many JSON tokens as fit: the
// cheapest bytes for a guest, the dearest for a decoder (issue 18.2).
func tokenDense(maxBytes int) string {
	var b strings.Builder
	b.WriteString(`{"stream":true,"messages":[[]`)
	for b.Len()+5 < maxBytes {
		b.WriteString(`,[]`)
	}
	b.WriteString(`]}`)
	return b.String()
}

func benchRefused(b *testing.B, body string, reset bool, want int) {
	h := newHarness(&testing.T{}, func(p *policy.Policy) { p.Limits.MaxCalls = 1000 })
	defer h.cancel()
	if !reset {
		h.broker.refusals.Store(MaxRefusals)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if reset {
			h.broker.refusals.Store(0)
		}
		req := httptest.NewRequest(http.MethodPost, "/model", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.broker.ServeHTTP(rec, req)
		if rec.Code != want {
			b.Fatalf("status %d, want %d", rec.Code, want)
		}
	}
}

// BenchmarkRefusedWithinTokenBudget: the dearest refusal left, a body just
// under the token budget that is decoded and then refused.
func BenchmarkRefusedWithinTokenBudget(b *testing.B) {
	body := tokenDense(MaxRequestTokens(policy.DefaultLimits().MaxRequestBytes) * 3 / 2)
	if strictjson.CountTokens([]byte(body), MaxRequestTokens(policy.DefaultLimits().MaxRequestBytes)) != nil {
		b.Fatal("the body is over the token budget")
	}
	benchRefused(b, body, true, http.StatusBadRequest)
}

// BenchmarkRefusedAfterBudget: any request once the turn spent MaxRefusals.
func BenchmarkRefusedAfterBudget(b *testing.B) {
	benchRefused(b, tokenDense(int(policy.DefaultLimits().MaxRequestBytes)), false, http.StatusTooManyRequests)
}

// BenchmarkRefusedTokenDenseBody is the broker's cost of refusing one
// 256 KiB token-dense request (ns/op is CPU: one goroutine, no upstream).
func BenchmarkRefusedTokenDenseBody(b *testing.B) {
	h := newHarness(&testing.T{}, func(p *policy.Policy) { p.Limits.MaxCalls = 1000 })
	defer h.cancel()
	body := tokenDense(int(h.pol.Limits.MaxRequestBytes))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.broker.refusals.Store(0) // the cost of each refusal, not of the spent budget
		req := httptest.NewRequest(http.MethodPost, "/model", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.broker.ServeHTTP(rec, req)
		if rec.Code < 400 || rec.Code >= 500 {
			b.Fatalf("status %d, want a 4xx refusal", rec.Code)
		}
	}
}
