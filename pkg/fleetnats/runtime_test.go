package fleetnats

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// TestPrepareRuntime writes the server's private copies (0600, the server
// user's) and a configuration that names them; a bad file is refused
// naming its key, and then nothing is written.
func TestPrepareRuntime(t *testing.T) {
	p := newPKI(t)
	pub, _ := newUser(t, p.dir, "box-a")
	f := testFleet(t, p, config.FleetBox{Name: "box-a", NKey: pub})
	f.Server.EncryptionKeyFile = filepath.Join(p.dir, "jetstream.key")
	if err := os.WriteFile(f.Server.EncryptionKeyFile, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	dir := t.TempDir()
	if err := PrepareRuntime(f, dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{ConfName, CAName, CertName, KeyName, EncryptionKeyName} {
		st, err := os.Lstat(filepath.Join(dir, n))
		if err != nil || st.Mode() != 0o600 {
			t.Errorf("%s: %v %v, want a 0600 file", n, st.Mode(), err)
		}
	}
	conf, _ := os.ReadFile(filepath.Join(dir, ConfName))
	if !strings.Contains(string(conf), `"key_file": "`+filepath.Join(dir, KeyName)+`"`) || strings.Contains(string(conf), testKey) {
		t.Errorf("configuration names the wrong key file or holds the encryption key:\n%s", conf)
	}

	other := newPKI(t) // another CA: its certificate is not this fleet's
	for _, tc := range []struct {
		name   string
		change func(f *config.Fleet)
		want   string
	}{
		{"missing ca", func(f *config.Fleet) { f.TLS.CA = filepath.Join(p.dir, "nope.pem") }, "fleet.tls.ca: "},
		{"key of another cert", func(f *config.Fleet) { f.TLS.Key = other.files.Key }, "fleet.tls.cert and fleet.tls.key: "},
		{"cert of another CA", func(f *config.Fleet) { f.TLS.Cert, f.TLS.Key = other.files.Cert, other.files.Key }, "fleet.tls.cert: "},
		{"key readable by all", func(f *config.Fleet) {
			k := filepath.Join(t.TempDir(), "box.key")
			data, _ := os.ReadFile(p.files.Key)
			_ = os.WriteFile(k, data, 0o644)
			_ = os.Chmod(k, 0o644)
			f.TLS.Key = k
		}, "readable by every user"},
		{"short encryption key", func(f *config.Fleet) {
			k := filepath.Join(t.TempDir(), "js.key")
			_ = os.WriteFile(k, []byte("short\n"), 0o600)
			f.Server.EncryptionKeyFile = k
		}, "fleet.server.encryptionKeyFile: "},
		{"no boxes", func(f *config.Fleet) { f.Server.Boxes = nil }, "fleet.server.boxes: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := f
			tc.change(&g)
			out := t.TempDir()
			err := PrepareRuntime(g, out, uid, gid)
			if !errors.Is(err, ErrServerConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("wrote %d files after a refusal", len(ents))
			}
		})
	}
}
