package policy

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// Grants marks a session's long-lived broker policy (DESIGN.md section 18,
// docs/credentialed-egress.md "Sessions"): its TurnID is the session's
// broker id, its deadline the session's lifetime bound, and its only route
// is the proxy route, served only while the host has bound a Grant over
// the host-only control path (RouteControlGrant, RouteControlRevoke). It
// has no model, tools, MCP servers or standing egress grant: between two
// network execs the broker has no network to give.
type Grants struct {
	// Credentials names every credential file a grant of this broker may
	// carry (credset copies exactly these into the broker's unit); a grant
	// naming another is refused at bind. Empty: no grant carries one.
	Credentials []string `json:"credentials,omitempty"`
}

// Routes of a session broker's host-only control path: the peer's
// SO_PEERCRED uid must be the policy file's owner (the host's).
const (
	// RouteControlGrant binds a Grant (the body) and answers GrantAnswer
	// once every request of the exec is admitted under it.
	RouteControlGrant = "/control/grant"
	// RouteControlRevoke revokes the grant of the exec a Revoke names and
	// answers RevokeAnswer only once nothing of it can pass any more.
	RouteControlRevoke = "/control/revoke"
)

// Bounds of a grant.
const (
	// MaxExecIDBytes bounds an exec id (sessionwire's MaxIDBytes).
	MaxExecIDBytes = 64
	// MaxGrantBytes bounds a control request's body (a grant with sixteen
	// credentials and a test root CA fits).
	MaxGrantBytes = 256 << 10
)

// Grant is one exec's network: a revision of the session broker's policy
// naming the exec (DESIGN.md section 18). It holds what a network run's
// policy holds (the egress bounds and the credentialed destinations the
// human approved for this exec) and never a credential value.
type Grant struct {
	// Exec is the exec's id (sessionwire's alphabet: 1 to 64 of
	// [A-Za-z0-9._-]); every log line of the grant names it.
	Exec string `json:"exec"`
	// Revision orders a broker's grants: each bind names a revision above
	// every earlier one, so a bind the host retried or delayed can never
	// bring back a grant that was already revoked.
	Revision int64 `json:"revision"`
	// DeadlineUnixMs ends the grant by itself (the exec's timeout, plus
	// its drain): a host that never revokes leaves no grant behind.
	DeadlineUnixMs int64 `json:"deadlineUnixMs"`
	// Egress is the approved network: bounds and credentialed destinations.
	Egress Egress `json:"egress"`
}

// Deadline is the grant's own end as a time.
func (g Grant) Deadline() time.Time { return time.UnixMilli(g.DeadlineUnixMs) }

// Validate checks a grant against the session broker's policy p: a valid
// exec id and revision, a deadline set, an egress grant within p's limits
// whose credentials are all among p.Grants.Credentials.
func (g Grant) Validate(p *Policy) error {
	if p == nil || p.Grants == nil {
		return bad("a grant is for a session broker's (grants) policy only")
	}
	switch {
	case !ValidExecID(g.Exec):
		return bad("grant exec must be 1 to %d of [A-Za-z0-9._-]", MaxExecIDBytes)
	case g.Revision < 1:
		return bad("grant revision must be positive")
	case g.DeadlineUnixMs <= 0:
		return bad("grant deadlineUnixMs must be set")
	}
	if err := g.Egress.Validate(p.Limits); err != nil {
		return err
	}
	for _, c := range g.Egress.Credentials {
		if !slices.Contains(p.Grants.Credentials, c.Credential) {
			return bad("grant credential %s is not among the session broker's grants.credentials", c.Credential)
		}
	}
	return nil
}

