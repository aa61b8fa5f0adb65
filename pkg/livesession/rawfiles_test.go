package livesession

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// rawCall sends one raw file request as alice: body (nil: none) with
// contentType; length is the announced Content-Length (-1: chunked).
func rawCall(t *testing.T, r *rig, method, target string, body io.Reader, length int64, contentType string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	req.ContentLength = length
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	sandboxtest.Handler(Registration, r.k.Routes(), peerauth.RoleClient, alice).ServeHTTP(w, req)
	return w
}

func rawTarget(s *Session, q url.Values) string {
	return "/v1/sessions/" + s.id + "/files/raw?" + q.Encode()
}

// puts is how many put requests reached the supervisor.
func (r *rig) puts() int {
	n := 0
	for _, c := range r.d.callList() {
		if c == "request put" {
			n++
		}
	}
	return n
}

// TestRawFiles: PUT and GET .../files/raw carry a file's bytes as the body:
// binary bytes in and out unchanged, the mode as sent and answered in a
// header, exactly sessions.maxFileBytes taken; a body past it refused with
// 413 naming the key, announced or chunked, before anything reaches the
// session; a body cut short, a wrong Content-Type and a bad query refused
// with 400, nothing written; paths refused exactly as the JSON routes
// refuse them.
func TestRawFiles(t *testing.T) {
	const bound = 4096
	r := newRig(t, func(c *config.Sessions) { c.MaxFileBytes = bound })
	s := r.create(t, alice)
	data := []byte{0, 1, 2, '\n', 255, '"', '\\'}
	w := rawCall(t, r, http.MethodPut, rawTarget(s, url.Values{"path": {"d/b.bin"}, "mode": {"0600"}}), bytes.NewReader(data), int64(len(data)), "application/octet-stream")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"size":7`) {
		t.Fatalf("put: %d %s", w.Code, w.Body)
	}
	w = rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {"d/b.bin"}}), nil, 0, "")
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), data) || w.Header().Get(HeaderFileMode) != "0600" ||
		w.Header().Get("Content-Length") != "7" || w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("get: %d %q %v", w.Code, w.Body, w.Header())
	}
	// No mode: the supervisor's default; no Content-Type is taken as bytes.
	if w := rawCall(t, r, http.MethodPut, rawTarget(s, url.Values{"path": {"plain"}}), strings.NewReader("x"), 1, ""); w.Code != http.StatusOK {
		t.Fatalf("put without mode: %d %s", w.Code, w.Body)
	}
	if w := rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {"plain"}}), nil, 0, ""); w.Header().Get(HeaderFileMode) != "0644" {
		t.Errorf("default mode: %v", w.Header())
	}
	// Exactly the bound passes, announced and chunked.
	full := bytes.Repeat([]byte{7}, bound)
	for _, length := range []int64{bound, -1} {
		if w := rawCall(t, r, http.MethodPut, rawTarget(s, url.Values{"path": {"full"}}), bytes.NewReader(full), length, "application/octet-stream"); w.Code != http.StatusOK {
			t.Fatalf("put of exactly the bound (length %d): %d %s", length, w.Code, w.Body)
		}
	}
	before := r.puts()
	for _, tc := range []struct {
		name   string
		query  url.Values
		body   io.Reader
		length int64
		ctype  string
		code   int
		reason string
	}{
		{"over the bound, announced", url.Values{"path": {"big"}}, bytes.NewReader(make([]byte, bound+1)), bound + 1, "", http.StatusRequestEntityTooLarge, "sessions.maxFileBytes"},
		{"over the bound, chunked", url.Values{"path": {"big"}}, bytes.NewReader(make([]byte, 3*bound)), -1, "", http.StatusRequestEntityTooLarge, "sessions.maxFileBytes"},
		{"body cut short", url.Values{"path": {"cut"}}, io.MultiReader(strings.NewReader("abc"), errReader{}), 100, "", http.StatusBadRequest, "could not read"},
		{"wrong content type", url.Values{"path": {"j"}}, strings.NewReader("{}"), 2, "application/json", http.StatusBadRequest, "application/octet-stream"},
		{"no path", url.Values{"mode": {"0644"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "path is required"},
		{"path twice", url.Values{"path": {"a", "b"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "2 times"},
		{"unknown parameter", url.Values{"path": {"a"}, "owner": {"0"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "unknown query parameter"},
		{"tar on a put", url.Values{"path": {"a"}, "tar": {"true"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "unknown query parameter"},
		{"mode not octal", url.Values{"path": {"a"}, "mode": {"0o644"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "mode must be"},
		{"mode with setuid", url.Values{"path": {"a"}, "mode": {"4755"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "mode must be"},
		{"dotdot", url.Values{"path": {"../etc/x"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "path:"},
		{"absolute", url.Values{"path": {"/etc/x"}}, strings.NewReader("x"), 1, "", http.StatusBadRequest, "path:"},
	} {
		w := rawCall(t, r, http.MethodPut, rawTarget(s, tc.query), tc.body, tc.length, tc.ctype)
		var e struct{ Error string }
		json.Unmarshal(w.Body.Bytes(), &e)
		if w.Code != tc.code || !strings.Contains(e.Error, tc.reason) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, w.Code, e.Error, tc.code, tc.reason)
		}
	}
	if n := r.puts() - before; n != 0 {
		t.Errorf("%d refused puts reached the session", n)
	}
	// The same paths refused on the way out, as the JSON get refuses them.
	for _, p := range []string{"../etc/passwd", "/etc/passwd", "a/../../b", ""} {
		w := rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {p}}), nil, 0, "")
		code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/files/get", apiwire.SessionPath{Path: p})
		if w.Code != http.StatusBadRequest || code != http.StatusBadRequest || p != "" && w.Body.String() != body {
			t.Errorf("get %q: raw %d %s, JSON %d %s; want the same 400", p, w.Code, w.Body, code, body)
		}
	}
	if w := rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {"nope"}}), nil, 0, ""); w.Code != http.StatusNotFound {
		t.Errorf("get of nothing: %d %s", w.Code, w.Body)
	}
	if w := rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {"a"}, "mode": {"0644"}}), nil, 0, ""); w.Code != http.StatusBadRequest {
		t.Errorf("mode on a get: %d %s", w.Code, w.Body)
	}
	// A file past the bound in the session is refused on the way out.
	sup := r.d.sup(s.h.ContainerID)
	sup.mu.Lock()
	sup.files["grown"] = make([]byte, bound+1)
	sup.mu.Unlock()
	if w := rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {"grown"}}), nil, 0, ""); w.Code != http.StatusRequestEntityTooLarge || w.Body.Len() > 200 {
		t.Errorf("get over the bound: %d %.80s", w.Code, w.Body)
	}
	// A directory as a tar: the skipped count in its header.
	sup.mu.Lock()
	sup.files["dir"] = []byte("tarbytes")
	sup.mu.Unlock()
	if w := rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {"dir"}, "tar": {"true"}}), nil, 0, ""); w.Code != http.StatusOK ||
		w.Body.String() != "tarbytes" || w.Header().Get(HeaderFileSkipped) != "0" {
		t.Errorf("tar: %d %q %v", w.Code, w.Body, w.Header())
	}
	// The JSON routes still work beside the raw ones, on the same files.
	code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/files/get", apiwire.SessionPath{Path: "d/b.bin"})
	var f apiwire.SessionFile
	json.Unmarshal([]byte(body), &f)
	if code != http.StatusOK || !bytes.Equal(f.Data, data) || f.Mode != 0o600 {
		t.Errorf("JSON get of a raw put: %d %s", code, body)
	}
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/files/put", apiwire.SessionPut{Path: "j.bin", Data: data}); code != http.StatusOK {
		t.Fatalf("JSON put: %d %s", code, body)
	}
	if w := rawCall(t, r, http.MethodGet, rawTarget(s, url.Values{"path": {"j.bin"}}), nil, 0, ""); !bytes.Equal(w.Body.Bytes(), data) {
		t.Errorf("raw get of a JSON put: %d %q", w.Code, w.Body)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestParseRawQuery(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		put  bool
		want RawQuery
		err  string
	}{
		{"path=a%2Fb.txt", true, RawQuery{Path: "a/b.txt"}, ""},
		{"path=x&mode=755", true, RawQuery{Path: "x", Mode: 0o755}, ""},
		{"path=x&mode=0", true, RawQuery{Path: "x"}, ""},
		{"path=x&tar=true", false, RawQuery{Path: "x", Tar: true}, ""},
		{"path=x&tar=0", false, RawQuery{Path: "x"}, ""},
		{"path=%2Foutput%2Fr.txt", false, RawQuery{Path: "/output/r.txt"}, ""},
		{"", true, RawQuery{}, "path is required"},
		{"path=", false, RawQuery{}, "path is required"},
		{"path=%zz", false, RawQuery{}, "not a valid URL query"},
		{"path=a;b", false, RawQuery{}, "not a valid URL query"},
		{"path=a&path=a", false, RawQuery{}, "2 times"},
		{"path=a&mode=1000", true, RawQuery{}, "mode must be"},
		{"path=a&mode=-1", true, RawQuery{}, "mode must be"},
		{"path=a&mode=9", true, RawQuery{}, "mode must be"},
		{"path=a&mode=644", false, RawQuery{}, "unknown query parameter"},
		{"path=a&tar=yes", false, RawQuery{}, "tar must be"},
		{"path=a&tar=true", true, RawQuery{}, "unknown query parameter"},
		{"path=a&x=1", false, RawQuery{}, "unknown query parameter"},
	} {
		got, err := ParseRawQuery(tc.raw, tc.put)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q (put %v): %+v %v, want %+v", tc.raw, tc.put, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q (put %v): %v, want an error with %q", tc.raw, tc.put, err, tc.err)
		}
	}
}

// FuzzParseRawQuery: any query is a clean refusal or a query with a path
// and a mode within 0777; a refusal never quotes a value.
func FuzzParseRawQuery(f *testing.F) {
	for _, s := range []string{"path=a&mode=644", "path=x&tar=1", "path=%2F&mode=7777", "a=b&a=c", "path=\x00;"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, raw string, put bool) {
		q, err := ParseRawQuery(raw, put)
		if err != nil {
			v, _ := url.ParseQuery(raw)
			for name, vals := range v {
				for _, val := range vals {
					if len(val) > 3 && strings.Contains(err.Error(), val) && !strings.Contains(name, val) {
						t.Fatalf("refusal %q quotes the value %q", err, val)
					}
				}
			}
			return
		}
		if q.Path == "" || q.Mode > 0o777 || put && q.Tar || !put && q.Mode != 0 {
			t.Fatalf("%q (put %v) gave %+v", raw, put, q)
		}
	})
}
