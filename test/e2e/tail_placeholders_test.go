package e2e

// Placeholders (docs/credentialed-egress.md "Placeholders: any HTTPS
// client", issue 37) end to end: the installed host and broker units, the
// toolbox's own curl, git and python3, the real CLI and journal. This file
// sorts after scenarios_test.go (see tail_egress_test.go).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
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
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// phSeen is one request a loopback server received.
type phSeen struct{ server, path, auth, query, body, agent string }

// TestRunPlaceholderClients: two credentials declare env (GIT_TOKEN for a
// git server, API_TOKEN for an API on another loopback port; both HTTPS
// with the test CA of egress.testRootCAFile). An approved run holds only
// placeholders and uses them with the ordinary https URLs and each
// client's own configuration: git clone with the placeholder as the URL's
// password, curl by absolute path with a Bearer header, Python requests
// with a Bearer header, pip install from a PEP 503 index with Basic
// __token__:<placeholder> in --index-url, npm install from a registry with
// _authToken=${API_TOKEN} in .npmrc (a Bearer token). Each server sees its
// real token from each client; the run prints its placeholder,
// which is not the token. A placeholder in a query string or in a body is
// refused (400) and the server sees no such request; an answer the server
// gzips although the broker asked for identity is refused. The tokens are
// in no run output, status, summary, artifact, journal line or file pip
// and npm wrote (installs, caches, logs: an artifact), and the
// broker's and host's journal hold no placeholder.
func TestRunPlaceholderClients(t *testing.T) {
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
	gitToken := "ghp_E2E" + randHex(16)
	apiToken := "api-E2E-" + randHex(16)
	marker := "PH-REPO-" + randHex(4)

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
	gitHandler := &cgi.Handler{Path: backend, Root: "/git", Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"}}

	// What pip and npm install: a wheel on a PEP 503 index and a package
	// on an npm registry, both behind the API token.
	wheel := makeWheel(t, root, marker)
	wheelData, err := os.ReadFile(wheel)
	if err != nil {
		t.Fatal(err)
	}
	npmTgz := npmTarball(t, marker)

	var mu sync.Mutex
	var seen []phSeen
	record := func(server string, r *http.Request) string {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		mu.Lock()
		seen = append(seen, phSeen{server, r.URL.Path, r.Header.Get("Authorization"), r.URL.RawQuery, string(body), r.UserAgent()})
		mu.Unlock()
		return string(body)
	}
	// git's libcurl sends the URL's user and password after a challenge.
	challenge := func(w http.ResponseWriter) {
		w.Header().Set("WWW-Authenticate", `Basic realm="e2e"`)
		http.Error(w, "token required", http.StatusUnauthorized)
	}
	gitSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/git/") && r.Method == http.MethodGet {
			record("git", r)
		} else {
			// git-http-backend reads the pack request's body itself.
			mu.Lock()
			seen = append(seen, phSeen{server: "git", path: r.URL.Path, auth: r.Header.Get("Authorization"), query: r.URL.RawQuery})
			mu.Unlock()
		}
		if _, pass, ok := r.BasicAuth(); !ok || pass != gitToken {
			challenge(w)
			return
		}
		gitHandler.ServeHTTP(w, r)
	}))
	apiSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record("api", r)
		_, pass, basic := r.BasicAuth()
		a := r.Header.Get("Authorization")
		if a != "Bearer "+apiToken && !(basic && pass == apiToken) {
			challenge(w)
			return
		}
		switch r.URL.Path {
		case "/api/whoami":
			io.WriteString(w, "API-USER-e2e\n")
		case "/simple/greet/": // PEP 503: the project's page links its wheel
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%x">%[1]s</a></body></html>`,
				filepath.Base(wheel), sha256.Sum256(wheelData))
		case "/files/" + filepath.Base(wheel):
			w.Write(wheelData)
		case "/npm/greet-e2e": // the registry's document of the package
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, npmDocument("https://"+r.Host+"/npm/greet-e2e/-/greet-e2e-1.0.0.tgz", npmTgz))
		case "/npm/greet-e2e/-/greet-e2e-1.0.0.tgz":
			w.Write(npmTgz)
		case "/echo-gzip":
			// Asked for identity, this server gzips the echo anyway.
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			io.WriteString(zw, "you sent: "+a)
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", fmt.Sprint(b.Len()))
			w.Write(b.Bytes())
		default:
			io.WriteString(w, "OTHER\n")
		}
	}))
	for _, s := range []*httptest.Server{gitSrv, apiSrv} {
		s.Config.ErrorLog = log.New(io.Discard, "", 0)
		s.StartTLS() // both carry httptest's one certificate
		defer s.Close()
	}
	gitAddr, apiAddr := gitSrv.Listener.Addr().String(), apiSrv.Listener.Addr().String()
	gitHost, gitPort, _ := net.SplitHostPort(gitAddr)
	apiHost, apiPort, _ := net.SplitHostPort(apiAddr)

	caFile := filepath.Join(filepath.Dir(configPath), "e2e-test-root-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gitSrv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(caFile) })
	for name, tok := range map[string]string{"e2e-ph-git": gitToken, "e2e-ph-api": apiToken} {
		f := filepath.Join(credentialsDir, name)
		if err := writeCredential(name, tok+"\n"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(f) })
	}

	c := baseConfig()
	c.FetchAllow = gitAddr
	c.FetchAllowMore = []string{apiAddr}
	c.EgressCredentials = fmt.Sprintf(`[{name: e2egit, host: %q, port: %s, credential: e2e-ph-git, header: Authorization, format: "Bearer {}", env: GIT_TOKEN, clients: [0]}, `+
		`{name: e2eapi, host: %q, port: %s, credential: e2e-ph-api, header: Authorization, format: "Bearer {}", env: API_TOKEN, clients: [0]}]`,
		gitHost, gitPort, apiHost, apiPort)
	c.TestRootCAFile = caFile
	withConfig(t, c)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")

	// Before any run exists, a client learns each credential's variable
	// and host (GET /v1/credentials), and the MCP approval names them.
	if out, err := cli("run", "credentials"); err != nil || !strings.Contains(out, "e2egit $GIT_TOKEN https://"+gitAddr+"\n") ||
		!strings.Contains(out, "e2eapi $API_TOKEN https://"+apiAddr+"\n") {
		t.Errorf("run credentials: %v\n%s", err, out)
	}
	if os.Getenv("E2E_PEERS") != "" {
		doc := mcpClient(t, "--elicit", "decline", "--call", `{"command":"true","network":true,"credentials":["e2eapi"]}`)
		el, _ := doc["elicitations"].([]any)
		if len(el) != 1 || !strings.Contains(fmt.Sprint(el[0]), `"e2eapi" in $API_TOKEN for `+apiAddr) {
			t.Errorf("the MCP approval does not name the credential's variable and host: %v", el)
		}
	}

	script := fmt.Sprintf(`set -u
echo "PH $GIT_TOKEN"
git clone -q "https://x-access-token:$GIT_TOKEN@%[1]s/git/private.git" /tmp/repo && echo "CLONED $(cat /tmp/repo/README)"
cp /tmp/repo/README /output/README
echo "CURL $(/usr/bin/curl -fsS --max-time 20 -H "Authorization: Bearer $API_TOKEN" https://%[2]s/api/whoami)"
python3 -c 'import os, requests; r = requests.get("https://%[2]s/api/whoami", headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}, timeout=20); print("REQUESTS", r.status_code, r.text.strip())'
python3 -m pip install -q --no-cache-dir --disable-pip-version-check --no-input --timeout 20 --retries 0 --target /tmp/pipt \
  --index-url "https://__token__:$API_TOKEN@%[2]s/simple/" greet >/tmp/pip.log 2>&1 || tail -5 /tmp/pip.log
echo "PIP $(PYTHONPATH=/tmp/pipt python3 -c 'import greet; print(greet.hello("pip"))')"
mkdir /tmp/npmproj && cd /tmp/npmproj && echo '{"name":"p","version":"1.0.0","private":true}' >package.json
printf '%%s\n' 'registry=https://%[2]s/npm/' '//%[2]s/npm/:_authToken=${API_TOKEN}' >.npmrc
npm install --no-audit --no-fund --no-update-notifier --fetch-retries=0 --loglevel=error greet-e2e >/tmp/npm.log 2>&1 || tail -5 /tmp/npm.log
echo "NPM $(node -e 'console.log(require("greet-e2e").hello())')"
cd /
tar czf /output/files.tgz /tmp/pipt /tmp/npmproj /tmp/.npm /tmp/pip.log /tmp/npm.log 2>/dev/null
echo "QUERY $(/usr/bin/curl -s -o /dev/null -w '%%{http_code}' --max-time 20 -H "Authorization: Bearer $API_TOKEN" "https://%[2]s/refused-query?t=$API_TOKEN")"
echo "BODY $(/usr/bin/curl -s -o /dev/null -w '%%{http_code}' --max-time 20 -H "Authorization: Bearer $API_TOKEN" --data "t=$API_TOKEN" https://%[2]s/refused-body)"
echo "GZIP $(/usr/bin/curl -s -o /output/echo.bin -w '%%{http_code}' --max-time 20 -H "Authorization: Bearer $API_TOKEN" https://%[2]s/echo-gzip)"
echo "BUNDLE $(grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE") $([ "$REQUESTS_CA_BUNDLE" = "$SSL_CERT_FILE" ] && [ "$GIT_SSL_CAINFO" = "$SSL_CERT_FILE" ] && echo same)"
`, gitAddr, apiAddr)
	args := []string{"run", "--detach", "--network", "--credential", "e2egit", "--credential", "e2eapi",
		"--artifact", "README", "--artifact", "echo.bin", "--artifact", "files.tgz", "--command", script}
	out2, err := cli(args...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out2)
	}
	id := strings.TrimSpace(out2)
	if show, _ := cli("run", "show", id); !strings.Contains(show, "GIT_TOKEN") || !strings.Contains(show, "API_TOKEN") {
		t.Errorf("the run awaiting approval does not name its credentials' variables: %s", show)
	}
	if out, err := cli("run", "approve", id); err != nil {
		t.Fatalf("run approve: %v\n%s", err, out)
	}
	st := waitFinished(t, id, 180*time.Second)
	t.Logf("run %s: %s %s\nstdout:\n%s\nstderr:\n%s", id, st.Result, st.Error, st.Stdout, st.Stderr)

	for _, want := range []string{"CLONED " + marker, "CURL API-USER-e2e", "REQUESTS 200 API-USER-e2e", "PIP hello pip from greet " + marker,
		"NPM greet-e2e " + marker, "QUERY 400", "BODY 400", "BUNDLE ", " same"} {
		if !strings.Contains(st.Stdout, want) {
			t.Errorf("the run's stdout lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`GZIP (\d+)`).FindStringSubmatch(st.Stdout); m == nil || m[1] == "200" {
		t.Errorf("the gzipped echo was not refused: %v", m)
	}
	ph := regexp.MustCompile(`(?m)^PH (\S*)$`).FindStringSubmatch(st.Stdout)
	if ph == nil || !regexp.MustCompile(`^rtsbx_ph_[0-9a-f]{32}$`).MatchString(ph[1]) || ph[1] == gitToken {
		t.Fatalf("the run's GIT_TOKEN is not a placeholder: %v", ph)
	}
	placeholder := ph[1]

	var readme, echo, files string
	for _, a := range st.Artifacts {
		switch a.Path {
		case "README":
			readme = string(a.Data)
		case "files.tgz": // what pip and npm left in the run: installs, caches, logs
			files = untarAll(t, a.Data)
		case "echo.bin":
			echo = string(a.Data)
			if zr, err := gzip.NewReader(strings.NewReader(echo)); err == nil {
				dec, _ := io.ReadAll(zr)
				echo += string(dec)
			}
		}
	}
	if readme != marker+"\n" {
		t.Errorf("artifact README %q", readme)
	}

	// What the servers saw: the real tokens, never a placeholder, and
	// none of the refused requests.
	mu.Lock()
	var gitOK, apiBearer, apiBasic, gzipSeen bool
	clients := map[string]bool{} // a client's User-Agent product: it reached the API with the token
	for _, s := range seen {
		if strings.Contains(s.auth+s.query+s.body, "rtsbx_ph_") {
			t.Errorf("the %s server saw a placeholder at %s", s.server, s.path)
		}
		if strings.HasPrefix(s.path, "/refused") {
			t.Errorf("the %s server saw the refused request %s", s.server, s.path)
		}
		if _, pass, ok := (&http.Request{Header: http.Header{"Authorization": {s.auth}}}).BasicAuth(); s.server == "api" &&
			(s.auth == "Bearer "+apiToken || ok && pass == apiToken) {
			product, _, _ := strings.Cut(s.agent, "/")
			clients[product+" "+s.path] = true
		}
		switch {
		case s.server == "git" && strings.HasPrefix(s.auth, "Basic "):
			gitOK = true
		case s.server == "api" && s.auth == "Bearer "+apiToken && s.path == "/api/whoami":
			apiBearer = true
		case s.server == "api" && s.path == "/simple/greet/" && strings.HasPrefix(s.auth, "Basic "):
			apiBasic = true
		case s.server == "api" && s.path == "/echo-gzip":
			gzipSeen = true
		}
	}
	mu.Unlock()
	if !gitOK || !apiBearer || !apiBasic || !gzipSeen {
		t.Errorf("the servers did not see every client with its token: git %v, curl bearer %v, pip basic %v, gzip echo %v",
			gitOK, apiBearer, apiBasic, gzipSeen)
	}
	for _, want := range []string{"curl /api/whoami", "python-requests /api/whoami", "pip /simple/greet/",
		"pip /files/" + filepath.Base(wheel), "npm /npm/greet-e2e", "npm /npm/greet-e2e/-/greet-e2e-1.0.0.tgz"} {
		if !clients[want] {
			t.Errorf("no %q with the token reached the API server (got %v)", want, clients)
		}
	}

	full, _ := cli("--json", "run", "show", id)
	summary, _ := cli("run", "show", id)
	logs := journal("--since", since)
	for _, tok := range []string{gitToken, apiToken} {
		noToken(t, tok, map[string]string{"the run's output": st.Stdout + st.Stderr, "the run's status": full,
			"its summary": summary, "the journal": logs, "its artifacts": readme + echo,
			"the files pip and npm wrote": files})
	}
	// The run's own output (sandbox/run-<id>, through the host's unit)
	// holds the placeholder the code printed; the host's and broker's own
	// lines must not.
	brokerLogs := journal("-u", "sandbox-broker@"+id+".service", "--since", since)
	hostLogs := journal("-t", "sandbox-host", "--since", since)
	if !strings.Contains(hostLogs, "run admitted") {
		t.Errorf("the host's own journal lines are missing:\n%s", hostLogs)
	}
	for what, text := range map[string]string{"the broker's journal": brokerLogs, "the host's own journal lines": hostLogs} {
		if strings.Contains(text, placeholder) || strings.Contains(text, "rtsbx_ph_") {
			t.Errorf("%s hold a placeholder", what)
		}
	}
	for _, want := range []string{"egress intercepted", "credential=e2egit", "credential=e2eapi", "egress refused", "kind=intercept"} {
		if !strings.Contains(brokerLogs, want) {
			t.Errorf("the broker's journal lacks %q:\n%s", want, brokerLogs)
		}
	}
	assertNothingLeft(t, "after a placeholder run")
}

// npmTarball is a package greet-e2e 1.0.0 as a registry serves it: a
// gzipped tar of package/package.json and package/index.js, whose hello()
// answers "greet-e2e <marker>".
func npmTarball(t *testing.T, marker string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", `{"name":"greet-e2e","version":"1.0.0","main":"index.js"}` + "\n"},
		{"package/index.js", fmt.Sprintf("exports.hello = () => %q;\n", "greet-e2e "+marker)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg,
			ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, f.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// npmDocument is the registry's document of greet-e2e: one version whose
// tarball is at tarballURL, with the sums npm checks.
func npmDocument(tarballURL string, tgz []byte) string {
	sha1sum, sha512sum := sha1.Sum(tgz), sha512.Sum512(tgz)
	dist := map[string]string{"tarball": tarballURL, "shasum": hex.EncodeToString(sha1sum[:]),
		"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:])}
	doc, _ := json.Marshal(map[string]any{
		"name": "greet-e2e", "dist-tags": map[string]string{"latest": "1.0.0"},
		"versions": map[string]any{"1.0.0": map[string]any{"name": "greet-e2e", "version": "1.0.0", "main": "index.js", "dist": dist}},
	})
	return string(doc)
}

// untarAll is every file of a gzipped tar, concatenated (what the run
// wrote, for a search).
func untarAll(t *testing.T, tgz []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Errorf("files.tgz: %v", err)
		return ""
	}
	var all strings.Builder
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		all.WriteString(h.Name + "\n")
		io.Copy(&all, tr)
	}
	return all.String()
}
