package richsession_test

// Moved from pkg/cli (doctorskills_test.go): the skills trees' doctor
// checks are the rich session's (kind.Doctor).

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/richsession"
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
	(*richsession.Kind)(nil).DoctorChecks(cfg, kind.DoctorEnv{Stat: os.Stat}, func(name, status, detail, remedy string) {
		got[name] = status
		n++
		if status != kind.CheckOK && remedy == "" {
			t.Errorf("%s: %s without a remedy", name, status)
		}
	})
	want := map[string]string{"skills " + good: kind.CheckOK, "skills " + private: kind.CheckWarn, "skills " + file: kind.CheckFail,
		"skills " + missing: kind.CheckFail, "skills " + link: kind.CheckFail}
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
	(*richsession.Kind)(nil).DoctorChecks(cfg, kind.DoctorEnv{Stat: os.Stat}, func(string, string, string, string) { n++ })
	if n != 0 {
		t.Errorf("rich disabled: %d checks", n)
	}
}
