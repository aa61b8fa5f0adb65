package policy

import (
	"fmt"
	"strings"
)

// MaxCredentialEnvBytes bounds a credential's variable name.
const MaxCredentialEnvBytes = 64

// CABundleEnv are the variables that name the run's CA bundle (the system
// roots and the run CA, docs/credentialed-egress.md): one for each family
// of clients that reads its own.
var CABundleEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
	"CURL_CA_BUNDLE", "PIP_CERT"}

// runtimeEnv are the names the runtime sets in a run or session exec
// (identity, search path, the egress route, the CA bundle) or that change
// how a program starts: a credential's variable may be none of them.
var runtimeEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "PWD": true, "OLDPWD": true,
	"IFS": true, "ENV": true, "BASH_ENV": true, "CDPATH": true, "LANG": true, "TERM": true, "TMPDIR": true,
	"DEBIAN_FRONTEND": true, "HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "NO_PROXY": true,
	"FTP_PROXY": true, "SSL_CERT_DIR": true, "GCONV_PATH": true, "HOSTALIASES": true, "LOCALDOMAIN": true,
	"RES_OPTIONS": true, "NLSPATH": true,
}

// runtimeEnvPrefixes: the dynamic loader's, bash's exported functions,
// git's configuration from the environment and the family's own.
var runtimeEnvPrefixes = []string{"LD_", "BASH_FUNC_", "GIT_CONFIG", "SANDBOX_"}

func init() {
	for _, e := range CABundleEnv {
		runtimeEnv[e] = true
	}
}

// ValidCredentialEnv checks the variable a run sees a credential's
// placeholder in: ASCII letters, digits and '_', not starting with a
// digit, at most MaxCredentialEnvBytes, and not a name the runtime sets
// (compared without case: the proxy variables are read in both cases).
func ValidCredentialEnv(name string) error {
	if name == "" || len(name) > MaxCredentialEnvBytes {
		return fmt.Errorf("must be 1 to %d bytes", MaxCredentialEnvBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return fmt.Errorf("%q must be ASCII letters, digits and '_', not starting with a digit", name)
		}
	}
	up := strings.ToUpper(name)
	if runtimeEnv[up] {
		return fmt.Errorf("%q is a variable the runtime sets", name)
	}
	for _, p := range runtimeEnvPrefixes {
		if strings.HasPrefix(up, p) {
			return fmt.Errorf("%q starts with %s, which the runtime reserves", name, p)
		}
	}
	return nil
}
