package config

import (
	"path/filepath"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// SkillsDir is the operator skills tree profile p's rich container sees
// read-only at /skills: the profile's own skillsDir, else rich.skillsDir
// ("" for none).
func (c *Config) SkillsDir(p Profile) string {
	if p.SkillsDir != "" {
		return p.SkillsDir
	}
	return c.Rich.SkillsDir
}

// validateSkillsDir refuses a skills tree that is not an absolute clean
// path, or that holds or lies within one of the family's own trees
// (configuration and credentials, state, workspaces, runtime, policies, the
// Docker data root) or the kernel's: the whole tree becomes readable by
// guests. Existence, links and the Docker socket are checked when a
// container is created (pkg/container).
func (c *Config) validateSkillsDir(key, dir string, bad func(key, format string, a ...any)) {
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || dir == "/" {
		bad(key, "must be an absolute clean path other than /, got %q", dir)
		return
	}
	private := []string{filepath.Dir(layout.ConfigFile), layout.CredentialsDir, layout.StateDir, layout.RuntimeDir,
		c.RunRoot, c.WorkspaceRoot, c.PolicyDir, filepath.Dir(c.StateFile), c.DockerDataRoot,
		"/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/root"}
	for _, p := range private {
		if p == "" {
			continue
		}
		if within(dir, p) || within(p, dir) {
			bad(key, "%q must not hold or lie within %s (guests read the whole tree)", dir, p)
			return
		}
	}
}
