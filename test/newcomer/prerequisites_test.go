package newcomer

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// prerequisites parses packaging/prerequisites.txt: "<package> <probe>" lines.
func prerequisites(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for i, line := range strings.Split(read(t, "packaging/prerequisites.txt"), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		switch len(f) {
		case 0:
			continue
		case 2:
			pkgs = append(pkgs, f[0])
		default:
			t.Errorf("packaging/prerequisites.txt:%d: %q: want \"<package> <command or /path>\"", i+1, line)
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("packaging/prerequisites.txt lists no package")
	}
	return pkgs
}

// quickStart returns README's Quick start section.
func quickStart(t *testing.T) string {
	t.Helper()
	_, section, ok := strings.Cut(read(t, "README.md"), "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no \"## Quick start\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	return section
}

// TestQuickStartIsTwoCommands: after the clone, the first code block is
// exactly make demo and make test (each installs its own prerequisites), and
// no apt-get install line is there to fail on a NodeSource box.
func TestQuickStartIsTwoCommands(t *testing.T) {
	section := quickStart(t)
	_, block, ok := strings.Cut(section, "```sh\n")
	if !ok {
		t.Fatal("README Quick start has no sh code block")
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, line := range strings.Split(block, "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		if cmd = strings.TrimSpace(cmd); cmd != "" {
			cmds = append(cmds, cmd)
		}
	}
	if want := []string{"make demo", "make test"}; !slices.Equal(cmds, want) {
		t.Errorf("README Quick start commands = %q, want %q", cmds, want)
	}
	if strings.Contains(section, "apt-get install -y") {
		t.Errorf("README Quick start shows an apt-get install line (it fails as written where nodejs comes from NodeSource)")
	}
	// Every package is still named, for those who install by hand.
	words := strings.FieldsFunc(section, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-')
	})
	for _, p := range prerequisites(t) {
		if !slices.Contains(words, p) {
			t.Errorf("README Quick start does not name the prerequisite %q", p)
		}
	}
	mk := read(t, "Makefile")
	for _, target := range []string{"test:", "demo:"} {
		_, rule, _ := strings.Cut(mk, "\n"+target+"\n")
		rule, _, _ = strings.Cut(rule, "\n\n")
		if !strings.Contains(rule, "$(PREREQ)") {
			t.Errorf("make %s does not install its prerequisites first ($(PREREQ))", strings.TrimSuffix(target, ":"))
		}
	}
}

// TestPrerequisitesLineOnBothNodes: make prerequisites prints an apt-get
// line without the packages whose command is present: with NodeSource's
// node (npm inside), neither nodejs nor npm; with Debian's node alone, npm.
// With no node yet, npm is left out when apt's nodejs is NodeSource's (it
// provides and conflicts with npm: "nodejs : Conflicts: npm"), kept when
// it is Debian's.
func TestPrerequisitesLineOnBothNodes(t *testing.T) {
	const (
		nodesourceCandidate = "Package: nodejs\nVersion: 20.20.2-1nodesource1\nProvides: nodejs-dev, nodejs-doc, nodejs-legacy, npm\nConflicts: nodejs-dev, nodejs-doc, nodejs-legacy, npm\n"
		debianCandidate     = "Package: nodejs\nVersion: 18.20.4+dfsg-1~deb12u3\nProvides: node-types-node (= 18.18.14~18.20.4+dfsg-1~deb12u3)\nConflicts: nodejs-legacy\n"
	)
	base := []string{"bash", "sed", "awk", "paste", "id", "dirname", "grep"}
	for _, tt := range []struct {
		name     string
		cmds     []string
		aptCache string // what a fake "apt-cache show --no-all-versions nodejs" prints; "" for no apt-cache
		want     []string
		notWant  []string
	}{
		{"NodeSource", append([]string{"node", "npm"}, base...), "", []string{"docker.io"}, []string{"nodejs", "npm"}},
		{"Debian node without npm", append([]string{"node"}, base...), "", []string{"npm"}, []string{"nodejs"}},
		{"bare", base, "", []string{"nodejs", "npm", "git"}, nil},
		{"NodeSource repository, no node yet", base, nodesourceCandidate, []string{"nodejs", "git"}, []string{"npm"}},
		{"Debian repository, no node yet", base, debianCandidate, []string{"nodejs", "npm"}, nil},
	} {
		bin := t.TempDir()
		if tt.aptCache != "" {
			script := "#!/bin/bash\n[[ $* == 'show --no-all-versions nodejs' ]] || exit 100\nprintf '" + tt.aptCache + "'\n"
			if err := os.WriteFile(filepath.Join(bin, "apt-cache"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range tt.cmds {
			real, err := exec.LookPath(c)
			if err != nil {
				if c == "node" || c == "npm" {
					real = "/bin/true"
				} else {
					t.Skipf("%s not on this machine", c)
				}
			}
			if err := os.Symlink(real, filepath.Join(bin, c)); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("bash", filepath.Join(root(t), "packaging/prerequisites.sh"), "line")
		cmd.Env = []string{"PATH=" + bin}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: prerequisites.sh line: %v\n%s", tt.name, err, out)
		}
		words := strings.Fields(string(out))
		if len(words) < 3 || words[0] != "apt-get" || words[1] != "install" {
			t.Fatalf("%s: line = %q, want an apt-get install line", tt.name, out)
		}
		for _, w := range tt.want {
			if !slices.Contains(words, w) {
				t.Errorf("%s: line %q lacks %s", tt.name, out, w)
			}
		}
		for _, w := range tt.notWant {
			if slices.Contains(words, w) {
				t.Errorf("%s: line %q installs %s (its command is present, or the nodejs apt would install provides it)", tt.name, out, w)
			}
		}
	}
}

func TestCIInstallsFromTheList(t *testing.T) {
	ci := read(t, ".ci/run")
	if !strings.Contains(ci, "packaging/prerequisites.sh install") {
		t.Errorf(".ci/run does not install with packaging/prerequisites.sh install (the list README shows)")
	}
	for _, line := range strings.Split(ci, "\n") {
		if strings.Contains(line, "apt-get install") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf(".ci/run installs packages itself (%q): keep the list in packaging/prerequisites.txt", strings.TrimSpace(line))
		}
	}
	// The test peers .ci/run installs with npm are what make test installs
	// too, and README's Quick start says so.
	if strings.Contains(ci, "npm ci --prefix test/peers") {
		if !strings.Contains(quickStart(t), "npm ci --prefix test/peers") {
			t.Errorf(".ci/run runs npm ci --prefix test/peers, README Quick start does not say make test does")
		}
		if !strings.Contains(read(t, "packaging/prerequisites.sh"), "npm ci --prefix") {
			t.Errorf("packaging/prerequisites.sh ensure does not install the npm test peers")
		}
	}
	if !strings.Contains(read(t, "packaging/prerequisites.sh"), "prerequisites.txt") {
		t.Errorf("packaging/prerequisites.sh does not read packaging/prerequisites.txt")
	}
}
