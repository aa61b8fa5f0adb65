package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEgressCredentialsLoad: the keys as written in YAML reach the struct,
// a header in any case is canonical in the policy form, and the shipped
// configuration has no credentials and no test root CA.
func TestEgressCredentialsLoad(t *testing.T) {
	y := base + `runs:
  projects:
    - {name: demo, path: /srv/demo}
egress:
  credentials:
    - name: gitlab
      host: gitlab.example.com
      port: 443
      credential: gitlab-token
      header: PRIVATE-TOKEN
      format: "{}"
      env: GITLAB_TOKEN
      projects: [demo]
    - name: gh
      host: github.com
      port: 443
      credential: gh-token
      header: Authorization
      format: basic
      user: x-access-token
      clients: [1000]
`
	c, err := Load(write(t, y))
	if err != nil {
		t.Fatal(err)
	}
	gl, ok := c.EgressCredential("gitlab")
	if !ok || gl.Policy().Header != "Private-Token" || gl.Policy().Dest() != "gitlab.example.com:443" ||
		gl.Policy().Env != "GITLAB_TOKEN" {
		t.Fatalf("gitlab = %+v %v", gl.Policy(), ok)
	}
	gh, _ := c.EgressCredential("gh")
	// No env: the default variable, so every run's credential has one.
	if gh.Env != "" || gh.Policy().Env != "GH_TOKEN" {
		t.Errorf("gh without env: Env %q, policy env %q, want GH_TOKEN", gh.Env, gh.Policy().Env)
	}
	for name, want := range map[string]string{"gitlab": "GITLAB_TOKEN", "my-api.v2": "MY_API_V2_TOKEN", "X_y": "X_Y_TOKEN"} {
		if got := DefaultEnv(name); got != want {
			t.Errorf("DefaultEnv(%q) = %q, want %q", name, got, want)
		}
	}
	for _, m := range []struct {
		e       EgressCredential
		project string
		uid     int
		want    bool
	}{
		{gl, "demo", 5, true}, {gl, "", 5, false}, {gl, "other", 1000, false},
		{gh, "", 1000, true}, {gh, "demo", 1001, false},
	} {
		if got := m.e.MayAsk(m.project, m.uid); got != m.want {
			t.Errorf("%s MayAsk(%q, %d) = %v, want %v", m.e.Name, m.project, m.uid, got, m.want)
		}
	}
	if _, err := Load(write(t, base+"egress:\n  credentials:\n    - {name: x, hots: a.example.com}\n")); err == nil ||
		!strings.Contains(err.Error(), "egress.credentials[0].hots: unknown key") {
		t.Errorf("misspelt key: %v, want it named as written", err)
	}
	shipped, err := Load("../../packaging/sandbox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(shipped.Egress.Credentials) != 0 || shipped.Egress.TestRootCAFile != "" {
		t.Errorf("the shipped configuration has credentials or a test root CA: %+v", shipped.Egress)
	}
}

