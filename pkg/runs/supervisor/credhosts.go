package supervisor

// Credentialed hosts inside a session exec (docs/credentialed-egress.md,
// the plain-http route; a run has none: its credentials are reached through
// placeholders, runenv.go, and these are kept only for pkg/sessionsup until
// session execs get placeholders too): the broker
// adds a granted destination's credential only to a plain-http
// absolute-form request for exactly its host:port (an https URL is a
// CONNECT tunnel the broker cannot see into, and carries none). So the
// toolbox's git and curl are pointed at plain-http URLs for those hosts:
// git through url.<base>.insteadOf in the GIT_CONFIG_* environment (no file
// to write, applies to clone, fetch and push), curl through a shim first in
// PATH, because curl has no URL rewriting of its own (a .curlrc can add
// options and URLs, not rewrite them): the shim is this binary under the
// name curl, which rewrites exactly the https://<host>[:<port>] prefix of
// its URL arguments and executes the real curl. Neither ever sees a
// credential: the container has none.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Names of the credentialed-hosts setup.
const (
	// CredentialedHostsEnv lists the granted host:port destinations,
	// space-separated, for the curl shim.
	CredentialedHostsEnv = "SANDBOX_CREDENTIALED_HOSTS"
	// CurlShimName is the name under which this binary is the curl shim.
	CurlShimName = "curl"
	// RealCurl is the toolbox's curl the shim executes.
	RealCurl = "/usr/bin/curl"
	// DefaultShimDir holds the shim (a symlink to this binary) on the
	// run's /tmp; it goes first in the commands' PATH.
	DefaultShimDir = "/tmp/.sandbox-egress/bin"
)

// plainBase is the plain-http URL base of a destination host:port, and
// httpsBases the https spellings of it a tool may be given (the port is
// left out for 443, as URLs usually are).
func plainBase(dest string) string { return "http://" + dest + "/" }

func httpsBases(dest string) []string {
	host, port, _ := net.SplitHostPort(dest)
	bases := []string{"https://" + dest + "/"}
	if port == "443" {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		bases = append(bases, "https://"+host+"/")
	}
	return bases
}

// CredentialedEnv is the environment that points git and curl at the
// plain-http URLs of dests.
func CredentialedEnv(dests []string) []string {
	if len(dests) == 0 {
		return nil
	}
	var e []string
	n := 0
	for _, d := range dests {
		for _, b := range httpsBases(d) {
			e = append(e, "GIT_CONFIG_KEY_"+strconv.Itoa(n)+"=url."+plainBase(d)+".insteadOf",
				"GIT_CONFIG_VALUE_"+strconv.Itoa(n)+"="+b)
			n++
		}
	}
	return append(e, "GIT_CONFIG_COUNT="+strconv.Itoa(n), CredentialedHostsEnv+"="+strings.Join(dests, " "))
}

// InstallCurlShim is installCurlShim for a session's supervisor
// (pkg/sessionsup), whose network execs have credentialed hosts too.
func InstallCurlShim(dir, self string) error { return installCurlShim(dir, self) }

// installCurlShim makes dir/curl a symlink to this binary (self).
func installCurlShim(dir, self string) error {
	if self == "" {
		return errors.New("the supervisor's own path is unknown")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	link := filepath.Join(dir, CurlShimName)
	if err := os.Symlink(self, link); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// RewriteCurlArgs rewrites each argument that is an https URL of one of
// dests (its https://host[:port]/ prefix, or exactly https://host[:port])
// to the plain-http URL of that destination; every other argument is left
// as it is.
func RewriteCurlArgs(args, dests []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		for _, d := range dests {
			for _, b := range httpsBases(d) {
				if rest, ok := strings.CutPrefix(a, b); ok {
					out[i] = plainBase(d) + rest
				} else if a == strings.TrimSuffix(b, "/") {
					out[i] = plainBase(d)
				}
			}
		}
	}
	return out
}

// CurlShim is main for the binary run as curl: it executes RealCurl with
// the rewritten arguments and the same environment; it returns only when
// that fails.
func CurlShim(args []string) int {
	dests := strings.Fields(os.Getenv(CredentialedHostsEnv))
	argv := append([]string{CurlShimName}, RewriteCurlArgs(args, dests)...)
	err := syscall.Exec(RealCurl, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "curl (sandbox shim): %s: %v\n", RealCurl, err)
	return 127
}
