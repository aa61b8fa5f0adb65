package sessionsup

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// TestBridgeAndProxyEnv: without a broker socket there is no bridge and
// no exec gets proxy variables; with one, the bridge relays to it and
// only an exec with Proxy gets them (and git's credentialed hosts).
func TestBridgeAndProxyEnv(t *testing.T) {
	dir, err := os.MkdirTemp("", "sb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "broker.sock")
	newServer := func() *Server {
		o := Options{UID: os.Geteuid(), GID: os.Getegid(), BrokerSocket: sock, BridgeAddr: "127.0.0.1:0",
			ShimDir: filepath.Join(dir, "shim"), Self: "/bin/true", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if os.Geteuid() == 0 {
			o.UID, o.GID = guestUID, guestGID
		}
		s, err := New(o, io.Discard, io.Discard, testReaper)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	proxied := sessionwire.Exec{Command: "x", Proxy: true, CredentialedHosts: []string{"api.github.test:443"}}
	s := newServer()
	stop := s.startBridge(context.Background())
	stop()
	if e := s.env(proxied); slices.ContainsFunc(e, func(v string) bool { return strings.Contains(strings.ToLower(v), "proxy") }) {
		t.Errorf("no broker socket, yet proxy variables: %q", e)
	}

	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("broker"))
			c.Close()
		}
	}()
	s = newServer()
	stop = s.startBridge(context.Background())
	defer stop()
	if s.proxyURL == "" {
		t.Fatal("no bridge with a broker socket")
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(s.proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if string(got) != "broker" {
		t.Errorf("through the bridge: %q, want the broker's bytes", got)
	}
	e := s.env(proxied)
	if !slices.Contains(e, "HTTPS_PROXY="+s.proxyURL) || !slices.Contains(e, "SANDBOX_CREDENTIALED_HOSTS=api.github.test:443") {
		t.Errorf("network exec env %q: want the bridge and the credentialed host", e)
	}
	if e := s.env(sessionwire.Exec{Command: "x"}); slices.ContainsFunc(e, func(v string) bool { return strings.Contains(strings.ToLower(v), "proxy") }) ||
		e[0] != "PATH="+DefaultPATH {
		t.Errorf("an exec without network got proxy variables or the shim: %q", e)
	}
	if e[0] != "PATH="+filepath.Join(dir, "shim")+":"+DefaultPATH {
		t.Errorf("credentialed exec's %s: want the curl shim first", e[0])
	}
	if target, err := os.Readlink(filepath.Join(dir, "shim", "curl")); err != nil || target != "/bin/true" {
		t.Errorf("curl shim: %q %v", target, err)
	}
	if e := s.env(sessionwire.Exec{Command: "x", Proxy: true}); e[0] != "PATH="+DefaultPATH {
		t.Errorf("a network exec without credentialed hosts has %s: want no shim", e[0])
	}
}
