package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

const testConfig = `
model: {url: "https://model.example/v1/chat/completions", name: m}
credentials: {default: model}
installation: site-a
runRoot: /run/site-a/turns
policyDir: /run/site-a/policies
dockerHost: unix:///run/site-a/docker.sock
reaper: {graceSeconds: 30}
`

func parse(t *testing.T, args ...string) (options, error) {
	t.Helper()
	cmd := newRoot(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	// The command's options live in its closure: read them back from the flags.
	var got options
	f := cmd.Flags()
	got.configPath, _ = f.GetString("config")
	got.installation, _ = f.GetString("installation")
	got.runRoot, _ = f.GetString("run-root")
	got.policyDir, _ = f.GetString("policy-dir")
	got.grace, _ = f.GetDuration("grace")
	got.dockerHost, _ = f.GetString("docker-host")
	err := got.merge(cmd)
	return got, err
}

func TestOptions(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sandbox.yaml")
	if err := os.WriteFile(cfg, []byte(testConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		want    options
		wantErr bool
	}{
		{"no config installed: flag defaults", []string{"--config", filepath.Join(t.TempDir(), "absent.yaml")}, options{}, true},
		{"config values", []string{"--config", cfg},
			options{installation: "site-a", runRoot: "/run/site-a/turns", policyDir: "/run/site-a/policies", grace: 30 * time.Second, dockerHost: "unix:///run/site-a/docker.sock"}, false},
		{"flags win over the config", []string{"--config", cfg, "--installation", "site-b", "--grace", "5s"},
			options{installation: "site-b", runRoot: "/run/site-a/turns", policyDir: "/run/site-a/policies", grace: 5 * time.Second, dockerHost: "unix:///run/site-a/docker.sock"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(t, tt.args...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("merge = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got.configPath = ""
			if got != tt.want {
				t.Errorf("options = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDefaultsWithoutConfig(t *testing.T) {
	if _, err := os.Stat(layout.ConfigFile); err == nil {
		t.Skip("a config is installed on this machine")
	}
	got, err := parse(t)
	if err != nil {
		t.Fatalf("merge without an installed config = %v, want flag defaults", err)
	}
	want := options{configPath: layout.ConfigFile, installation: "default", runRoot: layout.RunRoot, policyDir: layout.PolicyDir, grace: 60 * time.Second}
	if got != want {
		t.Errorf("options = %+v, want %+v", got, want)
	}
}

func TestBadConfigRefused(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "sandbox.yaml")
	if err := os.WriteFile(cfg, []byte("installation: site-a\nunknownKey: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := parse(t, "--config", cfg); err == nil {
		t.Error("a bad config was accepted")
	}
}
