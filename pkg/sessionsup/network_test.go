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
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/placeholder"
	"github.com/roundtable-sandbox/sandbox/pkg/runca"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// TestBridgeAndProxyEnv: without a broker socket there is no bridge and
// no exec gets proxy variables; with one, the bridge relays to it and
// only an exec with Proxy gets them, and nothing else: no git rewrite,
// no curl shim, the PATH as it is (docs/credentialed-egress.md: one
// mechanism, the placeholders).
func TestBridgeAndProxyEnv(t *testing.T) {
	dir, err := os.MkdirTemp("", "sb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "broker.sock")
	newServer := func() *Server {
		o := Options{UID: os.Geteuid(), GID: os.Getegid(), BrokerSocket: sock, BridgeAddr: "127.0.0.1:0",
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if os.Geteuid() == 0 {
			o.UID, o.GID = guestUID, guestGID
		}
		s, err := New(o, io.Discard, io.Discard, testReaper)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	proxied := sessionwire.Exec{Command: "x", Proxy: true}
	s := newServer()
	stop := s.startBridge(context.Background())
	stop()
	if e := s.env(proxied, ""); slices.ContainsFunc(e, func(v string) bool { return strings.Contains(strings.ToLower(v), "proxy") }) {
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
	e := s.env(proxied, "")
	if !slices.Contains(e, "HTTPS_PROXY="+s.proxyURL) || e[0] != "PATH="+DefaultPATH {
		t.Errorf("network exec env %q: want the bridge and the PATH as it is", e)
	}
	if slices.ContainsFunc(e, func(v string) bool {
		return strings.HasPrefix(v, "GIT_CONFIG_") || strings.HasPrefix(v, "SANDBOX_CREDENTIALED_HOSTS=")
	}) {
		t.Errorf("network exec env %q: a plain-http rewrite is left", e)
	}
	if _, err := os.Lstat(filepath.Join(dir, "shim")); !os.IsNotExist(err) {
		t.Errorf("something was installed beside the socket: %v", err)
	}
	if e := s.env(sessionwire.Exec{Command: "x"}, ""); slices.ContainsFunc(e, func(v string) bool { return strings.Contains(strings.ToLower(v), "proxy") }) ||
		e[0] != "PATH="+DefaultPATH {
		t.Errorf("an exec without network got proxy variables: %q", e)
	}
}

// TestExecPlaceholders: an exec with placeholders gets each variable, a
// CA bundle (the system roots, then its CA) in a directory of its own on
// the session's /tmp named by every client family's variable, removed at
// its end; an exec without gets none of them; a CA that does not parse
// starts nothing.
func TestExecPlaceholders(t *testing.T) {
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte("SYSTEM-ROOTS"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) { o.SystemRoots = roots })
	ca, err := runca.New([]string{"127.0.0.1"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ph, err := placeholder.New()
	if err != nil {
		t.Fatal(err)
	}
	x := sessionwire.Exec{Command: `printf '%s\n' "$GITHUB_TOKEN" "$SSL_CERT_FILE" "$PIP_CERT" "$NODE_EXTRA_CA_CERTS"; cat "$SSL_CERT_FILE"`,
		Proxy: true, Placeholders: map[string]string{"GITHUB_TOKEN": ph.Reveal()}, RunCA: string(ca.CertPEM())}
	r := f.exec("p1", x)
	if r.res == nil || r.res.ExitCode != 0 {
		t.Fatalf("exec: %+v %+v %s", r.res, r.err, r.stderr)
	}
	lines := strings.SplitN(r.stdout, "\n", 5)
	if len(lines) != 5 || lines[0] != ph.Reveal() {
		t.Fatalf("the exec did not see its placeholder: %d lines", len(lines))
	}
	bundle := lines[1]
	if !strings.HasPrefix(bundle, f.tmp+"/.sandbox-egress-") || lines[2] != bundle || lines[3] != bundle {
		t.Errorf("bundle variables %q %q %q, want one file under %s", lines[1], lines[2], lines[3], f.tmp)
	}
	if lines[4] != "SYSTEM-ROOTS\n"+string(ca.CertPEM()) {
		t.Errorf("bundle %q: want the system roots then the exec's CA", lines[4])
	}
	if _, err := os.Stat(filepath.Dir(bundle)); !os.IsNotExist(err) {
		t.Errorf("the exec's bundle directory outlived it: %v", err)
	}
	r = f.exec("p2", sessionwire.Exec{Command: `printf '%s' "$GITHUB_TOKEN$SSL_CERT_FILE"`, Proxy: true})
	if r.res == nil || r.stdout != "" {
		t.Errorf("an exec without placeholders got %q", r.stdout)
	}
	x.RunCA = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
	if r = f.exec("p3", x); r.res != nil || r.err == nil || r.err.Code != sessionwire.ErrInternal {
		t.Errorf("a CA that does not parse: result %+v error %+v, want the internal error", r.res, r.err)
	}
}
