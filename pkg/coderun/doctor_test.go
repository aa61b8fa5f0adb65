package coderun_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// Moved from pkg/cli (runs_test.go): the projects' doctor checks are the
// code run's (kind.Doctor).

// TestDoctorProjects: each runs.projects path is checked as a run needs it.
func TestDoctorProjects(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	good, private, file := filepath.Join(dir, "good"), filepath.Join(dir, "private"), filepath.Join(dir, "file")
	os.Mkdir(good, 0o755)
	os.Chmod(good, 0o755)
	os.Mkdir(private, 0o700)
	os.WriteFile(file, nil, 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	cfg := &config.Config{Runs: config.Runs{Enabled: true, Projects: []config.Project{
		{Name: "good", Path: good}, {Name: "private", Path: private}, {Name: "file", Path: file},
		{Name: "missing", Path: filepath.Join(dir, "missing")}, {Name: "link", Path: link},
	}}}
	got := map[string]string{}
	(*coderun.Kind)(nil).DoctorChecks(cfg, kind.DoctorEnv{Stat: os.Stat}, func(name, status, detail, remedy string) {
		got[name] = status
		if status != kind.CheckOK && remedy == "" {
			t.Errorf("%s: %s without a remedy", name, status)
		}
	})
	want := map[string]string{"project good": kind.CheckOK, "project private": kind.CheckWarn, "project file": kind.CheckFail,
		"project missing": kind.CheckFail, "project link": kind.CheckFail}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	cfg.Runs.Enabled = false
	n := 0
	(*coderun.Kind)(nil).DoctorChecks(cfg, kind.DoctorEnv{Stat: os.Stat}, func(string, string, string, string) { n++ })
	if n != 0 {
		t.Errorf("runs disabled: %d checks", n)
	}
}
