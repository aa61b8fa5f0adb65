//go:build linux

package broker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/test/netns"
)

// TestBrokerOwnAddressIntegration: with a public-looking address on an
// interface of the box (8.8.4.4 on a dummy interface of the test's own
// network namespace) and an HTTP server on it, all three ways a guest
// reaches the web through a production-built broker refuse it: a fetch
// tool (generic 502), the proxy route's CONNECT (403) and a rich turn's
// attachment (502). The server sees only the test's own connections.
func TestBrokerOwnAddressIntegration(t *testing.T) {
	if !netns.Enter(t) {
		return
	}
	netns.AddLink(t, "sbx0")
	netns.AddAddr(t, "sbx0", "8.8.4.4")
	ln, err := net.Listen("tcp", "8.8.4.4:0")
	if err != nil {
		t.Fatal(err)
	}
	at := netip.MustParseAddrPort(ln.Addr().String())
	peers := make(chan string, 64) // accepted peers, in the kernel's order
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "the box's own service") }),
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				peers <- c.RemoteAddr().String()
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	control := func() string { // a plain connect: the server answers
		t.Helper()
		c, err := net.Dial("tcp", at.String())
		if err != nil {
			t.Fatalf("plain connect to %s: %v", at, err)
		}
		defer c.Close()
		return c.LocalAddr().String()
	}
	if first, got := control(), <-peers; got != first {
		t.Fatalf("first connection from %s, not the control %s", got, first)
	}
	own := "http://" + at.String() + "/"

	h := newHarness(t, func(p *policy.Policy) {
		p.Tools = append(p.Tools, policy.Tool{Name: "fetch", Kind: policy.KindFetch, TimeoutMs: 5000})
		g := policy.DefaultEgress()
		p.Egress = &g
	})
	if code, body, _ := h.do("/tools/fetch", fmt.Sprintf(`{"url":%q}`, own)); code != http.StatusBadGateway || body != `{"error":"tool failed"}` {
		t.Errorf("fetch tool to the box's own address: %d %s, want the generic tool failure", code, body)
	}
	if c, _, code := brokerTunnel(t, h, at.String()); code != http.StatusForbidden {
		if c != nil {
			c.Close()
		}
		t.Errorf("CONNECT to the box's own address: %d, want 403", code)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "an address of this box") || !strings.Contains(logs, `"reason":"address refused"`) {
		t.Errorf("the refusals' log lines do not name the rule:\n%s", logs)
	}

	rh := newRichHarnessWith(t, os.Getuid(), nil)
	b := rh.bind("off")
	b.Turn.Attachments = []richproto.Attachment{{URL: own + "file.txt", Name: "file.txt"}}
	got := rh.control(context.Background(), b)
	// A worker announces itself before it polls (the broker refuses a poll
	// from one it has not heard).
	if code, body, _ := rh.do(richproto.RouteReady, ""); code != http.StatusOK {
		t.Fatalf("ready: %d %s", code, body)
	}
	if code, body, _ := rh.do(richproto.RouteNext, ""); code != http.StatusOK {
		t.Fatalf("poll: %d %s", code, body)
	}
	if code, body, _ := rh.do(richproto.RouteAttachment, attachReq(0)); code != http.StatusBadGateway {
		t.Errorf("attachment on the box's own address: %d %.80q, want 502", code, body)
	}
	if code, _, _ := rh.do(richproto.RouteResult, resultJSON(richTurnID, "ok")); code != http.StatusOK {
		t.Fatal("result refused")
	}
	<-got
	if logs := rh.logs.String(); !strings.Contains(logs, `"kind":"address refused"`) {
		t.Errorf("the attachment refusal's log line lacks its kind:\n%s", logs)
	}

	// Accepts come in connection order: anything a broker had connected
	// comes before this second control.
	last := control()
	for p := range peers {
		if p == last {
			break
		}
		t.Errorf("the server on the box's own address accepted a connection from %s (a broker's)", p)
	}
}
