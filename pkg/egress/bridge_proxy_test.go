package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/egress/bridge"
)

// TestBridgeToProxy: an HTTP client honouring a proxy URL on the bridge
// reaches an allowed destination through the bridge and the proxy route on
// a Unix socket, and a refused one gets the proxy's 403.
func TestBridgeToProxy(t *testing.T) {
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "through") }))
	defer dest.Close()
	r := newRig(t, testGrant(), []netip.AddrPort{serverAddr(t, dest)}, nil)
	sock := filepath.Join(t.TempDir(), "broker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r.proxy}
	go srv.Serve(ln)
	defer srv.Close()
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (&bridge.Bridge{Listener: bln, Dial: bridge.UnixDial(sock), MaxConnections: 4}).Serve(ctx)
	addr := bln.Addr().String()
	pu, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get(dest.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "through" {
		t.Errorf("allowed: %d %q", resp.StatusCode, body)
	}
	port := strings.TrimPrefix(dest.URL, "http://127.0.0.1:")
	resp, err = client.Get(fmt.Sprintf("http://169.254.169.254:%s/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("metadata: %d, want 403", resp.StatusCode)
	}
}
