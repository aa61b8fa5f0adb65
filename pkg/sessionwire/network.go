package sessionwire

import (
	"fmt"
	"net"
	"strconv"
)

// MaxCredentialedHosts bounds Exec.CredentialedHosts (a run's credential
// bound, runs.MaxCredentials).
const MaxCredentialedHosts = 16

// validateNetwork checks an exec's proxy fields: credentialed hosts only
// with the proxy, each a host:port of printable ASCII without spaces (it
// goes into environment variables).
func (e Exec) validateNetwork() error {
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
