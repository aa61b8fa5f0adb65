package broker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/mcp"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/test/peers/everything"
)

// TestIntegrationReferenceServerThroughBroker runs the broker as its unit
// does (Run, a policy file declaring the official reference server, the real
// MCP client) and calls echo, get-sum and get-tiny-image through its socket;
// then the server restarts on the same port and the next calls succeed.
func TestIntegrationReferenceServerThroughBroker(t *testing.T) {
	bin := everything.Bin(t)
	if !everything.InPrivateNetwork(t) {
		return
	}
	srv := everything.Start(t, bin)

	dir := t.TempDir()
	polDir, credDir := filepath.Join(dir, "policies"), filepath.Join(dir, "creds")
	for _, d := range []string{polDir, credDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p := basePolicy("http://127.0.0.1:9/v1/chat/completions", "http://127.0.0.1:9/hook", "/bin/true")
	p.MCP = []policy.MCPServer{{Name: "everything", URL: srv.URL(), Session: policy.SessionAuto, AllowHTTP: true,
		Tools: []string{"echo", "get-sum", "get-tiny-image"}}}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(polDir, p.TurnID+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "broker.sock")
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{
			TurnID: p.TurnID, PolicyDir: polDir, CredentialsDir: credDir, ListenPath: sock,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			// As cmd/sandbox-broker builds it.
			NewMCP: func(maxResponseBytes int64, timeout time.Duration, log *slog.Logger) MCPUpstream {
				return mcp.NewClient(mcp.Options{MaxResponseBytes: maxResponseBytes, Timeout: timeout, Logger: log})
			},
		})
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("broker did not stop")
		}
	}
	defer stop()

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	defer client.CloseIdleConnections()
	for start := time.Now(); ; {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("broker socket not ready:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	type content struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Data     string `json:"data"`
		MimeType string `json:"mimeType"`
	}
	call := func(label, tool, args string) []content {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
		req, _ := http.NewRequest(http.MethodPost, "http://broker/mcp/everything", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sandbox-dummy-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %s: %v", label, tool, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Result struct {
				Content []content `json:"content"`
				IsError bool      `json:"isError"`
			} `json:"result"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil || out.Result.IsError {
			t.Fatalf("%s: %s: status %d body %.300s\nbroker log:\n%s", label, tool, resp.StatusCode, raw, logs.String())
		}
		return out.Result.Content
	}
	round := func(label string) {
		t.Helper()
		if got := call(label, "echo", `{"message":"hello reference"}`); len(got) != 1 || got[0].Text != "Echo: hello reference" {
			t.Errorf("%s: echo = %+v", label, got)
		}
		if got := call(label, "get-sum", `{"a":2,"b":3}`); len(got) != 1 || !strings.Contains(got[0].Text, " is 5") {
			t.Errorf("%s: get-sum = %+v", label, got)
		}
		image := false
		for _, c := range call(label, "get-tiny-image", `{}`) {
			if c.Type == "image" {
				png, err := base64.StdEncoding.DecodeString(c.Data)
				image = err == nil && c.MimeType == "image/png" && bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n"))
			}
		}
		if !image {
			t.Errorf("%s: get-tiny-image gave no PNG image content", label)
		}
	}

	round("before the restart")
	srv.Restart()
	round("after the restart")
	stop() // the turn ends: the broker closes its MCP session

	out := srv.Output()
	if n := strings.Count(out, "Session initialized with ID"); n != 2 {
		t.Errorf("the server saw %d sessions, want 2 (the first, one renewal after its restart)", n)
	}
	if !srv.WaitOutput("Received session termination request", 5*time.Second) {
		t.Error("the renewed session was not ended with a DELETE at the turn's end")
	}
	text := logs.String()
	for _, want := range []string{
		`"msg":"mcp session started","turn":"` + p.TurnID + `","server":"everything"`,
		`"msg":"mcp session unknown to the server (restart or expiry); renewing it","turn":"` + p.TurnID + `","server":"everything"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("broker log lacks %s:\n%s", want, text)
		}
	}
	for _, f := range []string{srv.URL(), "127.0.0.1", "hello reference", "Bad Request"} {
		if strings.Contains(text, f) {
			t.Errorf("broker log holds %q:\n%s", f, text)
		}
	}
}
