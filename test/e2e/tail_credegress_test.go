package e2e

// Credentialed egress (docs/credentialed-egress.md, issue 27) end to end:
// the installed host, the toolbox image, the real CLI. This file sorts
// after scenarios_test.go (see tail_egress_test.go).

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
)

// TestRunCredentialedGitClone: an approved run granted the credential
// "e2egit", which declares no env (so its placeholder is in the default
// variable E2EGIT_TOKEN: the plain-http route with its git and curl
// rewrites is gone for runs), clones a private repository with `git -c
// http.extraHeader=... clone https://<host>/...` and reads an API with
// `curl -H ... https://...` from a loopback HTTPS server (its own test CA,
// trusted by the run's broker through egress.testRootCAFile for this
// loopback literal only) that requires the token: the broker swapped it
// in, the run never held it. The same clone without the grant fails and
// the server sees no token; the token is in no journal line, no run output
// or event and no artifact.
func TestRunCredentialedGitClone(t *testing.T) {
	diagnose(t)
	needToolbox(t)
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed on the machine: the test server's repository needs it")
	}
	out, _ := exec.Command(gitBin, "--exec-path").Output()
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skipf("%s missing: the smart-HTTP server needs it", backend)
	}
	token := "glpat-E2E-" + randHex(12)
	marker := "PRIVATE-REPO-" + randHex(4)

	// The private repository, served by git http-backend behind the token.
	root := t.TempDir()
	g := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "PATH=" + os.Getenv("PATH"),
			"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.com", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.com"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	src := filepath.Join(root, "src")
	os.Mkdir(src, 0o755)
	g(src, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(src, "README"), []byte(marker+"\n"), 0o644)
	g(src, "add", "README")
	g(src, "commit", "-q", "-m", "first")
	repos := filepath.Join(root, "repos")
	os.Mkdir(repos, 0o755)
	g(root, "clone", "-q", "--bare", src, filepath.Join(repos, "private.git"))
	backendHandler := &cgi.Handler{Path: backend, Root: "/git", Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}

	var mu sync.Mutex
	var seen []http.Header
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/api/whoami" {
			io.WriteString(w, "API-USER-e2e\n")
			return
		}
		backendHandler.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	host, port, _ := net.SplitHostPort(addr)

	// The test root CA and the credential, where the host and credset read them.
	caFile := filepath.Join(filepath.Dir(configPath), "e2e-test-root-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(caFile) })
	credFile := filepath.Join(credentialsDir, "e2e-git-token")
	if err := writeCredential("e2e-git-token", token+"\n"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(credFile) })

	c := baseConfig()
	c.FetchAllow = addr
	c.EgressCredentials = fmt.Sprintf(`[{name: e2egit, host: %q, port: %s, credential: e2e-git-token, header: Authorization, format: "Bearer {}", clients: [0]}]`, host, port)
	c.TestRootCAFile = caFile
	withConfig(t, c)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")

	base := "https://" + addr
	script := fmt.Sprintf(`set -u
git -c "http.extraHeader=Authorization: Bearer ${E2EGIT_TOKEN:-none}" clone -q %[1]s/git/private.git /tmp/repo && echo "CLONED $(cat /tmp/repo/README)"
curl -fsS -H "Authorization: Bearer ${E2EGIT_TOKEN:-none}" %[1]s/api/whoami
git -C /tmp/repo config --get remote.origin.url > /output/origin.txt
cp /tmp/repo/README /output/README
env | grep -ci token || true
`, base)
	start := func(grant bool) string {
		t.Helper()
		args := []string{"run", "--detach", "--network"}
		if grant {
			args = append(args, "--credential", "e2egit")
		}
		args = append(args, "--artifact", "origin.txt", "--artifact", "README", "--command", script)
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
		id := strings.TrimSpace(out)
		if show, _ := cli("run", "show", id); grant && !strings.Contains(show, "credentials=e2egit(E2EGIT_TOKEN)") {
			t.Errorf("the run awaiting approval does not show its credential: %s", show)
		}
		if out, err := cli("run", "approve", id); err != nil {
			t.Fatalf("run approve: %v\n%s", err, out)
		}
		return id
	}

	id := start(true)
	st := waitFinished(t, id, 120*time.Second)
	t.Logf("granted run %s: %s\nstdout:\n%s\nstderr:\n%s", id, st.Result, st.Stdout, st.Stderr)
	for _, want := range []string{"CLONED " + marker, "API-USER-e2e"} {
		if !strings.Contains(st.Stdout, want) {
			t.Errorf("granted run's stdout lacks %q", want)
		}
	}
	if st.Result != "ok" {
		t.Errorf("granted run: %s %s", st.Result, st.Error)
	}
	var readme, origin string
	for _, a := range st.Artifacts {
		switch a.Path {
		case "README":
			readme = string(a.Data)
		case "origin.txt":
			origin = string(a.Data)
		}
	}
	if readme != marker+"\n" || strings.TrimSpace(origin) != base+"/git/private.git" {
		t.Errorf("artifacts: README %q, origin %q (the clone keeps the URL as given)", readme, origin)
	}
	full, _ := cli("--json", "run", "show", id)
	events, _ := cli("run", "show", id)
	logs := journal("--since", since)
	noToken(t, token, map[string]string{"the run's status": full, "its summary": events, "the journal": logs,
		"its artifacts": readme + origin})
	if !strings.Contains(logs, "egress intercepted") || !strings.Contains(logs, "credential=e2egit") {
		t.Errorf("the broker's journal lacks the intercepted exchange lines")
	}

	// The same run without the grant: the clone fails, no token anywhere.
	mu.Lock()
	before := len(seen)
	mu.Unlock()
	id2 := start(false)
	st2 := waitFinished(t, id2, 120*time.Second)
	if strings.Contains(st2.Stdout, "CLONED") || strings.Contains(st2.Stdout, "API-USER") {
		t.Errorf("ungranted run reached the private repository:\n%s", st2.Stdout)
	}
	mu.Lock()
	for _, h := range seen[before:] {
		if strings.Contains(fmt.Sprint(h), token) {
			t.Errorf("the server saw the token in an ungranted run's request")
		}
	}
	mu.Unlock()
	assertNothingLeft(t, "after credentialed runs")
}

// noToken fails for each text that reflects the token (any form the
// broker's reflection check knows: raw, base64, hex, pieces).
func noToken(t *testing.T, token string, texts map[string]string) {
	t.Helper()
	m := credential.NewMatcher(credential.NewSecret(token), credential.NewSecret("Bearer "+token))
	for what, text := range texts {
		if m.Reflected(text) || strings.Contains(text, base64.StdEncoding.EncodeToString([]byte(token))) {
			t.Errorf("%s holds the token", what)
		}
	}
}
