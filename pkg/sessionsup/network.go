package sessionsup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

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
	s.installShim()
	return func() { cancel(); <-done }
}

// installShim installs the curl shim that sends a credentialed host's
// https URLs to the broker as plain http (the broker adds the credential
// and speaks TLS), as a network run's supervisor does. It is made before
// any exec runs, as the supervisor (root in the container: the guest
// cannot replace it).
func (s *Server) installShim() {
	dir, self := s.o.ShimDir, s.o.Self
	if dir == "" {
		dir = supervisor.DefaultShimDir
	}
	if self == "" {
		self, _ = os.Executable()
	}
	if err := supervisor.InstallCurlShim(dir, self); err != nil {
		// git still works (its environment); curl then goes through
		// CONNECT and carries no credential.
		s.log.Warn("curl shim not installed", "reason", err.Error())
		return
	}
	s.shimDir = dir
}

// execPATH is x's PATH: the shim's directory first for a network exec
// with credentialed hosts.
func (s *Server) execPATH(x sessionwire.Exec) string {
	if x.Proxy && len(x.CredentialedHosts) > 0 && s.proxyURL != "" && s.shimDir != "" {
		return s.shimDir + ":" + s.o.PATH
	}
	return s.o.PATH
}

// proxyEnv is a network exec's proxy environment: the bridge in the proxy
// variables, and git pointed at its credentialed hosts' plain-http URLs
// (the broker adds the credential and speaks TLS).
func (s *Server) proxyEnv(x sessionwire.Exec) []string {
	if !x.Proxy || s.proxyURL == "" {
		return nil
	}
	var e []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		e = append(e, k+"="+s.proxyURL)
	}
	return append(e, supervisor.CredentialedEnv(x.CredentialedHosts)...)
}
