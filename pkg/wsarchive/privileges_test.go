package wsarchive

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The uids of the privilege test: the host's service user and a guest.
const (
	hostUID  = 4242
	guestUID = 61234
)

// TestAsAFleetHost runs Pack and Unpack as the host runs them: a non-root
// uid with only the fleet unit's capabilities, on a workspace that is the
// guest's (0700, a file and a directory of mode 0), over a copy that is
// the guest's too. With CAP_DAC_READ_SEARCH and CAP_CHOWN both work; with
// CAP_CHOWN alone Pack is refused (the drop-in's capability is needed)
// while Unpack still takes the guest's tree back. Needs root (setpriv).
func TestAsAFleetHost(t *testing.T) {
	if os.Getenv("WSARCHIVE_AS_HOST") != "" {
		t.Skip("the helper's own run")
	}
	setpriv, err := exec.LookPath("setpriv")
	if os.Getuid() != 0 || err != nil {
		t.Skip("needs root and setpriv (util-linux) to run as a non-root uid with capabilities")
	}
	root := t.TempDir()
	must(t, os.Chmod(filepath.Dir(root), 0o755))
	must(t, os.Chmod(root, 0o755))
	bin := filepath.Join(root, "wsarchive.test")
	copyFile(t, bin)
	src, dst := filepath.Join(root, "src"), filepath.Join(root, "dst")
	write(t, filepath.Join(src, "history.json"), "the history", 0o600)
	write(t, filepath.Join(src, "locked", "memory.json"), "the memory", 0)
	write(t, filepath.Join(dst, "old", "stale"), "stale", 0)
	for _, d := range []string{src, dst} {
		must(t, filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, guestUID, guestUID)
		}))
		must(t, os.Chmod(filepath.Join(d, filepath.Base(firstDir(t, d))), 0))
		must(t, os.Chmod(d, 0o700))
	}
	run := func(caps string) (string, error) {
		cmd := exec.Command(setpriv, "--reuid", "4242", "--regid", "4242", "--clear-groups",
			"--inh-caps", "-all,"+caps, "--ambient-caps", "-all,"+caps, "--bounding-set", "-all,"+caps,
			bin, "-test.run", "^TestHelperAsHost$", "-test.v")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "WSARCHIVE_AS_HOST=1", "WSARCHIVE_SRC="+src, "WSARCHIVE_DST="+dst)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("+chown"); err == nil || !strings.Contains(out, "pack:") || !strings.Contains(out, "permission denied") {
		t.Fatalf("as the host with CAP_CHOWN only: %v\n%s\nwant Pack refused", err, out)
	}
	if out, err := run("+chown,+dac_read_search"); err != nil {
		t.Fatalf("as the host with the fleet unit's capabilities: %v\n%s", err, out)
	}
	if got := tree(t, dst); strings.Join(got, "|") != "history.json -rw------- the history|locked drwx------|locked/memory.json -rw------- the memory" {
		t.Errorf("restored tree = %q", got)
	}
	var st os.FileInfo
	if st, err = os.Stat(filepath.Join(dst, "locked", "memory.json")); err != nil || fileUID(st) != hostUID {
		t.Errorf("restored file owner = %v, %v; want the host's uid (the caller hands it to the guest)", fileUID(st), err)
	}
}

// TestHelperAsHost is TestAsAFleetHost's child: it packs WSARCHIVE_SRC and
// unpacks the archive over WSARCHIVE_DST, as whatever uid it runs as.
func TestHelperAsHost(t *testing.T) {
	if os.Getenv("WSARCHIVE_AS_HOST") == "" {
		t.Skip("run by TestAsAFleetHost")
	}
	data, _, err := Pack(os.Getenv("WSARCHIVE_SRC"), DefaultLimits)
	if err != nil {
		t.Fatalf("pack: %v", err)
	}
	if err := Unpack(os.Getenv("WSARCHIVE_DST"), data, DefaultLimits); err != nil {
		t.Fatalf("unpack: %v", err)
	}
}

func copyFile(t *testing.T, to string) {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	in, err := os.Open(self)
	must(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
}

// firstDir is d's one subdirectory.
func firstDir(t *testing.T, d string) string {
	t.Helper()
	entries, err := os.ReadDir(d)
	must(t, err)
	for _, e := range entries {
		if e.IsDir() {
			return filepath.Join(d, e.Name())
		}
	}
	t.Fatalf("%s has no directory", d)
	return ""
}

func fileUID(fi os.FileInfo) int {
	if fi == nil {
		return -1
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}
