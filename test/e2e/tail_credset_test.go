package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// credsetProbe runs after the copier in sandbox-credset@<turn>.service, with
// the unit's own identity and sandbox (an ExecStartPost= of the real unit,
// added by a drop-in): which mount namespace it is in, whether it can write
// /etc, and whether it reads a credential file with and one without group
// _sandbox-credset's read. "$$" is systemd's escape for "$".
const credsetProbe = `[Service]
ExecStartPost=/bin/sh -c 'echo "credset-probe mnt=$$(readlink /proc/self/ns/mnt) uid=$$(id -un)"; \
  if touch /etc/e2e-credset-probe 2>/dev/null; then echo "credset-probe etc=written"; else echo "credset-probe etc=refused"; fi; \
  if cat ` + layout.CredentialsDir + `/e2e-no-group-read >/dev/null 2>&1; then echo "credset-probe nogroup=read"; else echo "credset-probe nogroup=refused"; fi; \
  if cat ` + layout.CredentialsDir + `/model >/dev/null 2>&1; then echo "credset-probe model=read"; else echo "credset-probe model=refused"; fi'
`

// TestCredsetCopierHasNoMountNamespace: the credential copier costs no mount
// namespace (issue 35) and is still confined by who it is
// (docs/threat-model.md, "The credential copier"): it runs as
// _sandbox-credset in PID 1's own mount namespace, cannot write /etc, reads
// a credential file that has group _sandbox-credset's read and not one
// without it; and a turn with the credential store as the package leaves it
// still gets its credential (the turn's reply needs the model's).
func TestCredsetCopierHasNoMountNamespace(t *testing.T) {
	diagnose(t)
	const ch = "e2e-credset"
	channelOn(t, ch)
	// A credential file as an installation before issue 35 left it (root
	// 0600), not named by any policy: only the probe tries it.
	nogroup := filepath.Join(credentialsDir, "e2e-no-group-read")
	if err := os.WriteFile(nogroup, []byte("sk-nogroup-"+randHex(8)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(nogroup) })
	dir := "/etc/systemd/system/sandbox-credset@.service.d"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dropin := filepath.Join(dir, "e2e-probe.conf")
	if err := os.WriteFile(dropin, []byte(credsetProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(dropin)
		os.Remove(dir)
		os.Remove("/etc/e2e-credset-probe")
		if out, err := run("systemctl", "daemon-reload"); err != nil {
			t.Errorf("daemon-reload after removing the probe: %v %s", err, out)
		}
	})
	systemctl(t, "daemon-reload")
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")

	if r := turn(ch, "alice", "credset probe "+randHex(4)); r.Status != 200 {
		t.Fatalf("turn with the probing copier: %s", r)
	}
	pid1, err := os.Readlink("/proc/1/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	if msg := eventually(10*time.Second, func() string {
		lines = nil
		for _, l := range strings.Split(journal("-u", "sandbox-credset@*", "--since", since, "-o", "cat"), "\n") {
			if strings.HasPrefix(l, "credset-probe ") {
				lines = append(lines, l)
			}
		}
		if len(lines) < 4 {
			return "the copier's probe logged " + strings.Join(lines, "; ")
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	want := map[string]bool{
		"credset-probe mnt=" + pid1 + " uid=" + layout.CredsetUser: false,
		"credset-probe etc=refused":                                false,
		"credset-probe nogroup=refused":                            false,
		"credset-probe model=read":                                 false,
	}
	for _, l := range lines {
		if _, ok := want[l]; !ok {
			t.Errorf("copier probe: %q (PID 1's mount namespace is %s)", l, pid1)
			continue
		}
		want[l] = true
	}
	for l, seen := range want {
		if !seen {
			t.Errorf("copier probe never logged %q", l)
		}
	}
	if _, err := os.Stat("/etc/e2e-credset-probe"); err == nil {
		t.Errorf("the copier wrote /etc/e2e-credset-probe")
	}
}
