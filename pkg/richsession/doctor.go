package richsession

import (
	"fmt"
	"path/filepath"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// DoctorChecks checks each skills tree rich channels mount (rich.skillsDir
// and profiles' own) as a session needs it: an existing directory reached
// through no symlink (the container driver refuses one and the session
// fails to start), searchable and readable by every uid (the worker runs
// as the channel's guest uid).
func (*Kind) DoctorChecks(cfg *config.Config, env kind.DoctorEnv, add kind.AddCheck) {
	if !cfg.Rich.Enabled {
		return
	}
	seen := map[string]bool{}
	dirs := []string{cfg.Rich.SkillsDir}
	for _, p := range cfg.Profiles {
		dirs = append(dirs, cfg.SkillsDir(p))
	}
	for _, dir := range dirs {
		if dir == "" || seen[dir] {
			continue
		}
		seen[dir] = true
		name := "skills " + dir
		st, err := env.Stat(dir)
		switch {
		case err != nil:
			add(name, kind.CheckFail, dir+" does not exist or cannot be read: rich sessions naming it fail to start", "create it, or fix rich.skillsDir / profiles[].skillsDir")
			continue
		case !st.IsDir():
			add(name, kind.CheckFail, dir+" is not a directory", "point skillsDir at a directory")
			continue
		}
		if resolved, err := filepath.EvalSymlinks(dir); err == nil && resolved != dir {
			add(name, kind.CheckFail, dir+" goes through a symlink (to "+resolved+"); the driver refuses bind sources with one", "name the resolved path in skillsDir")
			continue
		}
		if st.Mode().Perm()&0o005 != 0o005 {
			add(name, kind.CheckWarn, fmt.Sprintf("%s is mode %v: the worker (a guest uid) cannot list it", dir, st.Mode().Perm()), "chmod o+rx "+dir+" (and o+r on the skill files)")
			continue
		}
		add(name, kind.CheckOK, dir+" is a directory every guest can read, mounted read-only at /skills", "")
	}
}
