package container

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// TestRichSkillsMount: a rich container's skills dir is bound read-only at
// /skills; any other container, a link, a missing or overlapping dir is
// refused.
func TestRichSkillsMount(t *testing.T) {
	old := processIDs
	processIDs = func() (int, int) { return 990, 990 }
	t.Cleanup(func() { processIDs = old })
	s := validSpec(t)
	s.Rich = true
	root := filepath.Dir(s.WorkspaceDir)
	skills := filepath.Join(root, "skills")
	os.Mkdir(skills, 0o755)
	s.SkillsDir = skills
	if err := s.Validate(); err != nil {
		t.Fatalf("valid skills dir refused: %v", err)
	}
	_, host := s.configs(LogDriver)
	if len(host.Mounts) != 3 {
		t.Fatalf("mounts %+v, want 3", host.Mounts)
	}
	if m := host.Mounts[2]; m.Type != mount.TypeBind || m.Source != skills || m.Target != richproto.SkillsPath || !m.ReadOnly ||
		m.BindOptions == nil || m.BindOptions.Propagation != mount.PropagationRPrivate {
		t.Errorf("skills mount %+v, want %s read-only at %s", m, skills, richproto.SkillsPath)
	}

	link := filepath.Join(root, "skills-link")
	os.Symlink(skills, link)
	file := filepath.Join(root, "skills-file")
	os.WriteFile(file, nil, 0o600)
	for _, c := range []struct {
		name string
		edit func(s *Spec)
		want string
	}{
		{"not rich", func(s *Spec) { s.Rich = false }, "only a rich channel's container"},
		{"link", func(s *Spec) { s.SkillsDir = link }, "skills dir must exist and contain no symlink"},
		{"missing", func(s *Spec) { s.SkillsDir = filepath.Join(root, "none") }, "skills dir must exist"},
		{"file", func(s *Spec) { s.SkillsDir = file }, "skills dir must be a directory"},
		{"relative", func(s *Spec) { s.SkillsDir = "skills" }, "skills dir must be an absolute clean path"},
		{"root", func(s *Spec) { s.SkillsDir = "/" }, "skills dir must be an absolute clean path other than /"},
		{"holds the workspace", func(s *Spec) { s.SkillsDir = root }, "must be separate"},
		{"inside the workspace", func(s *Spec) { s.SkillsDir = s.WorkspaceDir }, "must be separate"},
		{"the turn dir", func(s *Spec) { s.SkillsDir = s.TurnDir }, "must be separate"},
	} {
		bad := s
		c.edit(&bad)
		if err := bad.Validate(); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
