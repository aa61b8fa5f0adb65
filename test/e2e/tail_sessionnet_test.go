package e2e

// A session's network scoped to one exec (docs/api.md, Network execs;
// docs/credentialed-egress.md, Sessions: a grant per exec; issue 36) end
// to end: the installed host, the session's real broker unit, the real CLI
// run as a client uid, root approving or denying as the admin. The test
// server is a loopback HTTPS server with its own test CA, trusted by the
// broker through egress.testRootCAFile for this loopback literal only (as
// in tail_credegress_test.go). This file sorts after tail_sessions_test.go.

import (
	"bufio"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// approvalLine is the CLI's stderr line for a network exec waiting for a
// human (pkg/cli session exec).
var approvalLine = regexp.MustCompile(`network exec (\S+) waits for an admin's approval`)

// networkExec runs `session exec --network --credential cred id -- argv`
// as u and calls decide with the exec id as soon as the CLI reports the
// exec waiting for approval (the host's approval event); it returns what
// the CLI printed and its error once it ended.
func (u clientUser) networkExec(t *testing.T, id, cred string, decide func(execID string), argv ...string) (stdout, stderr string, execID string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"session", "exec", "--network", "--credential", cred, id, "--"}, argv...)
	cmd := exec.CommandContext(ctx, "/usr/bin/sandbox-host", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	cmd.Dir = "/"
	var o strings.Builder
	cmd.Stdout = &o
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var e strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		line := sc.Text()
		e.WriteString(line + "\n")
		if m := approvalLine.FindStringSubmatch(line); m != nil && execID == "" {
			execID = m[1]
			decide(execID)
		}
	}
	err = cmd.Wait()
	return o.String(), e.String(), execID, err
}

// hitServer is the loopback HTTPS server: it records every request (the
// attempt number n of its query, whether it carried the token) under a
// mutex and signals each on a channel.
type hitServer struct {
	mu    sync.Mutex
	ns    []string
	authd []bool
	hits  chan string
}

func (h *hitServer) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ns)
}

func (h *hitServer) seen() (ns []string, authd []bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ns...), append([]bool(nil), h.authd...)
}

