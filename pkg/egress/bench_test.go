package egress

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/egress/bridge"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

const benchBytes = 64 << 20

// BenchmarkDownload64MiB: one 64 MiB download from a loopback HTTP server,
// side by side: direct; through the proxy route on a Unix socket (as the
// broker serves it) with CONNECT and in absolute form; and CONNECT through
// the in-container bridge in front of that socket (the container's path).
func BenchmarkDownload64MiB(b *testing.B) {
	payload := make([]byte, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(benchBytes))
		for i := 0; i < benchBytes/len(payload); i++ {
			w.Write(payload)
		}
	}))
	defer srv.Close()
	dest := netip.MustParseAddrPort(srv.Listener.Addr().String())
	grant := policy.Egress{MaxConnections: 4, MaxBytesOut: policy.MaxEgressBytes, MaxBytesIn: policy.MaxEgressBytes, ConnectionTimeoutMs: 600_000}
	dir := b.TempDir()
	sock := filepath.Join(dir, "broker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	newProxy := func() *Proxy {
		return New(&safefetch.Dialer{Allow: []netip.AddrPort{dest}}, grant, time.Now().Add(time.Hour), slog.New(slog.DiscardHandler))
	}
	var proxy atomic.Pointer[Proxy]
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { proxy.Load().ServeHTTP(w, r) })}
	go hs.Serve(ln)
	defer hs.Close()
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go (&bridge.Bridge{Listener: bln, Dial: bridge.UnixDial(sock)}).Serve(ctx)

	unixProxy := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "broker"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}
	// Go's transport uses CONNECT for an http URL only when told to: the
	// tunnel variants fetch through a CONNECT made by hand.
	tunnelVia := func(dial func() (net.Conn, error)) *http.Transport {
		return &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			c, err := dial()
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dest, dest)
			buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
			if _, err := io.ReadFull(c, buf); err != nil || string(buf[9:12]) != "200" {
				c.Close()
				return nil, fmt.Errorf("CONNECT: %q %v", buf, err)
			}
			return c, nil
		}}
	}
	variants := []struct {
		name string
		tr   *http.Transport
	}{
		{"direct", &http.Transport{}},
		{"connect", tunnelVia(func() (net.Conn, error) { return net.Dial("unix", sock) })},
		{"connect-bridge", tunnelVia(func() (net.Conn, error) { return net.Dial("tcp", bln.Addr().String()) })},
		{"absolute-form", unixProxy},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			client := &http.Client{Transport: v.tr}
			defer v.tr.CloseIdleConnections()
			b.SetBytes(benchBytes)
			for b.Loop() {
				proxy.Store(newProxy()) // a fresh turn: fresh budgets
				v.tr.CloseIdleConnections()
				resp, err := client.Get(srv.URL + "/big")
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != benchBytes {
					b.Fatalf("read %d bytes, %v", n, err)
				}
			}
		})
	}
}
