package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func credPolicy(creds ...EgressCredential) Policy {
	g := DefaultEgress()
	g.Credentials = creds
	return Policy{Version: Version, TurnID: "0123456789abcdef0123456789abcdef",
		Identity:       Identity{Channel: "run-0123456789abcdef0123456789abcdef", ChannelTag: "run-0123456789abcdef0123456789abcdef"},
		DeadlineUnixMs: 1, Limits: DefaultLimits(), Egress: &g, EgressOnly: true}
}

var gitCred = EgressCredential{Name: "git", Host: "git.example.com", Port: 443, Credential: "git-token", Header: "Authorization", Format: FormatBearer}

func TestEgressCredentialsValidate(t *testing.T) {
	p := credPolicy(gitCred, EgressCredential{Name: "api", Host: "127.0.0.1", Port: 8443, Credential: "api-key", Header: "X-Api-Key", Format: FormatRaw})
	if err := p.Validate(); err != nil {
		t.Fatalf("valid credentials refused: %v", err)
	}
	if got, want := p.CredentialNames(), []string{"api-key", "git-token"}; !slices.Equal(got, want) {
		t.Errorf("CredentialNames = %v, want %v (credset copies exactly these)", got, want)
	}
	for _, c := range []struct {
		name   string
		mutate func(*EgressCredential)
	}{
		{"bad name", func(c *EgressCredential) { c.Name = "../x" }},
		{"upper-case host", func(c *EgressCredential) { c.Host = "Git.example.com" }},
		{"host with port", func(c *EgressCredential) { c.Host = "git.example.com:443" }},
		{"numeric last label", func(c *EgressCredential) { c.Host = "1.2.3" }},
		{"non-canonical IP", func(c *EgressCredential) { c.Host = "0:0::1" }},
		{"port 0", func(c *EgressCredential) { c.Port = 0 }},
		{"port too big", func(c *EgressCredential) { c.Port = 65536 }},
		{"no credential", func(c *EgressCredential) { c.Credential = "" }},
		{"header not allowed", func(c *EgressCredential) { c.Header = "Cookie" }},
		{"header not canonical", func(c *EgressCredential) { c.Header = "authorization" }},
		{"unknown format", func(c *EgressCredential) { c.Format = "Token {}" }},
		{"user without basic", func(c *EgressCredential) { c.User = "x" }},
		{"basic without user", func(c *EgressCredential) { c.Format = FormatBasic }},
		{"basic user with colon", func(c *EgressCredential) { c.Format, c.User = FormatBasic, "a:b" }},
		{"basic in another header", func(c *EgressCredential) { c.Format, c.User, c.Header = FormatBasic, "u", "X-Api-Key" }},
	} {
		cr := gitCred
		c.mutate(&cr)
		p := credPolicy(cr)
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	dup := gitCred
	dup.Name = "git2"
	if p := credPolicy(gitCred, dup); !errors.Is(p.Validate(), ErrInvalid) {
		t.Errorf("two credentials for one destination accepted")
	}
	notRun := sample()
	g := DefaultEgress()
	g.Credentials = []EgressCredential{gitCred}
	notRun.Egress = &g
	if err := notRun.Validate(); err == nil || !strings.Contains(err.Error(), "egressOnly") {
		t.Errorf("credentials on a non-run policy: %v, want refused", err)
	}
	ca := credPolicy(gitCred)
	ca.Egress.TestRootCA = "not pem"
	if !errors.Is(ca.Validate(), ErrInvalid) {
		t.Errorf("unparsable testRootCA accepted")
	}
}

func TestEgressCredentialHeaderValue(t *testing.T) {
	for _, c := range []struct{ format, user, want string }{
		{FormatBearer, "", "Bearer s3cr3t"},
		{FormatToken, "", "token s3cr3t"},
		{FormatRaw, "", "s3cr3t"},
		{FormatBasic, "x-access-token", "Basic eC1hY2Nlc3MtdG9rZW46czNjcjN0"},
	} {
		cr := EgressCredential{Format: c.format, User: c.user}
		if got := cr.HeaderValue("s3cr3t"); got != c.want {
			t.Errorf("%s: %q, want %q", c.format, got, c.want)
		}
	}
	if d := (EgressCredential{Host: "::1", Port: 8443}).Dest(); d != "[::1]:8443" {
		t.Errorf("Dest = %q", d)
	}
}
