package cli

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
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

	"github.com/docker/docker/api/types/image"

	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

// placeholderToken is the credential the loopback server requires.
const placeholderToken = "it-TOKEN-placeholder-9b41c07de2a35f18"

// TestIntegrationRunPlaceholders: a run granted a credential that declares
// env gets a placeholder in it and the run CA in one bundle, and real
// clients of the small toolbox reach a loopback HTTPS server (its own CA:
// egress.testRootCAFile) through the in-process broker's interception with
// their https URLs unchanged: curl by absolute path (Bearer), Python's
// urllib (token form, and Basic with the placeholder as password, as pip
// sends it), curl -u with it as Basic user, git clone with it in the URL;
// a placeholder in a query string is refused (400) before the server.
// The token reaches none of the run's output; the placeholder is what the
// run sees. make integration sets SANDBOX_IT_DOCKER and
// SANDBOX_IT_TOOLBOX_TAR.
func TestIntegrationRunPlaceholders(t *testing.T) {
	dockerHost, base := os.Getenv("SANDBOX_IT_DOCKER"), os.Getenv("SANDBOX_IT_TOOLBOX_TAR")
	if dockerHost == "" || base == "" {
		t.Skip("integration test: set SANDBOX_IT_DOCKER and SANDBOX_IT_TOOLBOX_TAR (test/integration.sh sets both) to run code runs in a real dockerd")
	}
	if os.Getuid() != 0 {
		t.Skip("integration test: code runs need root here (chown of the project and turn directories)")
	}
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed: the loopback server's smart HTTP needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("/tmp", "sbph")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)

	bin := os.Getenv("SANDBOX_IT_SANDBOX_WORKER")
	if bin == "" {
		bin = filepath.Join(dir, "sandbox-worker")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/roundtable-sandbox/sandbox/cmd/sandbox-worker")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build sandbox-worker: %v: %s", err, out)
		}
	}
	w, err := toolbox.ReadWorker(bin)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := toolbox.Connect(dockerHost)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	tag := fmt.Sprintf("roundtable-sandbox-placeholders-it:%d", time.Now().UnixNano())
	if _, err := toolbox.Import(ctx, tb, toolbox.ImportOptions{BaseTar: base, Worker: w, Tag: tag}); err != nil {
		t.Fatal(err)
	}
	defer tb.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})

	// A private repository behind git's smart HTTP.
	backend := "/usr/lib/git-core/git-http-backend"
	if out, err := exec.Command(gitBin, "--exec-path").Output(); err == nil {
		backend = filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	}
	gitRun := func(d string, args ...string) {
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = d
		cmd.Env = []string{"HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "PATH=" + os.Getenv("PATH")}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	gitRun(src, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(src, "README"), []byte("PRIVATE-REPO-7d2c\n"), 0o644)
	gitRun(src, "add", "README")
	gitRun(src, "commit", "-q", "-m", "first")
	repos := filepath.Join(dir, "repos")
	os.Mkdir(repos, 0o755)
	gitRun(dir, "clone", "-q", "--bare", src, filepath.Join(repos, "private.git"))
	gitHandler := &cgi.Handler{Path: backend, Root: "/git", Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}

	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		mu.Lock()
		seen = append(seen, a)
		mu.Unlock()
		user, pass, basic := r.BasicAuth()
		if a != "Bearer "+placeholderToken && a != "token "+placeholderToken && !(basic && (pass == placeholderToken || user == placeholderToken)) {
			w.Header().Set("WWW-Authenticate", `Basic realm="it"`)
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/git/") {
			gitHandler.ServeHTTP(w, r)
			return
		}
		io.WriteString(w, "CRED-OK")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(dir, "testca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	addr := srv.Listener.Addr().String()
	_, port, _ := strings.Cut(addr, ":")

	y := fmt.Sprintf(`model:
  url: https://model.invalid/v1/chat/completions
  name: m
credentials:
  default: model
installation: it-placeholders
egress:
  allow: [%q]
  testRootCAFile: %s
  credentials:
    - {name: itcred, host: 127.0.0.1, port: %s, credential: it-token, header: Authorization, format: "Bearer {}", env: IT_TOKEN, clients: [0]}
runs:
  image: %s
  memoryMb: 256
  tmpfsMb: 32
  outputMb: 16
`, addr, caFile, port, tag)
	p := filepath.Join(dir, "sandbox.yaml")
	os.WriteFile(p, []byte(y), 0o600)
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RunRoot, cfg.WorkspaceRoot, cfg.PolicyDir = filepath.Join(dir, "run"), filepath.Join(dir, "ws"), filepath.Join(dir, "pol")
	cfg.StateFile = filepath.Join(dir, "state", "channels.json")
	if err := cfg.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	d, err := container.New(dockerHost)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, _, err := host.LoadState(cfg.StateFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	const hostUID = 65534
	creds := filepath.Join(dir, "creds")
	os.Mkdir(creds, 0o700)
	os.WriteFile(filepath.Join(creds, layout.CredentialPrefix+"it-token"), []byte(placeholderToken+"\n"), 0o600)
	units := &inProcessBrokers{t: t, runRoot: cfg.RunRoot, policyDir: cfg.PolicyDir, credentials: creds, uid: hostUID, gid: hostUID,
		running: map[string]*runningBroker{}}
	h, err := host.New(host.Options{Config: cfg, State: st, Containers: dockerEngine{d}, Units: units,
		UID: hostUID, GID: hostUID, PeerGroups: func(int) []int { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown()

	script := fmt.Sprintf(`echo "ENV ${IT_TOKEN%%${IT_TOKEN#rtsbx_ph_}}"
echo "CURL $(/usr/bin/curl -sS --max-time 20 -H "Authorization: Bearer $IT_TOKEN" https://%[1]s/private)"
python3 -c 'import os, urllib.request as u; r = u.Request("https://%[1]s/private", headers={"Authorization": "token " + os.environ["IT_TOKEN"]}); print("PY", u.urlopen(r, timeout=20).read().decode())'
echo "CURL-BASIC-USER $(/usr/bin/curl -sS --max-time 20 -u "$IT_TOKEN:x-oauth-basic" https://%[1]s/private)"
python3 -c 'import os, base64, urllib.request as u; a = base64.b64encode(("__token__:" + os.environ["IT_TOKEN"]).encode()).decode(); print("PY-BASIC", u.urlopen(u.Request("https://%[1]s/private", headers={"Authorization": "Basic " + a}), timeout=20).read().decode())'
echo "REFUSED $(/usr/bin/curl -s -o /dev/null -w '%%{http_code}' --max-time 20 "https://%[1]s/private?t=$IT_TOKEN")"
git clone -q "https://x-access-token:$IT_TOKEN@%[1]s/git/private.git" /tmp/clone && echo "GIT $(cat /tmp/clone/README)"
grep -rl "$IT_TOKEN" /tmp/clone/.git >/dev/null && echo "PLACEHOLDER IN CLONE CONFIG"
echo "BUNDLE $(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE")"
`, addr)
	start, err := host.Kind[*coderun.Kind](h).Start(runs.Params{Command: script, Network: true, Credentials: []string{"itcred"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if start.CredentialVariables["itcred"] != "IT_TOKEN" {
		t.Errorf("status credentialVariables %v", start.CredentialVariables)
	}
	got := waitFinishedRun(t, h, start.ID, true)
	out := got.Stdout + got.Stderr
	for _, want := range []string{"ENV rtsbx_ph_", "CURL CRED-OK", "PY CRED-OK", "CURL-BASIC-USER CRED-OK", "PY-BASIC CRED-OK",
		"REFUSED 400", "GIT PRIVATE-REPO-7d2c", "BUNDLE "} {
		if !strings.Contains(got.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, placeholderToken) {
		t.Errorf("the token reached the run's output:\n%s", out)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range seen {
		if strings.Contains(a, "rtsbx_ph_") {
			t.Errorf("the server saw a placeholder: %q", a)
		}
	}
}
