package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// sandbox-host mcp over stdio: stdout carries only the protocol, the tool
// is listed, and stdin's end is a clean exit.
func TestMCPCommandStdio(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errb bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Main(context.Background(), []string{"--socket", "/nonexistent/host.sock", "mcp", "--project", "demo"}, Inputs{Stdin: inR, Stdout: outW, Stderr: &errb})
		outW.Close()
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stdout closed early; stderr:\n%s", errb.String())
			}
			if !json.Valid([]byte(l)) {
				t.Fatalf("stdout line is not JSON-RPC: %q", l)
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer on stdout; stderr:\n%s", errb.String())
		}
		return ""
	}
	send := func(s string) {
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if l := next(); !strings.Contains(l, `"protocolVersion":"2025-06-18"`) || !strings.Contains(l, `"roundtable-sandbox"`) {
		t.Errorf("initialize answer: %s", l)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	l := next()
	for _, w := range []string{`"name":"sandbox_run"`, `"timeout_seconds"`, `the project \"demo\"`} {
		if !strings.Contains(l, w) {
			t.Errorf("tools/list answer lacks %s: %s", w, l)
		}
	}
	inW.Close() // the agent went away
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit status after stdin EOF: %d, want 0; stderr:\n%s", c, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mcp did not exit after stdin closed")
	}
	for l := range lines {
		t.Errorf("stdout after the session: %q", l)
	}
}

func TestMCPCommandRefusesNonLoopbackHTTP(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8765", "192.0.2.1:8765", "localhost:8765"} {
		var out, errb bytes.Buffer
		c := Main(context.Background(), []string{"mcp", "--http", addr}, Inputs{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
		if c == 0 {
			t.Errorf("--http %s: exit 0, want a refusal", addr)
		}
		if !strings.Contains(errb.String(), "loopback") {
			t.Errorf("--http %s: stderr %q does not explain the loopback rule", addr, errb.String())
		}
	}
}

// sandbox-host mcp --http on a TCP port asks the host for its user's role
// first and refuses to listen for an admin (every local user could answer
// the network question as one) or when the host does not name the role.
func TestMCPCommandRefusesTCPForAdmin(t *testing.T) {
	for _, tt := range []struct {
		name, health, want string
	}{
		{"admin", `{"status":"ok","version":"x","accepting":true,"running":0,"waiting":0,"role":"admin"}`, "admin role"},
		{"older host", `{"status":"ok","version":"x","accepting":true,"running":0,"waiting":0}`, "name this user's role"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "h.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			var mu sync.Mutex
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				paths = append(paths, r.URL.Path)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(tt.health))
			})}
			go srv.Serve(ln)
			defer srv.Close()
			code, out, stderr := runCLI("--socket", sock, "mcp", "--http", "127.0.0.1:0")
			if code == 0 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "serving sandbox_run") {
				t.Errorf("mcp --http 127.0.0.1:0: status %d, stdout %q, stderr %q; want a refusal containing %q", code, out, stderr, tt.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(paths, []string{"/v1/health"}) {
				t.Errorf("host requests %v, want only /v1/health", paths)
			}
		})
	}
}
