package sessionwire

import (
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// TestExecHasNoPlainHTTPRoute: an exec's credentials are reached only
// through placeholders (docs/credentialed-egress.md: one mechanism), so
// the old credentialedHosts field, which pointed git and a curl shim at
// plain-http URLs, is refused like any unknown field.
func TestExecHasNoPlainHTTPRoute(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		ok         bool
	}{
		{"proxy", `{"command":"x","maxOutputBytes":1,"proxy":true}`, true},
		{"credentialedHosts", `{"command":"x","maxOutputBytes":1,"proxy":true,"credentialedHosts":["a:443"]}`, false},
	} {
		var x Exec
		err := wire.StrictJSON([]byte(tc.json), &x)
		if err == nil {
			err = x.Validate()
		}
		if got := err == nil; got != tc.ok {
			t.Errorf("%s: got ok %v (%v), want %v", tc.name, got, err, tc.ok)
		}
	}
}

// TestExecPlaceholders: placeholders only with the proxy and a CA, names
// a client could set and not set by the client too, no client variable
// naming the CA bundle.
func TestExecPlaceholders(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	const ph = "rtsbx_ph_0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name  string
		proxy bool
		phs   map[string]string
		ca    string
		env   map[string]string
		ok    bool
	}{
		{"one", true, map[string]string{"GITHUB_TOKEN": ph}, ca, nil, true},
		{"with client env", true, map[string]string{"GITHUB_TOKEN": ph}, ca, map[string]string{"FOO": "1"}, true},
		{"without proxy", false, map[string]string{"GITHUB_TOKEN": ph}, ca, nil, false},
		{"without CA", true, map[string]string{"GITHUB_TOKEN": ph}, "", nil, false},
		{"CA alone", true, nil, ca, nil, false},
		{"CA over the bound", true, map[string]string{"GITHUB_TOKEN": ph}, ca + string(make([]byte, MaxRunCABytes)), nil, false},
		{"PATH", true, map[string]string{"PATH": ph}, ca, nil, false},
		{"a CA bundle variable", true, map[string]string{"SSL_CERT_FILE": ph}, ca, nil, false},
		{"denied prefix", true, map[string]string{"LD_PRELOAD": ph}, ca, nil, false},
		{"value with a space", true, map[string]string{"GITHUB_TOKEN": "a b"}, ca, nil, false},
		{"client sets it too", true, map[string]string{"GITHUB_TOKEN": ph}, ca, map[string]string{"GITHUB_TOKEN": "x"}, false},
		{"client names the bundle", true, map[string]string{"GITHUB_TOKEN": ph}, ca, map[string]string{"SSL_CERT_FILE": "/x"}, false},
	} {
		x := Exec{Command: "x", MaxOutputBytes: 1, Proxy: tc.proxy, Placeholders: tc.phs, RunCA: tc.ca, Env: tc.env}
		if err := x.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
