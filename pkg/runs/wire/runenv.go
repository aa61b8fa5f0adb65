package wire

import (
	"fmt"
	"strings"
)

// RunEnvPath is the run broker's route the run's supervisor reads its
// credentials' placeholders and the run CA's certificate from, through
// the egress bridge, before the first command (docs/credentialed-egress.md).
// Nothing in it is secret: the code holds both anyway.
const RunEnvPath = "/v1/egress/run-env"

// MaxRunEnvBytes bounds the route's answer.
const MaxRunEnvBytes = 64 << 10

// RunEnv is the route's answer: the run CA's certificate (PEM) and each
// credential's variable with its placeholder.
type RunEnv struct {
	CA  string            `json:"ca"`
	Env map[string]string `json:"env"`
}

// Validate refuses an answer the supervisor cannot use as it is: no CA
// when there are variables, a variable name that is not a plain name, a
// value with a byte an environment cannot hold.
func (e RunEnv) Validate() error {
	if len(e.Env) > 0 && !strings.Contains(e.CA, "-----BEGIN CERTIFICATE-----") {
		return invalidJob("run env: variables without a CA")
	}
	if len(e.Env) > MaxCredentialedHosts {
		return invalidJob(fmt.Sprintf("run env: at most %d variables", MaxCredentialedHosts))
	}
	for k, v := range e.Env {
		if !envName(k) {
			return invalidJob(fmt.Sprintf("run env: %q is not a variable name", k))
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c > '~' {
				return invalidJob("run env: a value holds a byte an environment cannot")
			}
		}
	}
	return nil
}

func envName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
