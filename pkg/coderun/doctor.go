package coderun

import (
	"fmt"
	"path/filepath"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// DoctorChecks checks each runs.projects path as a run needs it: an
// existing directory reached through no symlink (the container driver
// refuses one), readable and searchable by every uid (a run's user is a
// guest uid of its own).
func (*Kind) DoctorChecks(cfg *config.Config, env kind.DoctorEnv, add kind.AddCheck) {
	if !cfg.Runs.Enabled {
		return
	}
	for _, p := range cfg.Runs.Projects {
		name := "project " + p.Name
		st, err := env.Stat(p.Path)
		switch {
		case err != nil:
			add(name, kind.CheckFail, p.Path+" does not exist or cannot be read: runs naming it fail", "create it, or fix runs.projects")
			continue
		case !st.IsDir():
			add(name, kind.CheckFail, p.Path+" is not a directory", "point runs.projects at a directory")
			continue
		}
		if resolved, err := filepath.EvalSymlinks(p.Path); err == nil && resolved != p.Path {
			add(name, kind.CheckFail, p.Path+" goes through a symlink (to "+resolved+"); the driver refuses bind sources with one", "name the resolved path in runs.projects")
			continue
		}
		if st.Mode().Perm()&0o005 != 0o005 {
			add(name, kind.CheckWarn, fmt.Sprintf("%s is mode %v: a run's user (a guest uid) cannot list it", p.Path, st.Mode().Perm()), "chmod o+rx "+p.Path+" (and o+r on the files runs should read)")
			continue
		}
		add(name, kind.CheckOK, p.Path+" is a directory every run's user can read, mounted read-only at /workspace", "")
	}
}
