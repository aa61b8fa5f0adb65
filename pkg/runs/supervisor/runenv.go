package supervisor

// The run's placeholders and CA bundle (docs/credentialed-egress.md): when
// the job has credentialed hosts, the supervisor asks the run's broker
// (over its socket, before any command) for wire.RunEnv: each credential's
// variable with its placeholder, and the run CA's certificate. It writes
// one bundle, the system roots and the run CA, on the run's /tmp (a
// tmpfs) in a directory of its own that the command's user cannot write,
// and names it in the variables every family of clients reads; the proxy
// variables already point at the bridge. The CA's key never leaves the
// broker; a broker that has no placeholders (credentials without env)
// answers 404 and the run gets none.

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/egress/bridge"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

const (
	// DefaultCABundle is the run's CA bundle: on /tmp, the run's tmpfs.
	DefaultCABundle = "/tmp/.sandbox-egress/ca-bundle.pem"
	// DefaultSystemRoots is the toolbox's system roots (ca-certificates).
	DefaultSystemRoots = "/etc/ssl/certs/ca-certificates.crt"
	// runEnvTimeout bounds the broker call.
	runEnvTimeout = 10 * time.Second
	// maxSystemRootsBytes bounds the system roots read.
	maxSystemRootsBytes = 4 << 20
)

// CABundleEnv are the variables that name the bundle (policy.CABundleEnv:
// OpenSSL's and Go's, Python requests', Node's, git's, curl's, pip's).
var CABundleEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
	"CURL_CA_BUNDLE", "PIP_CERT"}

// fetchRunEnv asks the broker for the run's placeholders and CA; ok is
// false when it has none (404).
func fetchRunEnv(ctx context.Context, dial func(context.Context) (net.Conn, error)) (wire.RunEnv, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, runEnvTimeout)
	defer cancel()
	c, err := dial(ctx)
	if err != nil {
		return wire.RunEnv{}, false, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://broker"+wire.RunEnvPath, nil)
	req.Close = true
	if err := req.Write(c); err != nil {
		return wire.RunEnv{}, false, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return wire.RunEnv{}, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return wire.RunEnv{}, false, nil
	default:
		return wire.RunEnv{}, false, fmt.Errorf("run env: broker answered %d", resp.StatusCode)
	}
	var e wire.RunEnv
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxRunEnvBytes)).Decode(&e); err != nil {
		return wire.RunEnv{}, false, fmt.Errorf("run env: %v", err)
	}
	if err := e.Validate(); err != nil {
		return wire.RunEnv{}, false, err
	}
	for k := range e.Env {
		if reservedEnv(k) {
			return wire.RunEnv{}, false, fmt.Errorf("run env: %s is a variable the supervisor sets", k)
		}
	}
	return e, true, nil
}

// reservedEnv: the names the supervisor sets itself.
func reservedEnv(k string) bool {
	up := strings.ToUpper(k)
	return slices.Contains(CABundleEnv, up) || slices.Contains([]string{"PATH", "HOME", "USER", "LOGNAME", "LANG",
		"DEBIAN_FRONTEND", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}, up) ||
		strings.HasPrefix(up, "GIT_CONFIG") || strings.HasPrefix(up, "SANDBOX_")
}

// writeCABundle writes the system roots (when readable) and the run CA to
// path, readable by all and writable by its owner only, in a directory
// made for it.
func writeCABundle(path, systemRoots, caPEM string) error {
	if _, err := x509.ParseCertificate(pemBlock(caPEM)); err != nil {
		return fmt.Errorf("run CA: %v", err)
	}
	roots, err := atomicfile.ReadFile(systemRoots, maxSystemRootsBytes)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("system roots: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data := append(roots, '\n')
	data = append(data, caPEM...)
	return atomicfile.WriteFile(path, data, 0o644)
}

// runEnvVars is the command environment the run env adds: the
// placeholders (sorted by name) and the bundle's variables. NO_PROXY stays
// unset: every request goes through the bridge (the container has no other
// route), loopback literals included, as without placeholders.
func runEnvVars(e wire.RunEnv, bundle string) []string {
	var out []string
	keys := make([]string, 0, len(e.Env))
	for k := range e.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+e.Env[k])
	}
	for _, k := range CABundleEnv {
		out = append(out, k+"="+bundle)
	}
	return out
}

// pemBlock is the first PEM block's bytes (nil: none).
func pemBlock(s string) []byte {
	b, _ := pem.Decode([]byte(s))
	if b == nil || b.Type != "CERTIFICATE" {
		return nil
	}
	return b.Bytes
}

// setupRunEnv fetches the run env from the broker and writes the bundle;
// the commands' environment then carries both.
func (s *supervisor) setupRunEnv(ctx context.Context) error {
	e, ok, err := fetchRunEnv(ctx, bridge.UnixDial(s.o.BrokerSocket))
	if err != nil || !ok {
		return err
	}
	if err := writeCABundle(s.o.CABundle, s.o.SystemRoots, e.CA); err != nil {
		return err
	}
	s.runEnv = runEnvVars(e, s.o.CABundle)
	s.log.Info("run credentials' placeholders ready", "variables", len(e.Env), "bundle", s.o.CABundle)
	return nil
}
