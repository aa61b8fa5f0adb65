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
