package cli

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// polkitFixed is the first polkit release whose rule watchdog no longer
// ends a rule that already returned ("prevent wrongful termination of
// runaway thread"). polkitd 122 (Debian 12's) stalls every authorization,
// and so every broker unit start, for 15 s when it does
// (docs/operating.md, *Operations*).
const polkitFixed = 123

// pkactionVersion asks polkit's own client for its version; pkaction
// prints it without asking polkitd, so it answers on a machine whose
// polkitd is stopped too.
func pkactionVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pkaction", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("pkaction --version: %w", err)
	}
	return string(out), nil
}

// parsePolkitVersion reads the major release from pkaction's "pkaction
// version 122" (or "0.105" of the old numbering, major 0).
func parsePolkitVersion(out string) (int, bool) {
	f := strings.Fields(out)
	if len(f) == 0 {
		return 0, false
	}
	v := f[len(f)-1]
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// doctorPolkitVersion warns of a polkitd with the 15 s watchdog stall: a
// machine that runs turns in bursts waits it out now and then.
func doctorPolkitVersion(ctx context.Context, d doctorDeps, add func(name, status, detail, remedy string)) {
	if d.polkitVersion == nil {
		return
	}
	out, err := d.polkitVersion(ctx)
	if err != nil {
		add("polkit-version", StatusWarn, "could not read polkit's version: "+err.Error(), "install polkitd (it ships pkaction)")
		return
	}
	n, ok := parsePolkitVersion(out)
	switch {
	case !ok:
		add("polkit-version", StatusWarn, fmt.Sprintf("could not read polkit's version from %q", strings.TrimSpace(out)), "")
	case n < polkitFixed:
		add("polkit-version", StatusWarn,
			fmt.Sprintf("polkit %d can hold every broker unit start for 15 s under a burst (journalctl -u polkit: \"Terminating runaway script\"); nothing is lost, the turns wait", n),
			fmt.Sprintf("polkit %d or later fixes it (Debian 13 ships 126); see docs/operating.md, Operations", polkitFixed))
	default:
		add("polkit-version", StatusOK, fmt.Sprintf("polkit %d", n), "")
	}
}
