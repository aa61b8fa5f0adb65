package rich

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

func skillsTree(t *testing.T) (string, string) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "skills")
	secret := filepath.Join(root, "secret.txt")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	mk := func(rel, text string) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("drawing/SKILL.md", "---\nname: drawing\ndescription: Draw charts\x07 as SVG files.\n---\nUse write_reply_file.\n")
	mk("drawing/ref/colors.md", "red, blue")
	mk("plain/SKILL.md", "no front matter")
	mk("big/SKILL.md", strings.Repeat("b", MaxSkillFileBytes+1))
	mk("edge/SKILL.md", strings.Repeat("é", MaxSkillFileBytes/2)) // 256 KiB exactly, 131,072 characters
	mk("binary/SKILL.md", "\xff\xfe")
	os.Symlink(secret, filepath.Join(dir, "drawing", "leak.md"))
	os.Symlink(root, filepath.Join(dir, "up"))
	os.MkdirAll(filepath.Join(dir, "linked"), 0o755)
	os.Symlink(secret, filepath.Join(dir, "linked", "SKILL.md"))
	syscall.Mkfifo(filepath.Join(dir, "drawing", "fifo"), 0o644)
	return dir, secret
}

func TestReadSkillConfinedAndBounded(t *testing.T) {
	dir, _ := skillsTree(t)
	s, err := openSkills(dir)
	if err != nil || s == nil {
		t.Fatal(err)
	}
	defer s.close()
	read := func(path string) (string, error) {
		in, _ := json.Marshal(map[string]string{"path": path})
		return s.tool(t.Context(), in)
	}
	if got, err := read("drawing/ref/colors.md"); err != nil || got != "red, blue" {
		t.Errorf("colors = %q, %v", got, err)
	}
	got, err := read("edge/SKILL.md")
	if err != nil || utf8.RuneCountInString(got) != MaxSkillChars || !strings.HasSuffix(got, TruncationMarker) {
		t.Errorf("256 KiB file: %d characters, %v; want %d with the marker", utf8.RuneCountInString(got), err, MaxSkillChars)
	}
	for path, want := range map[string]string{
		"big/SKILL.md":                "over 262144 bytes",
		"binary/SKILL.md":             "not UTF-8",
		"drawing/leak.md":             "no such skill file", // a link as the file
		"up/secret.txt":               "no such skill file", // a link as a directory
		"linked/SKILL.md":             "no such skill file",
		"drawing/fifo":                "no such skill file",
		"drawing":                     "no such skill file", // a directory
		"drawing/missing.md":          "no such skill file",
		"../secret.txt":               "must be relative",
		"drawing/../../x":             "must be relative",
		"/etc/passwd":                 "must be relative",
		".hidden":                     "must be relative",
		"drawing//SKILL.md":           "must be relative",
		"":                            "must be relative",
		strings.Repeat("a/", 9) + "b": "over 8 parts",
		strings.Repeat("a", 513):      "over 512 bytes",
	} {
		got, err := read(path)
		if !errors.Is(err, errToolRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("read_skill(%q) = %q, %v; want a refusal naming %q", path, got, err, want)
		}
		if strings.Contains(got, "host secret") {
			t.Errorf("read_skill(%q) leaked the file behind a link", path)
		}
	}
	if _, err := s.tool(t.Context(), json.RawMessage(`{"path":"a","follow":true}`)); !errors.Is(err, errToolRefused) {
		t.Errorf("unknown argument: %v", err)
	}
}

func TestSkillIndexInToolDescription(t *testing.T) {
	dir, _ := skillsTree(t)
	s, err := openSkills(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	desc := s.spec().Description
	for _, want := range []string{"\n- drawing: Draw charts  as SVG files.", "\n- plain: (no description)", "\n- edge: (no description)"} {
		if !strings.Contains(desc, want) {
			t.Errorf("description lacks %q:\n%s", want, desc)
		}
	}
	for _, never := range []string{"- big:", "- binary:", "- linked:", "- up:"} {
		if strings.Contains(desc, never) {
			t.Errorf("description lists %q:\n%s", never, desc)
		}
	}
}

func TestSkillsToolOfferedOnlyWithATree(t *testing.T) {
	dir, _ := skillsTree(t)
	for _, c := range []struct {
		dir  string
		want bool
	}{{dir, true}, {filepath.Join(t.TempDir(), "none"), false}, {"", false}} {
		b := NewBroker(filepath.Join(t.TempDir(), "b.sock"), nil)
		w, err := New(Options{Pull: b, Model: b, Tools: b, Sessions: &fakeStore{}, Workspace: t.TempDir(), SkillsDir: c.dir})
		if err != nil {
			t.Fatal(err)
		}
		tr := &turnRun{w: w, turn: newTurn("x")}
		if err := tr.buildTools(); err != nil {
			t.Fatal(err)
		}
		_, got := tr.funcs[SkillTool]
		if got != c.want {
			t.Errorf("skills dir %q: read_skill offered %v, want %v", c.dir, got, c.want)
		}
		if _, ok := tr.funcs[ReplyFileTool]; !ok {
			t.Errorf("write_reply_file not offered")
		}
		w.skills.close()
	}
	// A skills path that is a link is refused, not followed.
	link := filepath.Join(t.TempDir(), "skills")
	os.Symlink(dir, link)
	b := NewBroker(filepath.Join(t.TempDir(), "b.sock"), nil)
	if _, err := New(Options{Pull: b, Model: b, Tools: b, Sessions: &fakeStore{}, Workspace: t.TempDir(), SkillsDir: link}); err == nil {
		t.Errorf("a linked skills dir was accepted")
	}
}
