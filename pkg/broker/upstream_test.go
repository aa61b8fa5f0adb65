package broker

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

var leakWords = []string{realModelKey, realToolKey, realMCPKey, "127.0.0.1", "http://", "/v1/chat", "X-Upstream", "panic", "goroutine", "dial", "connection refused", "EOF"}

func assertNoLeak(t *testing.T, what, s string) {
	t.Helper()
	for _, w := range leakWords {
		if strings.Contains(s, w) {
			t.Errorf("%s contains %q: %q", what, w, s)
		}
	}
}

func TestModelCallRebuildsUpstreamRequest(t *testing.T) {
	h := newHarness(t, nil)
	body := `{"model":"policy-model","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"host_clock","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"12:00"}],"max_tokens":100,"temperature":0.2,` +
		`"tools":[{"type":"function","function":{"name":"host_clock","description":"d","parameters":` +
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"$ref":{"type":"string","enum":["https://evil.example/x","$ref"]},"$schema":{"const":{"ref":"http://x"}}},` +
		`"$defs":{"a":{"type":"string","default":"$id","examples":[{"$ref":"#/$defs/a"}]}},"items":{"$ref":"#/$defs/a"}}}}]}`
	code, resp, hdr := h.do("/model", body)
	if code != 200 {
		t.Fatalf("status %d body %s", code, resp)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(resp), &got); err != nil || got["choices"] == nil {
		t.Errorf("answer %s is not the upstream object", resp)
	}
	up, sent := h.model.last()
	if up.Get("Authorization") != "Bearer "+realModelKey {
		t.Errorf("upstream Authorization = %q, want the real credential", up.Get("Authorization"))
	}
	allowed := map[string]bool{"Authorization": true, "Content-Type": true, "Accept": true, "Accept-Encoding": true, "User-Agent": true, "Content-Length": true}
	for k := range up {
		if !allowed[k] {
			t.Errorf("upstream received header %s", k)
		}
	}
	if ua := up.Get("User-Agent"); !strings.HasPrefix(ua, "roundtable-sandbox-broker/") {
		t.Errorf("upstream User-Agent = %q (the guest's must not pass)", ua)
	}
	var req map[string]any
	if err := json.Unmarshal(sent, &req); err != nil {
		t.Fatal(err)
	}
	// The dialect declaration travels as declared (it is never loaded).
	if !strings.Contains(string(sent), `"$schema":"http://json-schema.org/draft-07/schema#"`) {
		t.Errorf("upstream body lost the tool's $schema: %s", sent)
	}
	if req["model"] != testModel || req["stream"] != false || req["max_tokens"] != float64(100) {
		t.Errorf("upstream body model=%v stream=%v max_tokens=%v", req["model"], req["stream"], req["max_tokens"])
	}
	for _, k := range []string{"Set-Cookie", "X-Upstream-Secret"} {
		if hdr.Get(k) != "" {
			t.Errorf("answer carries %s", k)
		}
	}
	assertNoLeak(t, "answer", resp)
}

func TestModelDefaultsAndLowerLimits(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct {
		body string
		want float64
	}{
		{`{"messages":[{"role":"user","content":"hi"}]}`, 4096},
		{`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4096}`, 4096},
		{`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`, 1},
		{`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":300,"stream":false}`, 300},
		{`{"messages":[{"role":"user","content":"hi"}],"max_tokens":200,"max_completion_tokens":100}`, 100},
	} {
		code, resp, _ := h.do("/model", c.body)
		if code != 200 {
			t.Errorf("%s: status %d %s", c.body, code, resp)
			continue
		}
		_, sent := h.model.last()
		var req map[string]any
		json.Unmarshal(sent, &req)
		if req["max_tokens"] != c.want || req["stream"] != false || req["model"] != testModel {
			t.Errorf("%s: upstream max_tokens=%v stream=%v model=%v, want %v", c.body, req["max_tokens"], req["stream"], req["model"], c.want)
		}
	}
}

