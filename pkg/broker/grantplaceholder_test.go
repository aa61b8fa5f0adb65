package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/placeholder"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// grantToken is the harness's gh-token value (newGrantHarness).
const grantToken = "ghp_realsecretvalue0123456789"

// phGrant is exec's grant of the gh-token credential on up, declaring
// GITHUB_TOKEN (so the broker mints a placeholder for the exec).
func (g *grantHarness) phGrant(exec string, up *icptUpstream) policy.Grant {
	_, p, _ := net.SplitHostPort(up.addr())
	port, _ := strconv.Atoi(p)
	gr := g.grant(exec)
	gr.Egress.Credentials = []policy.EgressCredential{{Name: "gh", Host: "127.0.0.1", Port: port, Credential: "gh-token",
		Header: "Authorization", Format: policy.FormatBearer, Env: "GITHUB_TOKEN"}}
	gr.Egress.TestRootCA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.srv.Certificate().Raw}))
	return gr
}

// guestHTTPS is a guest's HTTPS client through the broker socket (the
// proxy variables and the bridge), trusting caPEM (the exec's bundle).
func (g *grantHarness) guestHTTPS(t *testing.T, caPEM string) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(caPEM)) {
		t.Fatal("the exec CA does not parse")
	}
	proxy, _ := http.NewRequest("GET", "http://broker", nil)
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(proxy.URL),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", g.sock)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

func getWith(c *http.Client, url, auth string) (int, string, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", auth)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestGrantPlaceholdersPerExec: a session exec's grant whose credential
// declares a variable gets its own placeholder and CA in the bind answer;
// under the grant the placeholder is swapped for the value on the way to
// its host; once revoked, the same client (a background process the exec
// left) is refused at the broker and reaches nothing; the next exec's
// grant has another placeholder and CA, and the first exec's placeholder
// is not swapped under it. Nothing logged holds the token or a
// placeholder.
func TestGrantPlaceholdersPerExec(t *testing.T) {
	up := newIcptUpstream(t, grantToken, "http://127.0.0.1:1")
	g := newGrantHarnessAllowing(t, os.Getuid(), []string{up.addr()})
	url := "https://" + up.addr() + "/private"

	a1, err := g.ctl.Bind(context.Background(), g.phGrant("exec-1", up))
	if err != nil {
		t.Fatal(err)
	}
	ph1 := a1.Env["GITHUB_TOKEN"]
	if _, ok := placeholder.Parse(ph1); !ok || len(a1.Env) != 1 || strings.Contains(a1.CA, "PRIVATE KEY") {
		t.Fatalf("bind answer: %d variables, placeholder parses %v", len(a1.Env), ok)
	}
	guest := g.guestHTTPS(t, a1.CA)
	code, body, err := getWith(guest, url, "Bearer "+ph1)
	if err != nil || code != 200 || !strings.HasPrefix(body, "PRIVATE") {
		t.Fatalf("under the grant: %d %q %v\n%s", code, body, err, g.logs)
	}
	if got := up.lastAuth(); got != "Bearer "+grantToken {
		t.Errorf("the host got %q, want the swapped value", got)
	}
	seen := up.seen()
	g.revoke("exec-1")
	if code, _, err := getWith(guest, url, "Bearer "+ph1); err == nil {
		t.Errorf("after the revoke the placeholder still got an answer: %d", code)
	}
	if up.seen() != seen {
		t.Errorf("a request reached the host after the revoke")
	}

	a2, err := g.ctl.Bind(context.Background(), g.phGrant("exec-2", up))
	if err != nil {
		t.Fatal(err)
	}
	ph2 := a2.Env["GITHUB_TOKEN"]
	if ph2 == ph1 || a2.CA == a1.CA {
		t.Fatal("the second exec got the first exec's placeholder or CA")
	}
	// The first exec's CA vouches for nothing under the second grant.
	if _, _, err := getWith(guest, url, "Bearer "+ph1); err == nil {
		t.Error("the first exec's CA was trusted under the second exec's grant")
	}
	guest2 := g.guestHTTPS(t, a2.CA)
	if code, _, _ := getWith(guest2, url, "Bearer "+ph1); code != http.StatusUnauthorized || up.lastAuth() != "Bearer "+ph1 {
		t.Errorf("the first exec's placeholder under the second grant: %d, host saw a swapped value %v", code, up.lastAuth() != "Bearer "+ph1)
	}
	if code, _, err := getWith(guest2, url, "Bearer "+ph2); err != nil || code != 200 {
		t.Errorf("the second exec's placeholder: %d %v", code, err)
	}
	g.revoke("exec-2")
	m := credential.NewMatcher(credential.NewSecret(grantToken), credential.NewSecret(ph1), credential.NewSecret(ph2))
	if m.Reflected(g.logs.String()) {
		t.Errorf("the broker's log holds the token or a placeholder:\n%s", g.logs)
	}
}