// TestSessionNetworkExecGrantedThenRevoked: a client's session made with
// network and a credential declaring a variable; a network exec with the
// credential, approved by root when its approval event arrives, reaches
// the loopback server with the real token (added by the broker: the
// exec's environment, its output, its files and the journal never hold
// it), with the exec's own placeholder (curl from PATH and by path), and
// leaves a background process retrying with that placeholder every
// 200 ms. After the exec ended its grant is revoked: the background
// process's attempts are refused at the broker (403, "no live grant" in
// the broker's journal) and the server sees none of them; no host or
// broker line holds the placeholder. A second network exec, denied by root, never starts
// and the server sees nothing of it. A plain session of the same client
// has no broker unit. After close nothing is left.
func TestSessionNetworkExecGrantedThenRevoked(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	alice := sessionClient(t, "e2e-sess-alice")
	token := "glpat-SESS-" + randHex(12)
	answer := "API-USER-SESS-" + randHex(4)

	srvState := &hitServer{hits: make(chan string, 1<<14)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := r.Header.Get("Authorization") == "Bearer "+token
		n := r.URL.Query().Get("n")
		srvState.mu.Lock()
		srvState.ns = append(srvState.ns, n)
		srvState.authd = append(srvState.authd, ok)
		srvState.mu.Unlock()
		select {
		case srvState.hits <- n:
		default:
		}
		if !ok {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, answer+"\n")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	host, port, _ := net.SplitHostPort(addr)

	caFile := filepath.Join(filepath.Dir(configPath), "e2e-sessnet-root-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(caFile) })
	credFile := filepath.Join(credentialsDir, "e2e-sess-token")
	if err := writeCredential("e2e-sess-token", token+"\n"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(credFile) })

	c := baseConfig()
	c.FetchAllow = addr
	c.EgressCredentials = fmt.Sprintf(`[{name: e2esess, host: %q, port: %s, credential: e2e-sess-token, header: Authorization, format: "Bearer {}", env: SESS_TOKEN, clients: [%d]}]`, host, port, alice.uid)
	c.TestRootCAFile = caFile
	withConfig(t, c)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	base := "https://" + addr

	out, errOut, err := alice.cli("session", "create", "--network", "--credential", "e2esess")
	id := strings.TrimSpace(out)
	if err != nil || len(id) != 32 {
		t.Fatalf("session create --network: %v\n%s%s", err, out, errOut)
	}
	t.Cleanup(func() { _, _ = cli("session", "close", id) })
	if st, err := alice.show(t, id); err != nil || !st.Network || strings.Join(st.Credentials, ",") != "e2esess" {
		t.Fatalf("the network session shows %+v %v", st, err)
	}
	var brokerUnit string
	for _, u := range brokerUnits() {
		if f := strings.Fields(u); strings.Contains(u, id) && strings.HasSuffix(f[0], ".service") {
			brokerUnit = f[0]
		}
	}
	if brokerUnit == "" {
		t.Fatalf("the network session %s has no broker unit: %v", id, brokerUnits())
	}

	// 1. The approved network exec: a foreground request with the exec's
	// placeholder (curl from PATH: there is no shim),
	// the same by absolute path (CONNECT, intercepted, the placeholder
	// swapped at the broker), then a
	// background loop with the placeholder (attempt n every 200 ms into
	// /work/bg.log; its own copy of the exec's CA, as the exec's bundle
	// goes with the exec); the exec returns once the background process
	// got through once (the guest waits for it, not this test).
	script := `set -u
env
case "${SESS_TOKEN:-}" in rtsbx_ph_*) ;; *) echo "NO-PLACEHOLDER"; exit 1;; esac
if body=$(curl -fsS --max-time 20 -H "Authorization: Bearer $SESS_TOKEN" "$1/api/whoami?n=fg"); then echo "FOREGROUND-OK $body"; else echo "FOREGROUND-FAILED"; fi
if body=$(/usr/bin/curl -fsS --max-time 20 -H "Authorization: Bearer $SESS_TOKEN" "$1/api/whoami?n=ph"); then echo "PLACEHOLDER-OK $body"; else echo "PLACEHOLDER-FAILED"; fi
cp "$CURL_CA_BUNDLE" /work/exec-ca.pem
nohup sh -c 'n=0; while [ $n -lt 1500 ]; do n=$((n+1)); out=$(/usr/bin/curl --cacert /work/exec-ca.pem -H "Authorization: Bearer $SESS_TOKEN" -fsS --max-time 5 "$1?n=$n" 2>&1); rc=$?; if [ $rc -eq 0 ]; then echo "ok n=$n $out"; else echo "refused n=$n rc=$rc $(printf %s "$out" | tr "\n" " " | cut -c1-160)"; fi >> /work/bg.log; sleep 0.2; done' bg "$1/api/whoami" >/dev/null 2>&1 &
for i in $(seq 1 300); do grep -q '^ok' /work/bg.log 2>/dev/null && { echo BACKGROUND-OK; exit 0; }; sleep 0.1; done
echo "the background process never got through"; cat /work/bg.log; exit 1`
	approved := ""
	stdout, stderr, execID, err := alice.networkExec(t, id, "e2esess", func(x string) {
		if st, err := alice.show(t, id); err != nil || len(st.Approvals) != 1 || st.Approvals[0].ExecID != x {
			t.Errorf("the session does not list exec %s awaiting approval: %+v %v", x, st.Approvals, err)
		}
		if out, err := cli("session", "approve", id, x); err != nil {
			t.Errorf("session approve %s %s: %v\n%s", id, x, err, out)
		}
		approved = x
	}, "sh", "-c", script, "sh", base)
	t.Logf("approved network exec %s: %v\nstdout:\n%s\nstderr:\n%s", execID, err, stdout, stderr)
	if err != nil || approved == "" {
		t.Fatalf("the approved network exec failed (approved %q): %v", approved, err)
	}
	if !strings.Contains(stdout, "FOREGROUND-OK "+answer) || !strings.Contains(stdout, "PLACEHOLDER-OK "+answer) ||
		!strings.Contains(stdout, "BACKGROUND-OK") {
		t.Fatalf("the approved exec did not reach the server with the token (its foreground, its placeholder, its background)")
	}
	ph := regexp.MustCompile(`SESS_TOKEN=(rtsbx_ph_[0-9a-f]{32})`).FindStringSubmatch(stdout)
	if ph == nil {
		t.Fatalf("the approved exec's environment has no placeholder in SESS_TOKEN")
	}
	// The revoke comes before the client sees the result: from here on no
	// request of this session may reach the server.
	atRevoke := srvState.count()
	ns, authd := srvState.seen()
	if atRevoke < 3 || ns[0] != "fg" || ns[1] != "ph" {
		t.Fatalf("the server saw %v during the grant, want fg, ph, then the background's attempts", ns)
	}
	for i, ok := range authd {
		if !ok {
			t.Errorf("request %d (n=%s) during the grant reached the server without the token", i, ns[i])
		}
	}
	if n := len(srvState.hits); n != atRevoke {
		t.Errorf("the server signalled %d requests, recorded %d", n, atRevoke)
	}

	// 2. After the exec: the background process's attempts are refused.
	// A later plain exec waits (guest side, bounded) for refused lines.
	waitRefused := func(n int) string {
		t.Helper()
		return alice.exec(t, id, nil, "sh", "-c", `timeout 60 sh -c 'until [ "$(grep -c ^refused /work/bg.log)" -ge "$1" ]; do sleep 0.2; done' w "$1" || echo WAIT-TIMED-OUT; cat /work/bg.log`, "sh", strconv.Itoa(n))
	}
	if out := waitRefused(5); strings.Contains(out, "WAIT-TIMED-OUT") {
		t.Fatalf("the background process was not refused 5 times within 60 s after its exec ended:\n%s", out)
	}
	afterFive := srvState.count()
	bg := waitRefused(10)
	if strings.Contains(bg, "WAIT-TIMED-OUT") {
		t.Fatalf("the background process was not refused 10 times:\n%s", bg)
	}
	afterTen := srvState.count()
	t.Logf("server requests: %d at the revoke, %d after 5 refusals, %d after 10; the background's log:\n%s", atRevoke, afterFive, afterTen, bg)
	if afterTen != afterFive {
		t.Errorf("the server saw %d requests while the background process was refused 5 more times", afterTen-afterFive)
	}
	// Attempt numbers: the first refused one may have been cut mid-flight
	// by the revoke (the server may have seen it); none after it reached
	// the server, no ok line follows a refused one, and the refusals are the
	// broker's 403.
	firstRefused, refusals, ok403 := 0, 0, 0
	for _, line := range strings.Split(strings.TrimSpace(bg), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "n=") {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(f[1], "n="))
		switch f[0] {
		case "ok":
			if firstRefused != 0 {
				t.Errorf("attempt %d got through after attempt %d was refused: %s", n, firstRefused, line)
			}
		case "refused":
			if firstRefused == 0 {
				firstRefused = n
			}
			refusals++
			if strings.Contains(line, "403") {
				ok403++
			}
		}
	}
	if firstRefused == 0 || ok403 < refusals-1 {
		t.Errorf("of %d refusals %d name the broker's 403 (the first may be a connection cut by the revoke)", refusals, ok403)
	}
	ns, _ = srvState.seen()
	for _, s := range ns {
		if n, err := strconv.Atoi(s); err == nil && n > firstRefused {
			t.Errorf("the server saw attempt %d, after attempt %d was refused", n, firstRefused)
		}
	}
	j := journal("-t", "sandbox-broker", "--since", since, "-o", "cat", "-g", "turn="+id)
	if strings.Count(j, "egress refused: no live grant") < 10 || !strings.Contains(j, "grant bound") || !strings.Contains(j, "grant revoked") {
		t.Errorf("the broker's journal lacks its bind, its revoke or 10 refusals:\n%s", j)
	}
	h := journal("-t", "sandbox-host", "--since", since, "-o", "cat", "-g", "session="+id)
	if !strings.Contains(h, "session network revoked") {
		t.Errorf("the host logged no revoke of exec %s:\n%s", approved, h)
	}
	// The placeholder: in the exec's environment (its own output prints
	// it, and that output is the session's journal, sandbox/session-<id>,
	// which the host's unit sends: -u would match it), never in the host's
	// or the broker's own lines.
	if strings.Contains(j+h+journal("-t", "sandbox-broker", "--since", since)+journal("-t", "sandbox-host", "--since", since), ph[1]) {
		t.Errorf("the host or the broker logged the exec's placeholder")
	}

	// The token is nowhere the session or its client could see it: the
	// exec's environment and output, the background's log (read back with
	// session cp), the files under /work, /tmp and /output, the journal.
	local := sharedDir(t)
	if _, errOut, err := alice.cli("session", "cp", id+":bg.log", filepath.Join(local, "bg.log")); err != nil {
		t.Fatalf("session cp of bg.log: %v\n%s", err, errOut)
	}
	copied, _ := os.ReadFile(filepath.Join(local, "bg.log"))
	if !strings.HasPrefix(string(copied), strings.SplitN(bg, "\n", 2)[0]) {
		t.Errorf("session cp got a bg.log that is not the one the exec read:\n%s", copied)
	}
	files := alice.exec(t, id, nil, "sh", "-c", "find /work /tmp /output -type f -size -4M -exec cat {} + 2>/dev/null; env")
	noToken(t, token, map[string]string{"the approved exec's output": stdout + stderr, "the background's log": string(copied),
		"the session's files and a later exec's environment": files, "the journal": journal("--since", since)})

	// 3. A denied network exec never starts: no output, an error, nothing
	// at the server, no trace in /work.
	before := srvState.count()
	denied := ""
	stdout, stderr, execID, err = alice.networkExec(t, id, "e2esess", func(x string) {
		if out, err := cli("session", "deny", id, x); err != nil {
			t.Errorf("session deny %s %s: %v\n%s", id, x, err, out)
		}
		denied = x
	}, "sh", "-c", `touch /work/denied-ran; echo DENIED-EXEC-RAN; curl -fsS --max-time 5 "$1/api/whoami?n=denied"`, "sh", base)
	t.Logf("denied network exec %s: %v\nstdout: %q\nstderr:\n%s", execID, err, stdout, stderr)
	if denied == "" || err == nil || stdout != "" {
		t.Errorf("the denied exec (denied %q): err %v, stdout %q; want an error and no output", denied, err, stdout)
	}
	if out := alice.exec(t, id, nil, "sh", "-c", "test -e /work/denied-ran && echo RAN || echo NOT-RAN"); strings.TrimSpace(out) != "NOT-RAN" {
		t.Errorf("the denied exec ran: %q", out)
	}
	if n := waitRefused(refusals + 3); strings.Contains(n, "WAIT-TIMED-OUT") {
		t.Errorf("the background process stopped being refused:\n%s", n)
	}
	if after := srvState.count(); after != before {
		ns, _ := srvState.seen()
		t.Errorf("the server saw %d requests around the denied exec: %v", after-before, ns[before:])
	}

	// 4. A plain session of the same client has no broker unit.
	plain := alice.create(t)
	alice.exec(t, plain, nil, "true")
	units := brokerUnits()
	for _, u := range units {
		if strings.Contains(u, plain) {
			t.Errorf("the plain session %s has a broker unit: %s", plain, u)
		}
	}
	if !strings.Contains(strings.Join(units, "\n"), id) {
		t.Errorf("the network session's broker unit %s is not listed beside: %v", brokerUnit, units)
	}

	// 5. Close: the broker unit goes with the session, nothing is left.
	for _, s := range []string{plain, id} {
		if out, errOut, err := alice.cli("session", "close", s); err != nil {
			t.Errorf("session close %s: %v\n%s%s", s, err, out, errOut)
		}
	}
	assertNothingLeft(t, "after a network session and a plain one")
}
