package cli

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// TestSessionExecExitsWithTheCommandsStatus: `session exec` prints the
// output as it comes, stdout and stderr apart, and exits with the
// command's status (124 on timeout), as docker exec; cp writes and reads.
func TestSessionExecExitsWithTheCommandsStatus(t *testing.T) {
	id := strings.Repeat("ab", 16)
	var puts []apiwire.SessionPut
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/v1/sessions/" + id + "/exec":
			var x apiwire.SessionExec
			json.Unmarshal(body, &x)
			res := apiwire.SessionExecResult{ExitCode: 0}
			switch x.Command {
			case "fail":
				res.ExitCode = 3
			case "slow":
				res.TimedOut, res.ExitCode = true, 137
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			enc.Encode(apiwire.SessionExecEvent{Type: apiwire.ExecStarted, ExecID: "x1"})
			enc.Encode(apiwire.SessionExecEvent{Type: apiwire.ExecStdout, ExecID: "x1", Data: []byte("out\n")})
			enc.Encode(apiwire.SessionExecEvent{Type: apiwire.ExecStderr, ExecID: "x1", Data: []byte("err\n")})
			enc.Encode(apiwire.SessionExecEvent{Type: apiwire.ExecResult, ExecID: "x1", Result: &res})
		case "/v1/sessions/" + id + "/files/raw": // cp uses the raw route: the bytes as the body
			q := r.URL.Query()
			if r.Method == http.MethodPut {
				mode, _ := strconv.ParseUint(q.Get("mode"), 8, 32)
				puts = append(puts, apiwire.SessionPut{Path: q.Get("path"), Mode: uint32(mode), Data: body})
				json.NewEncoder(w).Encode(apiwire.SessionFile{Path: q.Get("path"), Size: int64(len(body))})
				return
			}
			w.Header().Set("X-Sandbox-File-Mode", "0644")
			w.Write([]byte("abc"))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"no such session"}`))
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	for _, tc := range []struct {
		cmd  string
		code int
	}{{"ok", 0}, {"fail", 3}, {"slow", exitRunTimeout}} {
		code, stdout, stderr := runCLI("--socket", sock, "session", "exec", id, "-c", tc.cmd)
		if code != tc.code || stdout != "out\n" || !strings.HasPrefix(stderr, "err\n") {
			t.Errorf("%s: %d %q %q, want %d", tc.cmd, code, stdout, stderr, tc.code)
		}
	}
	if code, _, stderr := runCLI("--socket", sock, "session", "exec", strings.Repeat("cd", 16), "--", "true"); code != 1 || !strings.Contains(stderr, "404") {
		t.Errorf("unknown session: %d %q", code, stderr)
	}
	local := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(local, []byte("data"), 0o644)
	if code, _, stderr := runCLI("--socket", sock, "session", "cp", "--mode", "0600", local, id+":in.txt"); code != 0 || len(puts) != 1 || string(puts[0].Data) != "data" || puts[0].Path != "in.txt" || puts[0].Mode != 0o600 {
		t.Errorf("cp in: %d %q %+v", code, stderr, puts)
	}
	out := filepath.Join(t.TempDir(), "out.txt")
	if code, _, stderr := runCLI("--socket", sock, "session", "cp", id+":f", out); code != 0 {
		t.Errorf("cp out: %d %q", code, stderr)
	}
	if data, _ := os.ReadFile(out); string(data) != "abc" {
		t.Errorf("cp out wrote %q", data)
	}
}
