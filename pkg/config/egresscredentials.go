package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// EgressCredential is one entry of egress.credentials: a destination an
// approved run may reach with a credential the broker adds
// (docs/credentialed-egress.md). A run asks for it by Name; it may when its
// project is in Projects or its owner's uid in Clients.
type EgressCredential struct {
	Name       string `mapstructure:"name"`
	Host       string `mapstructure:"host"`
	Port       int    `mapstructure:"port"`
	Credential string `mapstructure:"credential"`
	Header     string `mapstructure:"header"`
	Format     string `mapstructure:"format"`
	// User is basic auth's fixed user (format basic only).
	User string `mapstructure:"user"`
	// Env is the variable a run sees the credential's placeholder in
	// (docs/credentialed-egress.md); "" means DefaultEnv's name.
	Env      string   `mapstructure:"env"`
	Projects []string `mapstructure:"projects"`
	Clients  []int    `mapstructure:"clients"`
}

// MayAsk reports whether a run of project (may be "") by uid may carry it.
func (e EgressCredential) MayAsk(project string, uid int) bool {
	return project != "" && slices.Contains(e.Projects, project) || slices.Contains(e.Clients, uid)
}

// EnvName is the variable a run sees the placeholder in: Env, or
// DefaultEnv(Name) when Env is unset. Every credential a run carries is
// reached through a placeholder (the plain-http route with its git and
// curl rewrites is gone for runs), so one without env still gets one.
func (e EgressCredential) EnvName() string {
	if e.Env != "" {
		return e.Env
	}
	return DefaultEnv(e.Name)
}

// DefaultEnv is the variable of a credential named name that declares no
// env: the name upper-cased, every character but a letter or digit as
// '_', then _TOKEN ("gitlab" -> GITLAB_TOKEN, "my-api" -> MY_API_TOKEN).
func DefaultEnv(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b) + "_TOKEN"
}

// Policy is the entry as a run's policy carries it (no value, no grants).
func (e EgressCredential) Policy() policy.EgressCredential {
	h, _ := policy.CanonicalCredentialHeader(e.Header)
	return policy.EgressCredential{Name: e.Name, Host: e.Host, Port: e.Port, Credential: e.Credential,
		Header: h, Format: e.Format, User: e.User, Env: e.EnvName()}
}

// EgressCredential returns the egress.credentials entry named name.
func (c *Config) EgressCredential(name string) (EgressCredential, bool) {
	for _, e := range c.Egress.Credentials {
		if e.Name == name {
			return e, true
		}
	}
	return EgressCredential{}, false
}

// TestRootCA reads egress.testRootCAFile ("" when unset): PEM
// certificates the run brokers trust for loopback IP literal destinations
// only. It is for tests; the shipped configuration never sets it.
func (c *Config) TestRootCA() (string, error) {
	p := c.Egress.TestRootCAFile
	if p == "" {
		return "", nil
	}
	data, err := atomicfile.ReadFile(p, policy.MaxTestRootCABytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("egress.testRootCAFile: %s does not exist: %w", p, ErrInvalid)
		}
		return "", fmt.Errorf("egress.testRootCAFile: %s: %v: %w", p, err, ErrInvalid)
	}
	if _, err := policy.ParseRootCA(string(data)); err != nil {
		return "", fmt.Errorf("egress.testRootCAFile: %s: %v: %w", p, err, ErrInvalid)
	}
	return string(data), nil
}

// CredentialGrant is what a broker's egress grant holds of the named
// credentialed destinations: their policy entries and, when any is named,
// the test root CA (a code run's policy, a session exec's grant). A name no
// longer declared is refused (names are checked at admission; this is the
// second look when the broker is prepared).
func (c *Config) CredentialGrant(names []string) ([]policy.EgressCredential, string, error) {
	if len(names) == 0 {
		return nil, "", nil
	}
	out := make([]policy.EgressCredential, 0, len(names))
	for _, n := range names {
		e, ok := c.EgressCredential(n)
		if !ok {
			return nil, "", fmt.Errorf("credential destination %q is no longer declared (egress.credentials)", n)
		}
		out = append(out, e.Policy())
	}
	ca, err := c.TestRootCA()
	if err != nil {
		return nil, "", err
	}
	return out, ca, nil
}

