package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/test/peers/everything"
)

// TestIntegrationReferenceServer calls the official reference server
// (@modelcontextprotocol/server-everything, Streamable HTTP, stateful), then
// restarts it on the same port: the next call must succeed on a renewed
// session (the restarted server answers the old session id with HTTP 400).
func TestIntegrationReferenceServer(t *testing.T) {
	bin := everything.Bin(t)
	if !everything.InPrivateNetwork(t) {
		return
	}
	srv := everything.Start(t, bin)

	var logs syncBuffer
	c := NewClient(Options{Timeout: 20 * time.Second, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	s := policy.MCPServer{Name: "everything", URL: srv.URL(), Session: policy.SessionAuto, AllowHTTP: true,
		Tools: []string{"echo", "get-sum", "get-tiny-image"}}

	type content struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
	}
	calls := []struct {
		tool, args string
		check      func(t *testing.T, got []content)
	}{
		{"echo", `{"message":"hello reference"}`, func(t *testing.T, got []content) {
			if len(got) != 1 || got[0].Text != "Echo: hello reference" {
				t.Errorf("echo = %+v", got)
			}
		}},
		{"get-sum", `{"a":2,"b":3}`, func(t *testing.T, got []content) {
			if len(got) != 1 || !strings.Contains(got[0].Text, " is 5") {
				t.Errorf("get-sum = %+v", got)
			}
		}},
		{"get-tiny-image", `{}`, func(t *testing.T, got []content) {
			for _, c := range got {
				if c.Type == "image" {
					png, err := base64.StdEncoding.DecodeString(c.Data)
					if err != nil || c.MimeType != "image/png" || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
						t.Errorf("image content: mime %q, %d bytes, %v", c.MimeType, len(png), err)
					}
					return
				}
			}
			t.Errorf("get-tiny-image: no image content in %+v", got)
		}},
	}
	round := func(label string) {
		t.Helper()
		for _, call := range calls {
			raw, err := c.CallTool(t.Context(), s, "", call.tool, json.RawMessage(call.args))
			if err != nil {
				t.Fatalf("%s: %s: %v", label, call.tool, err)
			}
			var res struct {
				Content []content `json:"content"`
				IsError bool      `json:"isError"`
			}
			if err := json.Unmarshal(raw, &res); err != nil || res.IsError {
				t.Fatalf("%s: %s: result %.200s (%v)", label, call.tool, raw, err)
			}
			call.check(t, res.Content)
		}
	}

	round("before the restart")
	srv.Restart()
	round("after the restart")
	closeClient(t, c)

	out := srv.Output()
	if n := strings.Count(out, "Session initialized with ID"); n != 2 {
		t.Errorf("the server saw %d sessions, want 2 (the first, one renewal after its restart)", n)
	}
	if !srv.WaitOutput("Received session termination request", 5*time.Second) {
		t.Error("the renewed session was not ended with a DELETE at Close")
	}
	text := logs.snapshot().String()
	if n := strings.Count(text, "renewing it"); n != 1 {
		t.Errorf("%d renewals logged, want 1:\n%s", n, text)
	}
	for _, f := range []string{srv.URL(), "127.0.0.1", "hello reference"} {
		if strings.Contains(text, f) {
			t.Errorf("log holds %q:\n%s", f, text)
		}
	}
}