func TestUpstreamAnswersRefused(t *testing.T) {
	big := `{"a":"` + strings.Repeat("x", 5000) + `"}`
	b := []byte(realModelKey)
	reflect := func(s string) string { return `{"choices":[{"message":{"content":` + quote("see "+s+" here") + `}}]}` }
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    int
	}{
		{"oversized with length", answer(200, big), 502},
		{"oversized chunked", func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < 10; i++ {
				io.WriteString(w, strings.Repeat(" ", 1000))
				w.(http.Flusher).Flush()
			}
			io.WriteString(w, `{}`)
		}, 502},
		{"non-JSON", answer(200, `<html>hello</html>`), 502},
		{"JSON array", answer(200, `[{"choices":[]}]`), 502},
		{"JSON string", answer(200, `"ok"`), 502},
		{"trailing data", answer(200, okAnswer+` {}`), 502},
		{"duplicate keys", answer(200, `{"a":"`+realModelKey+`","a":"clean"}`), 502},
		// Text that is not valid Unicode is refused, not repaired to U+FFFD.
		{"invalid UTF-8", answer(200, "{\"choices\":[{\"message\":{\"content\":\"ok \xff\"}}]}"), 502},
		{"lone surrogate escape", answer(200, `{"choices":[{"message":{"content":"ok \ud800"}}]}`), 502},
		{"empty", answer(200, ``), 502},
		{"status 500 with trace", answer(500, `{"error":"Traceback at /srv/app.py: panic goroutine"}`), 502},
		{"status 401", answer(401, `{"error":"bad key `+realModelKey+`"}`), 502},
		{"status 429", answer(429, `{}`), 502},
		{"gzip encoded", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte{0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0})
		}, 502},
		{"reflect raw", answer(200, reflect(realModelKey)), 502},
		{"reflect QueryEscape", answer(200, reflect(url.QueryEscape(realModelKey+"/+ ?"))), 502},
		{"reflect PathEscape", answer(200, reflect(url.PathEscape(realModelKey))), 502},
		{"reflect base64 std", answer(200, reflect(base64.StdEncoding.EncodeToString(b))), 502},
		{"reflect base64 std raw", answer(200, reflect(base64.RawStdEncoding.EncodeToString(b))), 502},
		{"reflect base64 url", answer(200, reflect(base64.URLEncoding.EncodeToString(b))), 502},
		{"reflect base64 url raw", answer(200, reflect(base64.RawURLEncoding.EncodeToString(b))), 502},
		{"reflect hex lower", answer(200, reflect(hex.EncodeToString(b))), 502},
		{"reflect hex upper", answer(200, reflect(strings.ToUpper(hex.EncodeToString(b)))), 502},
		{"reflect in object key", answer(200, `{"choices":[],`+quote(realModelKey)+`:1}`), 502},
		{"reflect unicode escaped", answer(200, `{"x":"\u0073k-REAL-model-credential-q7Zx3Lm9Vb2Nk5Rt"}`), 502},
		{"reflect another credential", answer(200, reflect(realMCPKey)), 502},
		{"reflect tool credential base64", answer(200, reflect(base64.StdEncoding.EncodeToString([]byte(realToolKey)))), 502},
	}
	h := newHarness(t, func(p *policy.Policy) { p.Limits.MaxResponseBytes = 4096 })
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.model.set(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Upstream-Secret", "s3")
				http.SetCookie(w, &http.Cookie{Name: "session", Value: "upstream-cookie"})
				c.handler(w, r)
			})
			code, body, hdr := h.do("/model", goodModel)
			if code != c.want {
				t.Errorf("status %d, want %d (%s)", code, c.want, body)
			}
			if body != `{"error":"upstream failed"}` {
				t.Errorf("body %q, want the generic error", body)
			}
			if hdr.Get("Set-Cookie") != "" || hdr.Get("X-Upstream-Secret") != "" {
				t.Errorf("upstream headers passed on: %v", hdr)
			}
			assertNoLeak(t, "error body", body)
		})
	}
	assertNoLeak(t, "logs", h.logs.String())
	// The control: a clean answer with cookies and headers passes, without them.
	h.model.set(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-Secret", "s3")
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "upstream-cookie"})
		io.WriteString(w, okAnswer)
	})
	code, body, hdr := h.do("/model", goodModel)
	if code != 200 || hdr.Get("Set-Cookie") != "" || hdr.Get("X-Upstream-Secret") != "" || strings.Contains(body, "upstream-cookie") {
		t.Errorf("clean answer: status %d headers %v body %s", code, hdr, body)
	}
}