// ValidExecID reports whether id is an exec id: 1 to MaxExecIDBytes ASCII
// letters, digits, '.', '_' or '-' (the session wire's rule).
func ValidExecID(id string) bool {
	if id == "" || len(id) > MaxExecIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Revoke is the body of RouteControlRevoke.
type Revoke struct {
	Exec string `json:"exec"`
}

// GrantAnswer is the broker's answer to a bind. For a grant whose
// credentials declare a variable (EgressCredential.Env), the broker
// minted placeholders and a CA for this exec only (docs/sessions.md,
// "Placeholders per exec"): Env maps each variable to its placeholder and
// CA is the exec CA's certificate (PEM), for the exec's environment and
// CA bundle. Both die with the grant. A GrantAnswer prints and logs
// without the placeholders (String, LogValue).
type GrantAnswer struct {
	Exec     string            `json:"exec"`
	Revision int64             `json:"revision"`
	CA       string            `json:"ca,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
}

// MaxGrantCABytes bounds GrantAnswer.CA (one P-256 certificate with name
// constraints for at most MaxEgressCredentials hosts).
const MaxGrantCABytes = 16 << 10

// Validate refuses an answer whose placeholders the exec cannot carry:
// variables without a CA, a variable ValidCredentialEnv refuses, more
// than MaxEgressCredentials, a value that is not printable ASCII without
// a space, a CA over MaxGrantCABytes.
func (a GrantAnswer) Validate() error {
	if len(a.CA) > MaxGrantCABytes {
		return bad("grant answer: ca over %d bytes", MaxGrantCABytes)
	}
	if len(a.Env) == 0 {
		return nil
	}
	if !strings.Contains(a.CA, "-----BEGIN CERTIFICATE-----") {
		return bad("grant answer: placeholders without a CA")
	}
	if len(a.Env) > MaxEgressCredentials {
		return bad("grant answer: at most %d placeholders", MaxEgressCredentials)
	}
	for k, v := range a.Env {
		if err := ValidCredentialEnv(k); err != nil {
			return bad("grant answer: env: %v", err)
		}
		if v == "" || len(v) > MaxCredentialEnvBytes {
			return bad("grant answer: a placeholder is empty or too long")
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= ' ' || c > '~' {
				return bad("grant answer: a placeholder holds a byte an environment cannot")
			}
		}
	}
	return nil
}

// String never shows a placeholder: the exec, revision and variables.
func (a GrantAnswer) String() string {
	names := make([]string, 0, len(a.Env))
	for k := range a.Env {
		names = append(names, k)
	}
	slices.Sort(names)
	return fmt.Sprintf("grant of exec %s revision %d (placeholders for %v)", a.Exec, a.Revision, names)
}

// GoString is String (%#v).
func (a GrantAnswer) GoString() string { return a.String() }

// LogValue never shows a placeholder.
func (a GrantAnswer) LogValue() slog.Value { return slog.StringValue(a.String()) }

// RevokeAnswer is the broker's answer to a revoke: what it cut.
type RevokeAnswer struct {
	Exec     string `json:"exec"`
	Revision int64  `json:"revision"`
	// Connections is the guest connections to the broker opened under the
	// grant that were still open and were closed; Requests the proxy
	// requests (tunnels included) still running that were cut.
	Connections int `json:"connections"`
	Requests    int `json:"requests"`
}

// validateGrants checks a session broker's policy: the proxy route under
// grants only, credential names valid and unique.
func (p *Policy) validateGrants() error {
	if p.EgressOnly || p.Precheck || p.Egress != nil || p.Model != (Model{}) || len(p.Tools) > 0 || len(p.MCP) > 0 {
		return bad("a grants policy has no model, tools, MCP servers or standing egress grant (egressOnly, precheck and rich are other kinds)")
	}
	if len(p.Grants.Credentials) > MaxEgressCredentials {
		return bad("grants.credentials: at most %d", MaxEgressCredentials)
	}
	seen := map[string]bool{}
	for _, n := range p.Grants.Credentials {
		if !validCredName(n) || seen[n] {
			return bad("grants.credentials must be unique credential names")
		}
		seen[n] = true
	}
	return p.validateLimitsAndEgress()
}
