// Package toolbox builds the code-execution image (DESIGN.md section 12) on
// the operator's machine: a Debian root filesystem made by mmdebstrap from
// the machine's own apt sources (BuildBase, the slow part), imported into
// Docker through the Engine API with the static sandbox-worker appended to
// the tar stream (Import, the fast part).
// Guarantee: the image holds exactly the base tar's entries plus the worker
// at layout.ToolboxWorker (0755, root:root); a base that already holds that
// path, or a non-directory at one of its parents, is refused before Docker
// sees a byte; the rootfs is never unpacked to disk by this package;
// mmdebstrap runs in its own mount and PID namespaces (--mode=unshare), so a
// build killed at its deadline leaves no mount behind; every temporary file
// lives in a private (0700) directory that is removed on every path.
package toolbox

import (
	"fmt"
	"regexp"
	"strings"
)

// HostWorker is where the package installs the static sandbox-worker on the
// host (the same path as layout.ToolboxWorker inside the image).
const HostWorker = "/usr/lib/roundtable-sandbox/sandbox-worker"

// PackagesFile is where the base records, one "name=version" a line, the
// requested packages as dpkg installed them (written by an mmdebstrap
// customize hook; Import copies it into LabelPackages).
const PackagesFile = "/usr/lib/roundtable-sandbox/toolbox-packages"

// Image labels.
const (
	// LabelWorkerSHA256 is the hex sha256 of the sandbox-worker binary in
	// the image: doctor compares it with HostWorker's to tell a toolbox
	// built before an upgrade (stale) from a current one.
	LabelWorkerSHA256 = "io.roundtable-sandbox.toolbox.worker-sha256"
	// LabelPackages lists the requested packages with their versions,
	// comma-separated ("bash=5.2.15-2+b7,...").
	LabelPackages = "io.roundtable-sandbox.toolbox.packages"
	// LabelVersion is the version of the sandbox-host that imported it.
	LabelVersion = "io.roundtable-sandbox.toolbox.version"
)

// Image config (the Dockerfile-style changes Import applies).
const (
	WorkDir = "/workspace"
	PathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	LangEnv = "C.UTF-8"
)

// Packages is the seed's toolbox (its image/Dockerfile's list): what a
// coding agent expects to find.
var Packages = []string{
	"bash", "coreutils", "git", "curl", "ca-certificates", "python3", "python3-pip",
	"nodejs", "npm", "build-essential", "jq", "ripgrep",
}

// SmallPackages is the test toolbox: what the runs' tests need (a shell,
// id, python3 for file and timing tricks; git, curl, pip, Python requests
// and npm as the real clients of credentialed egress, docs/credentialed-egress.md),
// built the same way in a few minutes.
var SmallPackages = []string{"bash", "coreutils", "python3", "git", "curl", "ca-certificates",
	"python3-pip", "python3-requests", "nodejs", "npm"}

// Debian package names (Policy 5.6.7).
var packageRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,99}$`)

// ValidPackages refuses anything that is not a list of distinct Debian
// package names: they reach mmdebstrap's command line and a shell hook.
func ValidPackages(pkgs []string) error {
	if len(pkgs) == 0 {
		return fmt.Errorf("toolbox: no packages")
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		if !packageRe.MatchString(p) {
			return fmt.Errorf("toolbox: %q is not a Debian package name", p)
		}
		if seen[p] {
			return fmt.Errorf("toolbox: package %s listed twice", p)
		}
		seen[p] = true
	}
	return nil
}

// One line of PackagesFile: name=version (Debian version characters).
var packageLineRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,99}=[A-Za-z0-9.+~:-]{1,100}$`)

// maxPackagesFile bounds PackagesFile as Import reads it from the base.
const maxPackagesFile = 16 << 10

// packagesLabel turns PackagesFile's content into LabelPackages' value, or
// an error when a line is not name=version (the value goes into a LABEL
// change, so nothing else may pass).
func packagesLabel(content string) (string, error) {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(content), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !packageLineRe.MatchString(line) {
			return "", fmt.Errorf("toolbox: %s: line %q is not name=version", PackagesFile, line)
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		return "", fmt.Errorf("toolbox: %s is empty", PackagesFile)
	}
	return strings.Join(out, ","), nil
}
