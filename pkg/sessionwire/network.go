package sessionwire

import (
	"fmt"
	"slices"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// validateNetwork checks an exec's proxy fields (its placeholders; a
// credential is reached only through its placeholder,
// docs/credentialed-egress.md: one mechanism).
func (e Exec) validateNetwork() error { return e.validatePlaceholders() }

// CABundleEnv are the variables that name an exec's CA bundle (the
// system roots and the exec's CA; policy.CABundleEnv, which this package
// cannot import): a client may not set them in an exec with placeholders.
var CABundleEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
	"CURL_CA_BUNDLE", "PIP_CERT"}

// validatePlaceholders checks an exec's placeholders: only with the proxy,
// a CA exactly with them (runs/wire.RunEnv's rules: plain names, printable
// values, at most wire.MaxCredentialedHosts), each name one a client could set
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
