package config

import (
	"strings"
	"testing"
)

// TestSkillsDir: rich.skillsDir for every profile unless the profile names
// its own; a tree that is not absolute and clean, or that holds or lies
// within the family's own trees or the kernel's, is refused naming the key.
func TestSkillsDir(t *testing.T) {
	c, err := Load(write(t, richTools+"rich:\n  skillsDir: /srv/skills\nprofiles:\n  - name: a\n    model: m\n  - name: b\n    model: m\n    skillsDir: /srv/b-skills\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Profile("a")
	b, _ := c.Profile("b")
	if got := c.SkillsDir(a); got != "/srv/skills" {
		t.Errorf("profile a: %q", got)
	}
	if got := c.SkillsDir(b); got != "/srv/b-skills" {
		t.Errorf("profile b: %q", got)
	}
	if c2 := validBase(t); c2.Rich.SkillsDir != "" || c2.SkillsDir(Profile{}) != "" {
		t.Errorf("default skills dir %q", c2.Rich.SkillsDir)
	}
	for dir, want := range map[string]string{
		"skills":                                "must be an absolute clean path",
		"/srv/skills/":                          "must be an absolute clean path",
		"/srv/../etc":                           "must be an absolute clean path",
		"/":                                     "must be an absolute clean path other than /",
		"/etc/roundtable-sandbox":               "must not hold or lie within /etc/roundtable-sandbox",
		"/etc/roundtable-sandbox/credentials/x": "must not hold or lie within /etc/roundtable-sandbox",
		"/etc":                                  "must not hold or lie within /etc/roundtable-sandbox",
		"/var/lib/roundtable-sandbox":           "must not hold or lie within",
		"/var/lib/roundtable-sandbox/workspaces/a": "must not hold or lie within",
		"/run/roundtable-sandbox/policies":         "must not hold or lie within",
		"/proc/self":                               "must not hold or lie within /proc",
		"/root/skills":                             "must not hold or lie within /root",
	} {
		for _, key := range []string{"rich.skillsDir", "profiles[0].skillsDir"} {
			body := richTools + "rich:\n  skillsDir: " + dir + "\nprofiles:\n  - name: a\n    model: m\n"
			if key != "rich.skillsDir" {
				body = richTools + "profiles:\n  - name: a\n    model: m\n    skillsDir: " + dir + "\n"
			}
			_, err := Load(write(t, body))
			if err == nil || !strings.Contains(err.Error(), key+": ") || !strings.Contains(err.Error(), want) {
				t.Errorf("%s %q: %v, want %q", key, dir, err, want)
			}
		}
	}
}
