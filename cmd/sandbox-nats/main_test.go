package main

import (
	"path/filepath"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetnats"
)

// TestDefaultsMatchRuntime: the flags' defaults are where `sandbox-host
// fleet config --runtime-dir /run/sandbox-nats` writes.
func TestDefaultsMatchRuntime(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{defaultConfig, filepath.Join(fleetnats.RuntimeDir, fleetnats.ConfName)},
		{defaultKey, filepath.Join(fleetnats.RuntimeDir, fleetnats.EncryptionKeyName)},
	} {
		if c.got != c.want {
			t.Errorf("default %s, want %s", c.got, c.want)
		}
	}
}
