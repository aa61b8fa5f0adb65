package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const conf = `{"listen": "127.0.0.1:-1", "jetstream": {"store_dir": "%s", "cipher": "aes"}}`

// TestOptionsRefusals: no JetStream, a key others can read, a
// short or multi-line key: each refuses to start and names why.
func TestOptionsRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := strings.Repeat("k", 64) + "\n"
	withJS := write("js.conf", strings.Replace(conf, "%s", filepath.Join(dir, "store"), 1), 0o600)
	for _, tc := range []struct {
		name, conf, key, want string
	}{
		{"no jetstream", write("nojs.conf", `{"listen": "127.0.0.1:-1"}`, 0o600), write("k1", good, 0o600), "JetStream is not enabled"},
		{"key readable by group", withJS, write("k3", good, 0o640), "only its owner can read"},
		{"short key", withJS, write("k4", "short\n", 0o600), "one line of 32"},
		{"two lines", withJS, write("k5", strings.Repeat("k", 40)+"\n"+strings.Repeat("k", 40)+"\n", 0o600), "one line of 32"},
		{"no key file", withJS, filepath.Join(dir, "missing"), "encryption key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Options(tc.conf, tc.key)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	opts, err := Options(withJS, write("k6", good, 0o600))
	if err != nil || opts.JetStreamKey != strings.Repeat("k", 64) {
		t.Fatalf("valid: %v", err)
	}
}
