package runmcp

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// unixHTTPClient dials the socket whatever the URL says.
func unixHTTPClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

func TestStreamableHTTPOnAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mcp.sock")
	ln, err := Listen("unix:" + sock)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != SocketMode {
		t.Errorf("socket mode: got %v, want a socket of %v", fi.Mode(), SocketMode)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(sock), ".sandbox-mcp-*")); len(left) != 0 {
		t.Errorf("private directories left beside the socket: %v", left)
	}

	f := newFake()
	f.Final.Stdout = "over http\n"
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeHTTP(ctx, NewServer(f, Options{Context: ctx, Project: "demo"}), ln, nil) }()

	var q asked
	co := elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q)
	cl := mcp.NewClient(&mcp.Implementation{Name: "http-test"}, co)
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := cl.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: "http://sandbox" + HTTPPath, HTTPClient: unixHTTPClient(sock), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(cctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != ToolName {
		t.Fatalf("tools/list over HTTP: %v %+v", err, tools)
	}
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"command": "echo over http", "network": true}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(text(t, res), "over http") {
		t.Errorf("call over HTTP: IsError=%v %q", res.IsError, text(t, res))
	}
	// Elicitation works over the session's stream.
	eq(t, "questions asked", len(q.Messages()), 1)
	eqCalls(t, f, "start", "approve", "events")
	eq(t, "project", f.Params()[0].Project, "demo")
	cs.Close()

	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("ServeHTTP did not return after its context ended")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left after shutdown: %v", err)
	}
}

func TestStreamableHTTPOnLoopback(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ln.Where, "http://127.0.0.1:") || !strings.HasSuffix(ln.Where, HTTPPath) {
		t.Errorf("Where: %q", ln.Where)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go ServeHTTP(ctx, NewServer(newFake(), Options{Context: ctx}), ln, nil)
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(cctx, &mcp.StreamableClientTransport{Endpoint: ln.Where, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(cctx, nil); err != nil {
		t.Fatal(err)
	}
	// A browser page on another origin cannot drive it, nor can a DNS
	// rebinding name.
	for _, c := range []struct {
		name   string
		header map[string]string
		host   string
	}{
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site"}, ""},
		{"foreign origin", map[string]string{"Origin": "https://evil.example"}, ""},
		{"rebinding host", nil, "evil.example"},
	} {
		req, _ := http.NewRequest("POST", ln.Where, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		if c.host != "" {
			req.Host = c.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		eq(t, c.name+": status", resp.StatusCode, http.StatusForbidden)
	}
}

func TestListenRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cases := []struct{ spec, want string }{
		{"0.0.0.0:8765", "not a loopback address"},
		{"[::]:8765", "not a loopback address"},
		{"192.0.2.1:80", "not a loopback address"},
		{"localhost:8765", "want unix:/path or a loopback IP:PORT"},
		{"127.0.0.1", "want unix:/path or a loopback IP:PORT"},
		{"unix:relative.sock", "must be absolute"},
		{"unix:" + file, "exists and is not a socket"},
		{"unix:" + live, "another server answers"},
		{"unix:" + filepath.Join(dir, "missing", "s.sock"), "no such file"},
	}
	for _, c := range cases {
		ln, err := Listen(c.spec)
		if err == nil {
			ln.Close()
			t.Errorf("Listen(%q): accepted", c.spec)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Listen(%q): %v, want %q", c.spec, err, c.want)
		}
	}
	if data, _ := os.ReadFile(file); string(data) != "x" {
		t.Errorf("the refused path's file changed")
	}
}

func TestListenReplacesAStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody answers
	ln, err := Listen("unix:" + sock)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	ln.Close()
	if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
}
