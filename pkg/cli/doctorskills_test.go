package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

func TestDoctorSkills(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	good, private, file := filepath.Join(dir, "good"), filepath.Join(dir, "private"), filepath.Join(dir, "file")
	os.Mkdir(good, 0o755)
	os.Chmod(good, 0o755)
	os.Mkdir(private, 0o700)
	os.WriteFile(file, nil, 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	missing := filepath.Join(dir, "missing")
	cfg := &config.Config{Rich: config.Rich{Enabled: true, SkillsDir: good}, Profiles: []config.Profile{
		{Name: "a"}, {Name: "b", SkillsDir: private}, {Name: "c", SkillsDir: file}, {Name: "d", SkillsDir: missing}, {Name: "e", SkillsDir: link},
	}}
	got := map[string]string{}
	n := 0
	doctorSkills(cfg, doctorDeps{stat: os.Stat}, func(name, status, detail, remedy string) {
		got[name] = status
		n++
		if status != StatusOK && remedy == "" {
			t.Errorf("%s: %s without a remedy", name, status)
		}
	})
	want := map[string]string{"skills " + good: StatusOK, "skills " + private: StatusWarn, "skills " + file: StatusFail,
		"skills " + missing: StatusFail, "skills " + link: StatusFail}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if n != len(want) {
		t.Errorf("%d checks, want %d (each tree once)", n, len(want))
	}
	cfg.Rich.Enabled = false
	n = 0
	doctorSkills(cfg, doctorDeps{stat: os.Stat}, func(string, string, string, string) { n++ })
	if n != 0 {
		t.Errorf("rich disabled: %d checks", n)
	}
}
