package sessionsup

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"

	"github.com/roundtable-sandbox/sandbox/pkg/egress/bridge"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// A network session (docs/sessions.md, Network execs): the host mounts its
// broker's socket; the supervisor relays the loopback egress bridge to it
// for the session's life, as a network run's supervisor does for its run.
// The broker refuses every request until the host binds an exec's grant,
// so the bridge grants nothing by itself; only a network exec's
// environment names it (Exec.Proxy).

// startBridge starts the egress bridge when the broker's socket exists;
// the returned func stops it.
func (s *Server) startBridge(ctx context.Context) (stop func()) {
	sock := s.o.BrokerSocket
	if sock == "" {
		sock = supervisor.DefaultBrokerSocket
	}
	if _, err := os.Stat(sock); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("broker socket not usable; no egress bridge", "reason", err.Error())
		}
		return func() {}
	}
	addr := s.o.BridgeAddr
	if addr == "" {
		addr = net.JoinHostPort("127.0.0.1", fmt.Sprint(bridge.Port))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// A network exec then fails to connect; the session goes on.
		s.log.Error("egress bridge failed to listen", "reason", err.Error())
		return func() {}
	}
	s.proxyURL = "http://" + ln.Addr().String()
	b := &bridge.Bridge{Listener: ln, Dial: bridge.UnixDial(sock), MaxConnections: bridge.MaxConnections, Log: s.log}
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.Serve(bctx); err != nil {
			s.log.Error("egress bridge failed", "reason", err.Error())
		}
	}()
	s.log.Info("egress bridge ready", "listen", ln.Addr().String())
	return func() { cancel(); <-done }
}

// Placeholders per exec (docs/sessions.md "Placeholders per exec"): a
// granted network exec whose credentials declare variables carries the
// placeholders its broker minted for that exec's grant and the
// certificate of the CA the grant intercepts with (Exec.Placeholders,
// Exec.RunCA). The supervisor writes one bundle, the system roots and
// that CA, into a directory of its own on the session's /tmp made for the
// exec (a random name the guest cannot take first; as root, one the guest
// cannot write), names it in every family of clients' variable, and
// removes it when the exec ends. The placeholders go into the exec's
// environment only: never logged. A background process the exec leaves
// keeps its copy, and the broker honours it no more once the grant is
// revoked.

// bundleName is the bundle's file name in its exec's directory.
const bundleName = "ca-bundle.pem"

// writeExecBundle writes x's CA bundle and returns its path and the
// directory to remove at the exec's end ("" when x has no placeholders).
func (s *Server) writeExecBundle(x sessionwire.Exec) (bundle, dir string, err error) {
	if len(x.Placeholders) == 0 {
		return "", "", nil
	}
	if _, err := x509.ParseCertificate(pemBlock(x.RunCA)); err != nil {
		return "", "", fmt.Errorf("exec CA: %v", err)
	}
	roots, err := atomicfile.ReadFile(s.o.SystemRoots, maxSystemRootsBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("system roots: %v", err)
	}
	if dir, err = os.MkdirTemp(s.o.TmpDir, ".sandbox-egress-"); err != nil {
		return "", "", err
	}
	data := append(roots, '\n')
	data = append(data, x.RunCA...)
	bundle = filepath.Join(dir, bundleName)
	if err = os.Chmod(dir, 0o755); err == nil {
		err = atomicfile.WriteFile(bundle, data, 0o644)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", "", err
	}
	return bundle, dir, nil
}

// placeholderEnv is x's placeholders (sorted by name) and the bundle's
// variables.
func placeholderEnv(x sessionwire.Exec, bundle string) []string {
	if bundle == "" {
		return nil
	}
	keys := make([]string, 0, len(x.Placeholders))
	for k := range x.Placeholders {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, k+"="+x.Placeholders[k])
	}
	for _, k := range sessionwire.CABundleEnv {
		out = append(out, k+"="+bundle)
	}
	return out
}

// maxSystemRootsBytes bounds the system roots read.
const maxSystemRootsBytes = 4 << 20

// pemBlock is the first PEM block's bytes (nil: none or not a
// certificate).
func pemBlock(s string) []byte {
	b, _ := pem.Decode([]byte(s))
	if b == nil || b.Type != "CERTIFICATE" {
		return nil
	}
	return b.Bytes
}

// proxyEnv is a network exec's proxy environment: the bridge in the proxy
// variables (its credentials are reached by their https URLs with their
// placeholders, placeholderEnv).
func (s *Server) proxyEnv(x sessionwire.Exec) []string {
	if !x.Proxy || s.proxyURL == "" {
		return nil
	}
	var e []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		e = append(e, k+"="+s.proxyURL)
	}
	return e
}
