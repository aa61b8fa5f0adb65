package e2e

// This file sorts after scenarios_test.go (see tail_egress_test.go).

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/egress/bridge"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// TestProxyRouteThroughBridge: the egress proxy route end to end with the
// installed broker unit and worker image. No host code grants egress yet
// (code-execution runs will), so the test plays the host's part for one
// granted broker: it makes the turn directory and a policy carrying an
// egress grant whose egress.allow names two loopback servers of this test
// (one TLS, one plain), and starts the broker's socket unit. A container of
// the worker image runs `sandbox-worker egress-bridge` with --network none and
// the turn directory at /run/broker; a client container shares its network
// namespace (loopback only) and fetches through HTTPS_PROXY/HTTP_PROXY at the
// bridge. The allowed servers answer through CONNECT and absolute form; a
// second port on the same address, the metadata address, a name resolving to
// loopback and an encoded loopback are refused with 403 and reach nothing; a
// direct connection (no proxy) has no network at all; the broker's journal
// names each connection's host:port and bytes, never a path or a body.
func TestProxyRouteThroughBridge(t *testing.T) {
	diagnose(t)
	marker := "PROXY-PAGE-" + randHex(4)
	var okHits, otherHits atomic.Int64
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		okHits.Add(1)
		io.WriteString(w, marker)
	})
	tlsSrv := httptest.NewTLSServer(page)
	defer tlsSrv.Close()
	plain := httptest.NewServer(page)
	defer plain.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		io.WriteString(w, "other")
	}))
	defer other.Close()
	tlsAddr, plainAddr, otherAddr := tlsSrv.Listener.Addr().String(), plain.Listener.Addr().String(), other.Listener.Addr().String()
	_, otherPort, _ := net.SplitHostPort(otherAddr)
	loopName := bindHosts(t, "127.0.0.1 proxy-e2e.example.com\n")

	// The host's part: turn directory, policy with the grant, socket unit.
	id := ids.NewTurnID()
	dir, _ := layout.TurnDir(layout.RunRoot, id)
	policyPath, _ := layout.PolicyFile(layout.PolicyDir, id)
	sockUnit, _ := ids.BrokerSocketUnit(id)
	svcUnit, _ := ids.BrokerServiceUnit(id)
	t.Cleanup(func() {
		_, _ = run("systemctl", "stop", sockUnit, svcUnit)
		_, _ = run("systemctl", "reset-failed", sockUnit, svcUnit)
		_ = os.Remove(policyPath)
		_ = os.RemoveAll(dir)
	})
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, err := run("chown", "_sandbox:_sandbox", dir); err != nil {
		t.Fatalf("chown turn directory: %v: %s", err, out)
	}
	const ch = "e2e-proxy"
	grant := policy.DefaultEgress()
	pol := &policy.Policy{
		Version:        policy.Version,
		TurnID:         id,
		Identity:       policy.Identity{Channel: ch, ChannelTag: ids.ChannelTag(ch), SpeakerID: "alice", SpeakerName: "Guest alice", PrincipalID: "principal-alice"},
		DeadlineUnixMs: time.Now().Add(3 * time.Minute).UnixMilli(),
		Model: policy.Model{URL: fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", env.modelPort), Name: "e2e-model",
			MaxTokens: 1024, Credential: "model", AllowHTTP: true},
		Limits:      policy.DefaultLimits(),
		EgressAllow: []string{tlsAddr, plainAddr},
		Egress:      &grant,
	}
	data, err := pol.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// policies/ is setgid _sandbox-broker: the file gets the broker's group.
	if err := atomicfile.WriteFile(policyPath, data, 0o640); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	systemctl(t, "start", sockUnit)

	// The bridge: the worker image's own binary, no network, the turn
	// directory read-only at /run/broker, as a guest would have it.
	name := "rt-e2e-bridge-" + randHex(4)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run("docker", "logs", name)
			t.Logf("--- bridge container log ---\n%s", out)
		}
		_, _ = run("docker", "rm", "-f", name)
	})
	if out, err := run("docker", "run", "-d", "--name", name, "--network", "none", "--read-only", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--user", "65534:65534", "-v", dir+":/run/broker:ro",
		layout.DefaultImage, "egress-bridge"); err != nil {
		t.Fatalf("start the bridge container: %v: %s", err, out)
	}
	if msg := eventually(15*time.Second, func() string {
		if out, _ := run("docker", "logs", name); !strings.Contains(out, "bridge ready") {
			return "bridge not ready: " + out
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}

	ok := []string{"https://" + tlsAddr + "/page?token=QUERY-MARKER", "http://" + plainAddr + "/page?token=QUERY-MARKER"}
	refused := []string{
		"http://" + otherAddr + "/",                 // the allowed address, another port
		"https://" + otherAddr + "/",                // the same through CONNECT
		"http://169.254.169.254/latest/meta-data/",  // cloud metadata
		"https://169.254.169.254/latest/meta-data/", // the same through CONNECT
		"http://2130706433:" + otherPort + "/",      // decimal-encoded loopback
	}
	if loopName {
		refused = append(refused, "http://proxy-e2e.example.com:"+otherPort+"/", "https://proxy-e2e.example.com:"+otherPort+"/")
	}
	direct := "direct:http://" + plainAddr + "/page"
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", bridge.Port)
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}))
	args := []string{"run", "--rm", "--network", "container:" + name, "--read-only", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--user", "65534:65534",
		"-e", "HTTPS_PROXY=" + proxyURL, "-e", "HTTP_PROXY=" + proxyURL, "-e", "E2E_CA_PEM=" + caPEM,
		"--entrypoint", "/hostile", hostileImage, "proxy-client"}
	args = append(append(append(args, ok...), refused...), direct)
	out, err := run("docker", args...)
	if err != nil {
		t.Fatalf("client container: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var results map[string]struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
		Body   string `json:"body"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &results); err != nil {
		t.Fatalf("client output is not its report: %v: %s", err, out)
	}
	for _, u := range ok {
		if r := results[u]; r.Status != http.StatusOK || r.Body != marker {
			t.Errorf("%s: %+v, want 200 %s", u, r, marker)
		}
	}
	for _, u := range refused {
		r := results[u]
		// Go's client reports a refused CONNECT as an error naming the
		// status text; an absolute-form refusal is the answer itself.
		if !(r.Status == http.StatusForbidden && r.Body == "destination refused") && !strings.Contains(r.Error, "Forbidden") {
			t.Errorf("%s: %+v, want the proxy's 403", u, r)
		}
	}
	if r := results[direct]; r.Error == "" || r.Status != 0 {
		t.Errorf("a direct connection from the container got %+v, want no network", r)
	}
	if n := okHits.Load(); n != int64(len(ok)) {
		t.Errorf("the allowed servers were reached %d times, want %d", n, len(ok))
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the second port was reached %d times", n)
	}
	logs := journal("-u", svcUnit, "--since", since)
	for _, want := range []string{"egress connection", "dest=" + tlsAddr, "dest=" + plainAddr, "bytes_in=", "egress refused", "169.254.169.254"} {
		if !strings.Contains(logs, want) {
			t.Errorf("broker journal lacks %q:\n%s", want, logs)
		}
	}
	for _, leak := range []string{marker, "QUERY-MARKER", "/page", "meta-data"} {
		if strings.Contains(logs, leak) {
			t.Errorf("broker journal contains %q", leak)
		}
	}
}
