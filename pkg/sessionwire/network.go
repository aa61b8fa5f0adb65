package sessionwire

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// MaxCredentialedHosts bounds Exec.CredentialedHosts (a run's credential
// bound, runs.MaxCredentials).
const MaxCredentialedHosts = 16

// validateNetwork checks an exec's proxy fields: credentialed hosts only
// with the proxy, each a host:port of printable ASCII without spaces (it
// goes into environment variables).
func (e Exec) validateNetwork() error {
	if err := e.validatePlaceholders(); err != nil {
		return err
	}
	if len(e.CredentialedHosts) == 0 {
		return nil
	}
	if !e.Proxy {
		return invalid("credentialedHosts need proxy")
	}
	if len(e.CredentialedHosts) > MaxCredentialedHosts {
		return invalid(fmt.Sprintf("more than %d credentialedHosts", MaxCredentialedHosts))
	}
	for i, d := range e.CredentialedHosts {
		host, port, err := net.SplitHostPort(d)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || len(d) > 262 || perr != nil || n < 1 || n > 65535 {
			return invalid(fmt.Sprintf("credentialedHosts[%d] is not a host:port", i))
		}
		for j := 0; j < len(d); j++ {
			if d[j] <= ' ' || d[j] >= 0x7f {
				return invalid(fmt.Sprintf("credentialedHosts[%d] is not a host:port", i))
			}
		}
	}
	return nil
}

// CABundleEnv are the variables that name an exec's CA bundle (the
// system roots and the exec's CA; policy.CABundleEnv, which this package
// cannot import): a client may not set them in an exec with placeholders.
var CABundleEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
	"CURL_CA_BUNDLE", "PIP_CERT"}

// validatePlaceholders checks an exec's placeholders: only with the proxy,
// a CA exactly with them (runs/wire.RunEnv's rules: plain names, printable
// values, at most MaxCredentialedHosts), each name one a client could set
// and not set by this exec's client too, no client variable naming the
// CA bundle.
func (e Exec) validatePlaceholders() error {
	if len(e.Placeholders) == 0 && e.RunCA == "" {
		return nil
	}
	switch {
	case !e.Proxy:
		return invalid("placeholders need proxy")
	case len(e.Placeholders) == 0:
		return invalid("runCa goes with placeholders")
	case len(e.RunCA) > MaxRunCABytes:
		return invalid(fmt.Sprintf("runCa over %d bytes", MaxRunCABytes))
	}
	if err := (wire.RunEnv{CA: e.RunCA, Env: e.Placeholders}).Validate(); err != nil {
		return invalid("placeholders: not a variable name with a printable value, or too many")
	}
	for k := range e.Placeholders {
		if ValidEnvName(k) != nil || slices.Contains(CABundleEnv, strings.ToUpper(k)) {
			return invalid("placeholders: a name the supervisor sets or that changes how programs start")
		}
		if _, dup := e.Env[k]; dup {
			return invalid("env: a variable that carries a credential's placeholder in this exec")
		}
	}
	for k := range e.Env {
		if slices.Contains(CABundleEnv, strings.ToUpper(k)) {
			return invalid("env: a variable that names the exec's CA bundle")
		}
	}
	return nil
}

// MaxRunCABytes bounds Exec.RunCA.
const MaxRunCABytes = 16 << 10
