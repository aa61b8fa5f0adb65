package sessionwire

import "testing"

// TestExecNetworkFields: credentialed hosts only with the proxy, bounded,
// each a plain host:port.
func TestExecNetworkFields(t *testing.T) {
	base := Exec{Command: "x", MaxOutputBytes: 1}
	for _, tc := range []struct {
		name  string
		proxy bool
		hosts []string
		ok    bool
	}{
		{"none", false, nil, true},
		{"proxy only", true, nil, true},
		{"hosts", true, []string{"api.github.test:443", "[::1]:8443"}, true},
		{"hosts without proxy", false, []string{"a:443"}, false},
		{"no port", true, []string{"a"}, false},
		{"port zero", true, []string{"a:0"}, false},
		{"space", true, []string{"a b:443"}, false},
		{"newline", true, []string{"a\n:443"}, false},
		{"too many", true, make([]string, MaxCredentialedHosts+1), false},
	} {
		x := base
		x.Proxy, x.CredentialedHosts = tc.proxy, tc.hosts
		if err := x.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
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
