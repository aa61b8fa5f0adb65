package config

import (
	"strings"
	"testing"
)

// TestRunsValidate: each runs.* bound and project rule refuses with its key.
func TestRunsValidate(t *testing.T) {
	base := func() *Config {
		c := validBase(t)
		c.Runs.Projects = []Project{{Name: "demo", Path: "/srv/demo"}}
		return c
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("valid runs config refused: %v", err)
	}
	cases := []struct {
		name    string
		mutate  func(*Config)
		wantKey string
	}{
		{"no image", func(c *Config) { c.Runs.Image = "" }, "runs.image"},
		{"bad name", func(c *Config) { c.Runs.Projects[0].Name = "../x" }, "runs.projects[0].name"},
		{"twice", func(c *Config) { c.Runs.Projects = append(c.Runs.Projects, Project{Name: "demo", Path: "/srv/b"}) }, "runs.projects[1].name"},
		{"relative", func(c *Config) { c.Runs.Projects[0].Path = "srv/demo" }, "runs.projects[0].path"},
		{"root", func(c *Config) { c.Runs.Projects[0].Path = "/" }, "runs.projects[0].path"},
		{"home", func(c *Config) { c.Runs.Projects[0].Path = "/home/alice/code" }, "runs.projects[0].path"},
		{"tmp", func(c *Config) { c.Runs.Projects[0].Path = "/tmp/x" }, "runs.projects[0].path"},
		{"credentials", func(c *Config) { c.Runs.Projects[0].Path = "/etc/roundtable-sandbox" }, "runs.projects[0].path"},
		{"docker data", func(c *Config) { c.Runs.Projects[0].Path = "/var/lib/docker/volumes" }, "runs.projects[0].path"},
		{"parent of workspaces", func(c *Config) { c.Runs.Projects[0].Path = "/var/lib/roundtable-sandbox" }, "runs.projects[0].path"},
		{"comma", func(c *Config) { c.Runs.Projects[0].Path = "/srv/a,b" }, "runs.projects[0].path"},
		{"memory", func(c *Config) { c.Runs.MemoryMB = 10 }, "runs.memoryMb"},
		{"tmpfs+output", func(c *Config) { c.Runs.TmpfsMB, c.Runs.OutputMB = 1500, 600 }, "runs.tmpfsMb"},
		{"pids", func(c *Config) { c.Runs.Pids = 1 }, "runs.pids"},
		{"output bytes", func(c *Config) { c.Runs.MaxOutputBytes = 10 }, "runs.maxOutputBytes"},
		{"artifacts", func(c *Config) { c.Runs.MaxArtifacts = 0 }, "runs.maxArtifacts"},
		{"total below each", func(c *Config) { c.Runs.MaxArtifactTotalBytes = 1 }, "runs.maxArtifactTotalBytes"},
		{"approval", func(c *Config) { c.Runs.ApprovalTimeoutSeconds = 5 }, "runs.approvalTimeoutSeconds"},
		{"retain", func(c *Config) { c.Runs.MaxRetained = 0 }, "runs.maxRetained"},
	}
	for _, tc := range cases {
		c := base()
		tc.mutate(c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.wantKey) {
			t.Errorf("%s: %v, want a refusal naming %s", tc.name, err, tc.wantKey)
		}
	}
}

// validBase is the minimal config, loaded.
func validBase(t *testing.T) *Config {
	t.Helper()
	c, err := Load(write(t, base))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRunsFromYAML: projects load as written; an unknown key under runs is
// named as written.
func TestRunsFromYAML(t *testing.T) {
	c, err := Load(write(t, base+"runs:\n  memoryMb: 1024\n  tmpfsMb: 128\n  outputMb: 64\n  projects:\n    - name: Demo.1\n      path: /srv/demo\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := c.Runs.ProjectPath("Demo.1"); !ok || p != "/srv/demo" || c.Runs.MemoryMB != 1024 || !c.Runs.Enabled || c.Runs.MaxArtifacts != 16 {
		t.Errorf("runs %+v", c.Runs)
	}
	if _, ok := c.Runs.ProjectPath("demo.1"); ok {
		t.Errorf("project names are case-sensitive")
	}
	_, err = Load(write(t, base+"runs:\n  projekts: []\n"))
	if err == nil || !strings.Contains(err.Error(), "runs.projekts") {
		t.Errorf("unknown key: %v", err)
	}
}
