package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestRewriteCurlArgs(t *testing.T) {
	dests := []string{"git.example.com:443", "127.0.0.1:8443"}
	for _, c := range []struct{ in, want []string }{
		{[]string{"-fsS", "https://git.example.com/api/v4/user"}, []string{"-fsS", "http://git.example.com:443/api/v4/user"}},
		{[]string{"https://git.example.com:443/x"}, []string{"http://git.example.com:443/x"}},
		{[]string{"https://git.example.com"}, []string{"http://git.example.com:443/"}},
		{[]string{"https://127.0.0.1:8443/p?q=1"}, []string{"http://127.0.0.1:8443/p?q=1"}},
		// Not a granted destination, or not exactly it: unchanged.
		{[]string{"https://127.0.0.1/p"}, []string{"https://127.0.0.1/p"}},
		{[]string{"https://git.example.com.evil.test/"}, []string{"https://git.example.com.evil.test/"}},
		{[]string{"https://git.example.com:4443/"}, []string{"https://git.example.com:4443/"}},
		{[]string{"http://git.example.com/"}, []string{"http://git.example.com/"}},
		{[]string{"-H", "X: https://git.example.com/"}, []string{"-H", "X: https://git.example.com/"}},
	} {
		if got := RewriteCurlArgs(c.in, dests); !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCredentialedEnv(t *testing.T) {
	got := CredentialedEnv([]string{"git.example.com:443", "127.0.0.1:8443"})
	want := []string{
		"GIT_CONFIG_KEY_0=url.http://git.example.com:443/.insteadOf", "GIT_CONFIG_VALUE_0=https://git.example.com:443/",
		"GIT_CONFIG_KEY_1=url.http://git.example.com:443/.insteadOf", "GIT_CONFIG_VALUE_1=https://git.example.com/",
		"GIT_CONFIG_KEY_2=url.http://127.0.0.1:8443/.insteadOf", "GIT_CONFIG_VALUE_2=https://127.0.0.1:8443/",
		"GIT_CONFIG_COUNT=3", "SANDBOX_CREDENTIALED_HOSTS=git.example.com:443 127.0.0.1:8443",
	}
	if !slices.Equal(got, want) {
		t.Errorf("CredentialedEnv =\n%q\nwant\n%q", got, want)
	}
	if e := CredentialedEnv(nil); e != nil {
		t.Errorf("no hosts: %q, want nothing", e)
	}
}

func TestInstallCurlShim(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shim", "bin")
	self, _ := os.Executable()
	for i := 0; i < 2; i++ { // idempotent: a second job in the same /tmp
		if err := installCurlShim(dir, self); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.Readlink(filepath.Join(dir, "curl")); err != nil || got != self {
		t.Errorf("curl shim -> %q %v, want %q", got, err, self)
	}
	if err := installCurlShim(dir, ""); err == nil {
		t.Errorf("no self: nil error")
	}
}