func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestRedirectRefused(t *testing.T) {
	target := newFakeUpstream(t, okAnswer)
	h := newHarness(t, nil)
	for _, code := range []int{301, 302, 303, 307, 308} {
		h.model.set(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.srv.URL+"/stolen", code)
		})
		status, body, _ := h.do("/model", goodModel)
		if status != 502 || body != `{"error":"upstream failed"}` {
			t.Errorf("redirect %d: status %d body %s", code, status, body)
		}
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("redirect target received %d requests", n)
	}
}

func TestUpstreamFailuresAreGeneric(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		deadURL := dead.URL
		dead.Close()
		h := newHarness(t, func(p *policy.Policy) { p.Model.URL = deadURL + "/v1/chat/completions" })
		code, body, _ := h.do("/model", goodModel)
		if code != 502 || body != `{"error":"upstream failed"}` {
			t.Errorf("status %d body %s", code, body)
		}
		assertNoLeak(t, "logs", h.logs.String())
	})
	t.Run("timeout", func(t *testing.T) {
		h := newHarness(t, func(p *policy.Policy) { p.Limits.UpstreamTimeoutMs = 200 })
		h.model.set(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		})
		start := time.Now()
		code, body, _ := h.do("/model", goodModel)
		if code != 504 || body != `{"error":"upstream timed out"}` {
			t.Errorf("status %d body %s", code, body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("timeout took %v", d)
		}
	})
	t.Run("missing credential fails closed", func(t *testing.T) {
		h := newHarness(t, func(p *policy.Policy) { p.Model.Credential = "absent" })
		code, body, _ := h.do("/model", goodModel)
		if code != 503 || body != `{"error":"unavailable"}` || h.model.hits.Load() != 0 {
			t.Errorf("status %d body %s upstream hits %d", code, body, h.model.hits.Load())
		}
	})
	t.Run("empty credential fails closed", func(t *testing.T) {
		h := newHarness(t, nil)
		os.WriteFile(filepath.Join(h.dir, "creds", "model-key"), []byte("\n"), 0o600)
		code, _, _ := h.do("/model", goodModel)
		if code != 503 || h.model.hits.Load() != 0 {
			t.Errorf("status %d upstream hits %d", code, h.model.hits.Load())
		}
	})
}

func TestCredentialRotationAndContainment(t *testing.T) {
	h := newHarness(t, nil)
	h.do("/model", goodModel)
	os.WriteFile(filepath.Join(h.dir, "creds", "model-key"), []byte("rotated-REAL-key-abcdef0123\n"), 0o600)
	code, body, _ := h.do("/model", goodModel)
	up, _ := h.model.last()
	if code != 200 || up.Get("Authorization") != "Bearer rotated-REAL-key-abcdef0123" {
		t.Errorf("after rotation: status %d upstream Authorization %q", code, up.Get("Authorization"))
	}
	for _, s := range []string{body, h.logs.String()} {
		if strings.Contains(s, "rotated-REAL") || strings.Contains(s, realModelKey) {
			t.Errorf("credential leaked into %q", s)
		}
	}
	if !strings.Contains(h.logs.String(), `"route":"/model"`) || !strings.Contains(h.logs.String(), `"turn":"0123456789abcdef0123456789abcdef"`) {
		t.Errorf("log lines lack route or turn: %s", h.logs.String())
	}
	fmt.Fprint(io.Discard, code)
}
