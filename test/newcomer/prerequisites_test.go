package newcomer

import (
	"os"
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

// quickStartInstall returns the packages of the apt-get install lines in
// README's Quick start section.
func quickStartInstall(t *testing.T) [][]string {
	t.Helper()
	readme := read(t, "README.md")
	_, section, ok := strings.Cut(readme, "\n## Quick start\n")
	if !ok {
		t.Fatal("README.md has no \"## Quick start\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var lines [][]string
	for _, line := range strings.Split(section, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "apt-get install")
		if !ok {
			continue
		}
		var pkgs []string
		for _, w := range strings.Fields(rest) {
			if w == "#" {
				break
			}
			if !strings.HasPrefix(w, "-") {
				pkgs = append(pkgs, w)
			}
		}
		lines = append(lines, pkgs)
	}
	return lines
}

func TestQuickStartNamesEveryPrerequisite(t *testing.T) {
	want := prerequisites(t)
	lines := quickStartInstall(t)
	if len(lines) != 1 {
		t.Fatalf("README Quick start has %d apt-get install lines, want exactly 1", len(lines))
	}
	if got := lines[0]; !slices.Equal(got, want) {
		t.Errorf("README Quick start installs %q,\nwant packaging/prerequisites.txt's %q (same order)", got, want)
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
	// The test peers .ci/run installs with npm are in Quick start too.
	if strings.Contains(ci, "npm ci --prefix test/peers") {
		_, quick, _ := strings.Cut(read(t, "README.md"), "\n## Quick start\n")
		quick, _, _ = strings.Cut(quick, "\n## ")
		if !strings.Contains(quick, "npm ci --prefix test/peers") {
			t.Errorf(".ci/run runs npm ci --prefix test/peers, README Quick start does not")
		}
	}
	if !strings.Contains(read(t, "packaging/prerequisites.sh"), "prerequisites.txt") {
		t.Errorf("packaging/prerequisites.sh does not read packaging/prerequisites.txt")
	}
}
