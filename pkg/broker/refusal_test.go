package broker

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
)

// countingReader records whether the handler read the body at all.
type countingReader struct {
	r    *strings.Reader
	read int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

func serveDirect(b *Broker, path, body string) (*httptest.ResponseRecorder, *countingReader) {
	cr := &countingReader{r: strings.NewReader(body)}
	req := httptest.NewRequest(http.MethodPost, path, cr)
	req.ContentLength = int64(len(body))
	req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	b.ServeHTTP(rec, req)
	return rec, cr
}

func TestRefusalBudgetEndsTheTurn(t *testing.T) {
	h := newHarness(t, nil)
	// Upstream failures (5xx) are not the guest's refusals.
	h.model.set(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	for i := 0; i < MaxRefusals+2; i++ {
		if code, _, _ := h.do("/model", goodModel); code != http.StatusBadGateway {
			t.Fatalf("upstream failure %d: status %d, want 502", i, code)
		}
	}
	h.model.set(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(okAnswer)) })
	for i := 0; i < MaxRefusals; i++ {
		if code, _, _ := h.do("/nope", `{}`); code != http.StatusNotFound {
			t.Fatalf("refusal %d: status %d, want 404", i, code)
		}
	}
	before := h.upstreamSeen()
	rec, cr := serveDirect(h.broker, "/model", goodModel)
	if rec.Code != http.StatusTooManyRequests || strings.TrimSpace(rec.Body.String()) != `{"error":"refusal limit reached"}` {
		t.Errorf("after %d refusals a good call got %d %s, want 429 refusal limit reached", MaxRefusals, rec.Code, rec.Body)
	}
	if cr.read != 0 {
		t.Errorf("the broker read %d body bytes of a turn past its refusal budget", cr.read)
	}
	if rec.Header().Get("Connection") != "close" {
		t.Errorf("a refusal kept its connection open")
	}
	if after := h.upstreamSeen(); after != before {
		t.Errorf("upstream saw %d calls after the refusal budget was spent", after-before)
	}
	if !strings.Contains(h.logs.String(), "refusal budget spent") {
		t.Errorf("no log line says the refusal budget was spent")
	}
	// Past the budget, requests on new connections are refused too, and
	// none gets a log line of its own (a loop of them would otherwise flood
	// the journal): the broker logs their count once, when it stops.
	refusedLines := func() int { return strings.Count(h.logs.String(), `"call refused"`) }
	lines := refusedLines()
	const more = 200
	for i := 0; i < more; i++ {
		if code, _, _ := h.do("/nope", `{}`); code != http.StatusTooManyRequests {
			t.Fatalf("request %d past the budget: status %d, want 429", i, code)
		}
	}
	if got := refusedLines() - lines; got != 0 {
		t.Errorf("%d requests past the refusal budget wrote %d log lines, want 0", more, got)
	}
	h.cancel()
	<-h.done
	h.done <- nil // for the harness cleanup
	// more, and the one refused after the budget was spent above.
	want := fmt.Sprintf(`"requests":%d}`, more+1)
	found := false
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"requests refused unread after the refusal budget"`) && strings.HasSuffix(line, want) {
			found = true
		}
	}
	if !found {
		t.Errorf("at shutdown no line counts the %d requests refused unread (%s):\n%s", more+1, want, h.logs.String())
	}
}

func TestCheapRefusalsComeBeforeTheBody(t *testing.T) {
	t.Run("call limit", func(t *testing.T) {
		h := newHarness(t, func(p *policy.Policy) { p.Limits.MaxCalls = 1 })
		if code, _, _ := h.do("/model", goodModel); code != 200 {
			t.Fatalf("first call: %d", code)
		}
		rec, cr := serveDirect(h.broker, "/model", goodModel)
		if rec.Code != http.StatusTooManyRequests || cr.read != 0 {
			t.Errorf("over the call limit: status %d after reading %d body bytes, want 429 before reading", rec.Code, cr.read)
		}
	})
	t.Run("in flight", func(t *testing.T) {
		h := newHarness(t, nil)
		h.broker.inFlight.Store(true)
		rec, cr := serveDirect(h.broker, "/model", goodModel)
		h.broker.inFlight.Store(false)
		if rec.Code != http.StatusTooManyRequests || cr.read != 0 {
			t.Errorf("while a call is in flight: status %d after reading %d body bytes, want 429 before reading", rec.Code, cr.read)
		}
	})
	t.Run("token budget", func(t *testing.T) {
		h := newHarness(t, nil)
		body := tokenDense(int(h.pol.Limits.MaxRequestBytes))
		allocs := testing.AllocsPerRun(5, func() {
			h.broker.refusals.Store(0)
			if rec, _ := serveDirect(h.broker, "/model", body); rec.Code != http.StatusBadRequest {
				t.Fatalf("token-dense body: status %d, want 400", rec.Code)
			}
		})
		// Decoding it took about 87,500 allocations (BenchmarkRefusedTokenDenseBody).
		if allocs > 500 {
			t.Errorf("refusing a token-dense body took %.0f allocations: it was decoded", allocs)
		}
	})
}

// The worker's densest realistic request stays within the token budget.
func TestTokenBudgetFitsTheWorker(t *testing.T) {
	h := newHarness(t, nil)
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"system","content":"p"}`)
	// Short tool-call groups, the densest thing the worker sends, up to its
	// 192 KiB context bound.
	for b.Len() < 192<<10 {
		b.WriteString(`,{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"memory_get","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}`)
	}
	b.WriteString(`],"tools":[`)
	for i := 0; b.Len() < 224<<10; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"type":"function","function":{"name":"t","description":"d","parameters":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]}}}`)
	}
	b.WriteString(`]}`)
	budget := MaxRequestTokens(h.pol.Limits.MaxRequestBytes)
	if err := strictjson.CountTokens([]byte(b.String()), budget); err != nil {
		t.Errorf("a %d-byte worker-shaped request exceeds the token budget %d: %v", b.Len(), budget, err)
	}
	n := 0
	for strictjson.CountTokens([]byte(b.String()), n) != nil {
		n += 256
	}
	t.Logf("worker-shaped request: %d bytes, about %d tokens (budget %d)", b.Len(), n, budget)
}
