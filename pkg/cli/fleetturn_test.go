package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTurnFleetFlagRefusals: --fleet refuses rich options before dialing,
// and a configuration without fleet mode, naming the key.
func TestTurnFleetFlagRefusals(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sandbox.yaml")
	if err := os.WriteFile(cfg, []byte(testYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"attachments", []string{"turn", "--fleet", "--attach", "https://example.org/a.png", "--speaker-id", "s", "--text", "x", "c"}, "--fleet runs sealed turns only"},
		{"files dir", []string{"turn", "--fleet", "--files-dir", t.TempDir(), "--speaker-id", "s", "--text", "x", "c"}, "--fleet runs sealed turns only"},
		{"fleet off", []string{"--config", cfg, "turn", "--fleet", "--speaker-id", "s", "--text", "x", "c"}, "fleet.enabled is false"},
	}
	for _, tt := range tests {
		code, _, errOut := runCLI(tt.args...)
		if code == 0 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want a failure saying %q", tt.name, code, errOut, tt.want)
		}
	}
}
