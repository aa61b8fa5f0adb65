package broker

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// attachServer serves the hostile attachments on loopback (allowed by the
// test's egress.allow): a small file, a redirect to a private address not
// allowed, 26 MiB, a gzip bomb (100 MiB of zeros in ~100 KiB) and a 404.
func attachServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	bomb := gzipBomb()
	big := bytes.Repeat([]byte("x"), 26<<20)
	twenty := bytes.Repeat([]byte("y"), 20<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small.txt":
			w.Write([]byte("hello attachment"))
		case "/redirect":
			http.Redirect(w, r, "http://10.0.0.1/secret", http.StatusFound)
		case "/redirect-loopback":
			// Another loopback port: private and not in egress.allow.
			http.Redirect(w, r, "http://127.0.0.1:1/secret", http.StatusFound)
		case "/big":
			w.Write(big)
		case "/twenty":
			w.Write(twenty)
		case "/bomb":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, strings.TrimPrefix(srv.URL, "http://")
}

// gzipBomb is 100 MiB of zeros in about 100 KiB: one compressed MiB as 100
// gzip members, which a gzip reader reads as one stream (compressing the
// 100 MiB itself took 16 s under -race).
func gzipBomb() []byte {
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	return bytes.Repeat(one.Bytes(), 100)
}

func attachReq(i int) string { return fmt.Sprintf(`{"index":%d}`, i) }

// TestRichAttachmentFetch: the broker fetches the bound turn's attachments
// by index through its vetted fetcher, within each bound, and refuses the
// hostile ones (redirect to a private address, 26 MiB, a decompression
// bomb, an upstream 404, a private address not in egress.allow) without
// passing bytes; one fetch per attachment a turn; 50 MiB a turn; nothing
// outside the handed turn; the URL never in the log.
func TestRichAttachmentFetch(t *testing.T) {
	srv, allowed := attachServer(t)
	h := newRichHarnessWith(t, os.Getuid(), func(p *policy.Policy) { p.EgressAllow = []string{allowed} })
	if code, _, _ := h.do(richproto.RouteAttachment, attachReq(0)); code != http.StatusBadRequest {
		t.Errorf("attachment before any turn: %d, want 400", code)
	}
	h.announce(t)
	b := h.bind("off")
	// 60 MiB pass through the broker and the test's client: under -race
	// on a busy machine that took over the bind's usual 10 s.
	b.Turn.DeadlineUnixMs = time.Now().Add(2 * time.Minute).UnixMilli()
	names := []string{"/small.txt", "/redirect", "/redirect-loopback", "/big", "/bomb", "/missing", "/twenty", "/twenty", "/twenty"}
	for _, n := range names {
		b.Turn.Attachments = append(b.Turn.Attachments, richproto.Attachment{URL: srv.URL + n, Name: "f" + strings.TrimPrefix(n, "/")})
	}
	b.Turn.Attachments = append(b.Turn.Attachments, richproto.Attachment{URL: "http://127.0.0.2:9/x", Name: "private"})
	got := h.control(context.Background(), b)
	if code, body, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
		t.Fatalf("poll: %d %s", code, body)
	}
	for _, c := range []struct {
		index int
		code  int
		body  string
	}{
		{0, http.StatusOK, "hello attachment"},
		{0, http.StatusBadRequest, ""}, // once a turn
		{1, http.StatusBadGateway, ""}, // redirect to 10.0.0.1
		{2, http.StatusBadGateway, ""}, // redirect to a loopback port not allowed
		{3, http.StatusRequestEntityTooLarge, ""},
		{4, http.StatusRequestEntityTooLarge, ""},
		{5, http.StatusBadGateway, ""},
		{9, http.StatusBadGateway, ""}, // 127.0.0.2 is private and not allowed
		{10, http.StatusNotFound, ""},
		{-1, http.StatusNotFound, ""},
		{6, http.StatusOK, ""},                    // 20 MiB
		{7, http.StatusOK, ""},                    // 40 MiB
		{8, http.StatusRequestEntityTooLarge, ""}, // 60 MiB: over the turn's 50
	} {
		code, body, hd := h.do(richproto.RouteAttachment, attachReq(c.index))
		if code != c.code || (c.body != "" && body != c.body) {
			t.Errorf("attachment %d: %d %.80q, want %d %q", c.index, code, body, c.code, c.body)
		}
		if code == http.StatusOK && hd.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("attachment %d content type %q", c.index, hd.Get("Content-Type"))
		}
		if code == http.StatusOK && c.body == "" && len(body) != 20<<20 {
			t.Errorf("attachment %d: %d bytes, want 20 MiB", c.index, len(body))
		}
	}
	for _, bad := range []string{`{"index":"0"}`, `{"url":"http://x"}`, `{}` + " x"} {
		if code, _, _ := h.do(richproto.RouteAttachment, bad); code != http.StatusBadRequest {
			t.Errorf("malformed %s: %d, want 400", bad, code)
		}
	}
	if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "ok")); code != http.StatusOK {
		t.Fatal("result refused")
	}
	<-got
	h.waitUnbound(t)
	if code, _, _ := h.do(richproto.RouteAttachment, attachReq(6)); code != http.StatusBadRequest {
		t.Errorf("attachment after the turn: %d, want 400", code)
	}
	logs := h.logs.String()
	if strings.Contains(logs, srv.URL) || strings.Contains(logs, "secret") {
		t.Errorf("log names an attachment URL:\n%s", logs)
	}
	for _, want := range []string{`"bytes":16`, `"kind":"redirect refused"`, `"kind":"body too large"`, `"kind":"address refused"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}