// TestEgressCredentialsValidate: each rule refuses with the key as written.
func TestEgressCredentialsValidate(t *testing.T) {
	ok := EgressCredential{Name: "git", Host: "git.example.com", Port: 443, Credential: "git-token",
		Header: "Authorization", Format: "Bearer {}", Projects: []string{"demo"}}
	basec := func() *Config {
		c := validBase(t)
		c.Runs.Projects = []Project{{Name: "demo", Path: "/srv/demo"}}
		c.Egress.Credentials = []EgressCredential{ok}
		return c
	}
	if err := basec().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	cases := []struct {
		name    string
		mutate  func(*Config)
		wantKey string
	}{
		{"bad name", func(c *Config) { c.Egress.Credentials[0].Name = "a b" }, "egress.credentials[0].name"},
		{"twice", func(c *Config) {
			d := ok
			d.Host = "other.example.com"
			c.Egress.Credentials = append(c.Egress.Credentials, d)
		}, "egress.credentials[1].name"},
		{"same destination", func(c *Config) {
			d := ok
			d.Name = "git2"
			c.Egress.Credentials = append(c.Egress.Credentials, d)
		}, "egress.credentials[1].host"},
		{"URL as host", func(c *Config) { c.Egress.Credentials[0].Host = "https://git.example.com" }, "egress.credentials[0].host"},
		{"upper-case host", func(c *Config) { c.Egress.Credentials[0].Host = "Git.example.com" }, "egress.credentials[0].host"},
		{"private address not allowed", func(c *Config) { c.Egress.Credentials[0].Host = "10.0.0.5" }, "egress.credentials[0].host: 10.0.0.5 is not a public address"},
		{"port", func(c *Config) { c.Egress.Credentials[0].Port = 0 }, "egress.credentials[0].port"},
		{"credential name", func(c *Config) { c.Egress.Credentials[0].Credential = "../model" }, "egress.credentials[0].credential"},
		{"header", func(c *Config) { c.Egress.Credentials[0].Header = "Cookie" }, "egress.credentials[0].header"},
		{"format", func(c *Config) { c.Egress.Credentials[0].Format = "Bearer" }, "egress.credentials[0].format"},
		{"basic without user", func(c *Config) { c.Egress.Credentials[0].Format = "basic" }, "egress.credentials[0].user"},
		{"basic elsewhere", func(c *Config) {
			c.Egress.Credentials[0].Format, c.Egress.Credentials[0].User, c.Egress.Credentials[0].Header = "basic", "u", "X-Api-Key"
		}, "egress.credentials[0].format"},
		{"user without basic", func(c *Config) { c.Egress.Credentials[0].User = "u" }, "egress.credentials[0].user"},
		{"nobody may ask", func(c *Config) { c.Egress.Credentials[0].Projects = nil }, "egress.credentials[0]: names no projects and no clients"},
		{"unknown project", func(c *Config) { c.Egress.Credentials[0].Projects = []string{"nope"} }, "egress.credentials[0].projects[0]"},
		{"negative client", func(c *Config) { c.Egress.Credentials[0].Clients = []int{-1} }, "egress.credentials[0].clients[0]"},
		{"env PATH", func(c *Config) { c.Egress.Credentials[0].Env = "PATH" }, `egress.credentials[0].env: "PATH" is a variable the runtime sets`},
		{"env lower-case proxy", func(c *Config) { c.Egress.Credentials[0].Env = "https_proxy" }, `egress.credentials[0].env: "https_proxy"`},
		{"env CA bundle", func(c *Config) { c.Egress.Credentials[0].Env = "SSL_CERT_FILE" }, "egress.credentials[0].env"},
		{"env NODE_EXTRA_CA_CERTS", func(c *Config) { c.Egress.Credentials[0].Env = "NODE_EXTRA_CA_CERTS" }, "egress.credentials[0].env"},
		{"env git config", func(c *Config) { c.Egress.Credentials[0].Env = "GIT_CONFIG_COUNT" }, "egress.credentials[0].env"},
		{"env loader", func(c *Config) { c.Egress.Credentials[0].Env = "LD_PRELOAD" }, "egress.credentials[0].env"},
		{"env not a name", func(c *Config) { c.Egress.Credentials[0].Env = "1TOKEN" }, "egress.credentials[0].env"},
		{"env twice", func(c *Config) {
			c.Egress.Credentials[0].Env = "TOKEN"
			d := ok
			d.Name, d.Host, d.Env = "git2", "other.example.com", "TOKEN"
			c.Egress.Credentials = append(c.Egress.Credentials, d)
		}, "egress.credentials[1].env"},
		{"default env not a name", func(c *Config) { c.Egress.Credentials[0].Name, c.Egress.Credentials[0].Env = "1pass", "" },
			`egress.credentials[0].env: "1PASS_TOKEN" must be`},
		{"default env is another's env", func(c *Config) {
			c.Egress.Credentials[0].Env = "GIT2_TOKEN"
			d := ok
			d.Name, d.Host, d.Env = "git2", "other.example.com", ""
			c.Egress.Credentials = append(c.Egress.Credentials, d)
		}, `egress.credentials[1].env: "GIT2_TOKEN" is also egress.credentials[0]'s env (unset: the default from name "git2"; declare env)`},
		{"relative CA", func(c *Config) { c.Egress.TestRootCAFile = "ca.pem" }, "egress.testRootCAFile"},
	}
	for _, tc := range cases {
		c := basec()
		tc.mutate(c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.wantKey) {
			t.Errorf("%s: %v, want a refusal naming %s", tc.name, err, tc.wantKey)
		}
	}
	c := basec()
	c.Egress.Credentials[0].Host = "127.0.0.1"
	c.Egress.Credentials[0].Port = 8443
	c.Egress.Allow = []string{"127.0.0.1:8443"}
	if err := c.Validate(); err != nil {
		t.Errorf("loopback destination in egress.allow refused: %v", err)
	}
}

func TestTestRootCA(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	good := filepath.Join(dir, "ca.pem")
	os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	bad := filepath.Join(dir, "bad.pem")
	os.WriteFile(bad, []byte("not a certificate"), 0o644)
	for _, c := range []struct {
		path, wantErr string
	}{
		{"", ""}, {good, ""},
		{bad, "egress.testRootCAFile"}, {filepath.Join(dir, "missing.pem"), "egress.testRootCAFile"},
	} {
		cfg := &Config{Egress: Egress{TestRootCAFile: c.path}}
		got, err := cfg.TestRootCA()
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%q: %v", c.path, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%q: %v, want an error naming %s", c.path, err, c.wantErr)
		case c.path == good && !strings.Contains(got, "BEGIN CERTIFICATE"):
			t.Errorf("%q: %q", c.path, got)
		}
	}
}

// TestCredentialGrant: no names, no grant and no CA read (a broken CA file
// does not fail a run without credentials); declared names give their
// policy entries in order with the test root CA; a name no longer declared,
// or an unreadable CA, refuses the grant.
func TestCredentialGrant(t *testing.T) {
	cfg := &Config{Egress: Egress{TestRootCAFile: filepath.Join(t.TempDir(), "missing.pem"), Credentials: []EgressCredential{
		{Name: "gh", Host: "github.com", Port: 443, Credential: "gh-token", Header: "authorization"},
		{Name: "gl", Host: "gitlab.example.com", Port: 443, Credential: "gl-token", Env: "GITLAB_TOKEN"},
	}}}
	if got, ca, err := cfg.CredentialGrant(nil); got != nil || ca != "" || err != nil {
		t.Errorf("no names: %v %q %v", got, ca, err)
	}
	if _, _, err := cfg.CredentialGrant([]string{"gh"}); err == nil || !strings.Contains(err.Error(), "egress.testRootCAFile") {
		t.Errorf("unreadable CA: %v, want refused naming egress.testRootCAFile", err)
	}
	cfg.Egress.TestRootCAFile = ""
	got, ca, err := cfg.CredentialGrant([]string{"gl", "gh"})
	if err != nil || ca != "" || len(got) != 2 || got[0].Name != "gl" || got[0].Env != "GITLAB_TOKEN" || got[1].Host != "github.com" || got[1].Header != "Authorization" {
		t.Errorf("declared: %+v %q %v", got, ca, err)
	}
	if _, _, err := cfg.CredentialGrant([]string{"gh", "gone"}); err == nil || !strings.Contains(err.Error(), `"gone" is no longer declared`) {
		t.Errorf("undeclared: %v, want refused naming it", err)
	}
}
