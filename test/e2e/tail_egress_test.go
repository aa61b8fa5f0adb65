package e2e

// This file sorts after scenarios_test.go, so its scenarios run after those
// (Go runs files in name order): they change the host's configuration.

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFetchToolEgress: a guest's fetch reaches the one exact egress.allow
// destination (a loopback server of this test) and nothing else: loopback,
// another port on the same address, the metadata address, encoded forms and
// names resolving to private addresses are refused, reach nothing, and the
// broker's journal names host and status but never the path or the body.
func TestFetchToolEgress(t *testing.T) {
	diagnose(t)
	var pageHits, otherHits atomic.Int64
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pageHits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<html><head><title>e2e page</title></head><body><p>PAGE-BODY-7f3a</p></body></html>")
	}))
	defer page.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHits.Add(1)
		io.WriteString(w, "other")
	}))
	defer other.Close()
	_, pagePort, _ := net.SplitHostPort(page.Listener.Addr().String())
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())

	c := baseConfig()
	c.FetchAllow = "127.0.0.1:" + pagePort
	withConfig(t, c)
	privateName := bindHosts(t, "10.20.30.40 private-e2e.example.com\n127.0.0.1 loop-e2e.example.com\n")
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	const ch = "e2e-fetch"
	channelOn(t, ch)

	r := turn(ch, "alice", page.URL+"/e2e-page?e2efetch")
	if r.Err != nil || r.Status != http.StatusOK || !strings.Contains(replyText(r), `fetched: "e2e page\nPAGE-BODY-7f3a"`) {
		t.Fatalf("allowed fetch: %s", r)
	}
	refused := []string{
		other.URL + "/?e2efetch",                                  // same address, another port
		"http://169.254.169.254/latest/meta-data/?e2efetch",       // cloud metadata
		"http://[::1]:" + pagePort + "/?e2efetch",                 // loopback, another address
		"http://2130706433:" + pagePort + "/?e2efetch",            // encoded form of the allowed address
		"http://localhost:" + pagePort + "/?e2efetch",             // special-use name
		"http://loop-e2e.example.com:" + otherPort + "/?e2efetch", // a name for loopback, another port
	}
	if privateName {
		refused = append(refused, "http://private-e2e.example.com:"+pagePort+"/?e2efetch") // resolves to 10.20.30.40
	}
	for _, u := range refused {
		r := turn(ch, "alice", u)
		if r.Err != nil || r.Status != http.StatusOK || !strings.Contains(replyText(r), "fetched: Tool call refused or failed.") {
			t.Errorf("%s: %s, want the generic tool failure", u, r)
		}
	}
	if n := pageHits.Load(); n != 1 {
		t.Errorf("the allowed server was reached %d times, want 1", n)
	}
	if n := otherHits.Load(); n != 0 {
		t.Errorf("the second port was reached %d times", n)
	}
	logs := journal("-u", "sandbox-broker@*", "--since", since)
	for _, want := range []string{"fetch refused", "address refused", "URL refused", "127.0.0.1"} {
		if !strings.Contains(logs, want) {
			t.Errorf("broker journal lacks %q", want)
		}
	}
	for _, leak := range []string{"PAGE-BODY-7f3a", "e2efetch", "e2e-page", "meta-data"} {
		if strings.Contains(logs, leak) {
			t.Errorf("broker journal contains %q", leak)
		}
	}
}

// bindHosts bind-mounts a copy of /etc/hosts with extra lines over it for the
// rest of the test (the namespace's mounts are private). It reports false,
// with a log line, where the mount is not possible.
func bindHosts(t *testing.T, extra string) bool {
	t.Helper()
	orig, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Logf("no /etc/hosts: %v; skipping the private-name case", err)
		return false
	}
	p := filepath.Join(env.work, "hosts")
	if err := os.WriteFile(p, append(append(orig, '\n'), extra...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", p, "/etc/hosts").CombinedOutput(); err != nil {
		t.Logf("mount --bind over /etc/hosts: %v: %s; skipping the private-name case", err, out)
		return false
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "/etc/hosts").CombinedOutput(); err != nil {
			t.Errorf("umount /etc/hosts: %v: %s", err, out)
		}
	})
	return true
}
