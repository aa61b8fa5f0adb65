package cli

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
)

// TestSessionNetworkCommands: create --network --credential and exec
// --network --credential send what they say; exec tells how to approve
// the exec it waits for; approve and deny post the exec id to their
// routes and show the pending approval quoted.
func TestSessionNetworkCommands(t *testing.T) {
	id := strings.Repeat("ab", 16)
	var (
		mu        sync.Mutex
		created   apiwire.SessionCreate
		execd     apiwire.SessionExec
		decisions []string
	)
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	pending := apiwire.Session{ID: id, State: "running", Network: true, Credentials: []string{"gh"}, NetworkExec: "x1",
		Approvals: []apiwire.SessionApproval{{ExecID: "x1", Command: "curl\nevil", TimeoutSeconds: 120, Credentials: []string{"gh"}, CredentialVariables: map[string]string{"gh": "GITHUB_TOKEN"}}}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/v1/sessions":
			json.Unmarshal(body, &created)
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(apiwire.Session{ID: id})
		case "/v1/sessions/" + id + "/exec":
			json.Unmarshal(body, &execd)
			enc := json.NewEncoder(w)
			enc.Encode(apiwire.SessionExecEvent{Type: apiwire.ExecApproval, ExecID: "x1"})
			enc.Encode(apiwire.SessionExecEvent{Type: apiwire.ExecError, ExecID: "x1", Error: "the network exec was denied by a human; it did not start"})
		case "/v1/sessions/" + id + "/approve", "/v1/sessions/" + id + "/deny":
			var d apiwire.SessionDecision
			json.Unmarshal(body, &d)
			decisions = append(decisions, filepath.Base(r.URL.Path)+" "+d.ExecID)
			json.NewEncoder(w).Encode(pending)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	if code, _, stderr := runCLI("--socket", sock, "session", "create", "--network", "--credential", "gh"); code != 0 {
		t.Fatalf("create: %d %q", code, stderr)
	}
	code, _, stderr := runCLI("--socket", sock, "session", "exec", id, "--network", "--credential", "gh", "-c", "curl x")
	if code == 0 || !strings.Contains(stderr, "sandbox-host session approve "+id+" x1") || !strings.Contains(stderr, "denied") {
		t.Errorf("exec: %d %q: want the approve hint and the denial", code, stderr)
	}
	code, stdout, stderr := runCLI("--socket", sock, "session", "approve", id, "x1")
	if code != 0 || !strings.Contains(stdout, `awaiting approval: exec x1`) || !strings.Contains(stdout, `credentials=gh(GITHUB_TOKEN)`) || !strings.Contains(stdout, `"curl\nevil"`) {
		t.Errorf("approve: %d %q %q: want the pending approval, its command quoted", code, stdout, stderr)
	}
	if code, _, stderr := runCLI("--socket", sock, "session", "deny", id, "x1"); code != 0 {
		t.Errorf("deny: %d %q", code, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if !created.Network || !slices.Equal(created.Credentials, []string{"gh"}) || !execd.Network || !slices.Equal(execd.Credentials, []string{"gh"}) {
		t.Errorf("create %+v exec %+v", created, execd)
	}
	if !slices.Equal(decisions, []string{"approve x1", "deny x1"}) {
		t.Errorf("decisions %q", decisions)
	}
}