// validateEgressCredentials checks egress.credentials and
// egress.testRootCAFile; each error names the key as written.
func (c *Config) validateEgressCredentials(bad func(key, format string, a ...any)) {
	ec := c.Egress.Credentials
	if len(ec) > MaxEgressCredentials {
		bad("egress.credentials", "at most %d entries, got %d", MaxEgressCredentials, len(ec))
	}
	names, dests, envs := map[string]int{}, map[string]int{}, map[string]int{}
	for i, e := range ec {
		key := fmt.Sprintf("egress.credentials[%d]", i)
		if !projectNameRe.MatchString(e.Name) {
			bad(key+".name", "%q must match %s", e.Name, projectNameRe)
		} else if j, dup := names[e.Name]; dup {
			bad(key+".name", "%q is also egress.credentials[%d]'s name", e.Name, j)
		} else {
			names[e.Name] = i
		}
		hostOK := policy.ValidEgressHost(e.Host)
		if !hostOK {
			bad(key+".host", "%q must be an exact lower-case DNS name or a canonical IP address (no scheme, port or path)", e.Host)
		}
		portOK := e.Port >= 1 && e.Port <= 65535
		if !portOK {
			bad(key+".port", "must be the destination's HTTPS port, 1 to 65535, got %d", e.Port)
		}
		if hostOK && portOK {
			d := e.Policy().Dest()
			if j, dup := dests[d]; dup {
				bad(key+".host", "%s is also egress.credentials[%d]'s destination", d, j)
			}
			dests[d] = i
			if a, err := netip.ParseAddr(e.Host); err == nil && !safefetch.Public(a) && !slices.Contains(c.Egress.Allow, d) {
				bad(key+".host", "%s is not a public address: list %s in egress.allow too, or the broker refuses it", e.Host, d)
			}
		}
		if !policy.ValidCredentialName(e.Credential) {
			bad(key+".credential", "%q must name a file in the credentials directory ([A-Za-z0-9._-], not starting with a dot)", e.Credential)
		}
		header, headerOK := policy.CanonicalCredentialHeader(e.Header)
		if !headerOK {
			bad(key+".header", "%q must be one of %v", e.Header, policy.CredentialHeaders)
		}
		switch e.Format {
		case policy.FormatBasic:
			if headerOK && header != "Authorization" {
				bad(key+".format", "basic goes in the Authorization header, not %s", header)
			}
			if !policy.ValidCredentialUser(e.User) {
				bad(key+".user", "format basic needs a fixed user of 1 to 64 printable characters without ':'")
			}
		case policy.FormatBearer, policy.FormatToken, policy.FormatRaw:
			if e.User != "" {
				bad(key+".user", "is only for format basic")
			}
		default:
			bad(key+".format", "%q must be one of %q", e.Format, policy.CredentialFormats)
		}
		// Unset, env is the name's default, checked alike (so a config
		// that loaded before env existed still loads, or says why not).
		env, how := e.EnvName(), ""
		if e.Env == "" {
			how = fmt.Sprintf(" (unset: the default from name %q; declare env)", e.Name)
		}
		if err := policy.ValidCredentialEnv(env); err != nil {
			bad(key+".env", "%v%s", err, how)
		} else if j, dup := envs[env]; dup {
			bad(key+".env", "%q is also egress.credentials[%d]'s env%s", env, j, how)
		} else {
			envs[env] = i
		}
		if len(e.Projects) == 0 && len(e.Clients) == 0 {
			bad(key, "names no projects and no clients: nobody may ask for it")
		}
		for j, p := range e.Projects {
			if _, ok := c.Runs.ProjectPath(p); !ok {
				bad(fmt.Sprintf("%s.projects[%d]", key, j), "%q is not in runs.projects", p)
			}
		}
		for j, u := range e.Clients {
			if u < 0 {
				bad(fmt.Sprintf("%s.clients[%d]", key, j), "must be a uid (0 or more), got %d", u)
			}
		}
	}
	if p := c.Egress.TestRootCAFile; p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		bad("egress.testRootCAFile", "%q must be a clean absolute path (tests only; leave it unset)", p)
	}
}

// MaxEgressCredentials bounds egress.credentials (a run may carry all).
const MaxEgressCredentials = policy.MaxEgressCredentials
