package broker

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// TestFetchTool runs fetch calls through a real broker with the production
// fetcher: the only reachable destination is the exact egressAllow entry (a
// loopback test server); everything else is refused with a generic error,
// reaches nothing, and the log names host and status, never path or body.
func TestFetchTool(t *testing.T) {
	var otherHits atomic.Int64
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, "<html><head><title>Menu</title><script>steal()</script></head><body><p>Soup of the day: BODY-MARKER</p></body></html>")
		case "/img":
			w.Header().Set("Content-Type", "image/png")
			io.WriteString(w, "png")
		case "/to-other":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		}
	}))
	defer page.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		io.WriteString(w, "other")
	}))
	defer other.Close()
	allowed := strings.TrimPrefix(page.URL, "http://")
	h := newHarness(t, func(p *policy.Policy) {
		p.Tools = append(p.Tools, policy.Tool{Name: "fetch", Kind: policy.KindFetch, TimeoutMs: 5000, MaxBytes: 4096, MaxTextBytes: 200})
		p.EgressAllow = []string{allowed}
	})

	code, body, _ := h.do("/tools/fetch", fmt.Sprintf(`{"url":%q}`, page.URL+"/page?token=QUERY-MARKER"))
	var got struct{ Result string }
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Result != "Menu\nSoup of the day: BODY-MARKER" {
		t.Fatalf("allowed fetch: %d %s", code, body)
	}

	refused := []string{
		other.URL + "/", // same address, another port
		"http://169.254.169.254/latest/meta-data/",                                // metadata
		"http://localhost" + allowed[strings.LastIndex(allowed, ":"):] + "/page",  // a name for the allowed address
		"http://2130706433" + allowed[strings.LastIndex(allowed, ":"):] + "/page", // encoded form of it
		page.URL + "/img", // content type
		page.URL + "/to-other?to=" + other.URL + "/", // redirect to the other port
		"file:///etc/passwd",
		"http://user:pw@" + allowed + "/page",
	}
	for _, u := range refused {
		code, body, _ := h.do("/tools/fetch", fmt.Sprintf(`{"url":%q}`, u))
		if code != http.StatusBadGateway || body != `{"error":"tool failed"}` {
			t.Errorf("%s: %d %s, want the generic tool failure", u, code, body)
		}
	}
	for _, in := range []string{`{"url":"` + page.URL + `/page","method":"POST"}`, `{"url":7}`, `{}`} {
		if code, body, _ := h.do("/tools/fetch", in); code != http.StatusBadGateway || body != `{"error":"tool failed"}` {
			t.Errorf("input %s: %d %s", in, code, body)
		}
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the second port was reached %d times", n)
	}
	logs := h.logs.String()
	for _, leak := range []string{"BODY-MARKER", "QUERY-MARKER", "/page", "steal", "user:pw", "meta-data"} {
		if strings.Contains(logs, leak) {
			t.Errorf("log leaks %q:\n%s", leak, logs)
		}
	}
	for _, want := range []string{`"tool":"fetch","host":"127.0.0.1","status":200,"text_bytes":33`, `"msg":"fetch refused"`, `"reason":"address refused"`, `"reason":"content type not allowed"`, `"reason":"redirect refused"`, `"reason":"URL refused"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

func TestFetchPolicyRefusals(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*policy.Policy)
	}{
		{"fetch with url", func(p *policy.Policy) {
			p.Tools = append(p.Tools, policy.Tool{Name: "f", Kind: policy.KindFetch, URL: "https://example.com/"})
		}},
		{"fetch timeout over 120 s", func(p *policy.Policy) {
			p.Tools = append(p.Tools, policy.Tool{Name: "f", Kind: policy.KindFetch, TimeoutMs: 120_001})
		}},
		{"fetch maxBytes over 32 MiB", func(p *policy.Policy) {
			p.Tools = append(p.Tools, policy.Tool{Name: "f", Kind: policy.KindFetch, MaxBytes: 32<<20 + 1})
		}},
		{"maxTextBytes on exec", func(p *policy.Policy) { p.Tools[1].MaxTextBytes = 5 }},
		{"egress allow name", func(p *policy.Policy) { p.EgressAllow = []string{"mirror.lan:80"} }},
		{"egress allow metadata", func(p *policy.Policy) { p.EgressAllow = []string{"169.254.169.254:80"} }},
		{"egress allow non-canonical", func(p *policy.Policy) { p.EgressAllow = []string{"[fd00:0::5]:80"} }},
	}
	for _, tc := range cases {
		p := basePolicy("https://model.example.com/v1", "https://tool.example.com/", "/bin/true")
		tc.mutate(p)
		if _, err := New(Config{Policy: p, Credentials: noCreds{}}); err == nil {
			t.Errorf("%s: broker started", tc.name)
		}
	}
}

type noCreds struct{}

func (noCreds) Load(string) (credential.Secret, error) {
	return credential.Secret{}, credential.ErrMissing
}
