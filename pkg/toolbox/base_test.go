package toolbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidPackages(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkgs []string
		ok   bool
	}{
		{"full", Packages, true},
		{"small", SmallPackages, true},
		{"none", nil, false},
		{"option", []string{"--foo"}, false},
		{"shell", []string{"bash;reboot"}, false},
		{"space", []string{"bash coreutils"}, false},
		{"upper", []string{"Bash"}, false},
		{"twice", []string{"bash", "bash"}, false},
		{"plus and dot", []string{"g++", "libc6.1"}, true},
	} {
		if err := ValidPackages(tc.pkgs); (err == nil) != tc.ok {
			t.Errorf("%s: ValidPackages(%q) = %v, want ok=%v", tc.name, tc.pkgs, err, tc.ok)
		}
	}
	// The seed's list, exactly.
	want := []string{"bash", "coreutils", "git", "curl", "ca-certificates", "python3", "python3-pip", "nodejs", "npm", "build-essential", "jq", "ripgrep"}
	if !slices.Equal(Packages, want) {
		t.Errorf("Packages %q, want the seed's %q", Packages, want)
	}
}

func TestPackagesLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"bash=5.2.15-2+b7\ncoreutils=9.1-1\n", "bash=5.2.15-2+b7,coreutils=9.1-1"},
		{"git=1:2.39.5-0+deb12u3\n\n", "git=1:2.39.5-0+deb12u3"},
		{"bash=5\" LABEL x=y\n", ""},
		{"bash\n", ""},
		{"", ""},
	} {
		got, err := packagesLabel(tc.in)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("packagesLabel(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestChanges(t *testing.T) {
	got, err := Changes("abc123", "bash=5.2,python3=3.11")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"WORKDIR /workspace",
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"ENV LANG=C.UTF-8",
		`CMD ["/usr/lib/roundtable-sandbox/sandbox-worker","run-supervise"]`,
		`LABEL io.roundtable-sandbox.toolbox.worker-sha256="abc123"`,
		`LABEL io.roundtable-sandbox.toolbox.packages="bash=5.2,python3=3.11"`,
	}
	if !slices.Equal(got[:len(want)], want) {
		t.Errorf("changes\n%q\nwant (then the version label)\n%q", got, want)
	}
	if _, err := Changes(`x" LABEL evil="1`, ""); err == nil {
		t.Error("a label value with a quote was accepted")
	}
}

func TestPlanArgs(t *testing.T) {
	mirrors := []string{"deb http://mirror.lan/debian bookworm main", "http://mirror.lan/debian"}
	p, err := NewPlan(BaseOptions{Packages: SmallPackages, Suite: "bookworm", Mirrors: mirrors})
	if err != nil {
		t.Fatal(err)
	}
	args := p.Args("/var/tmp/x/base.tar")
	for _, want := range []string{"--mode=unshare", "--variant=apt", "--format=tar", "--include=bash,coreutils,python3,git,curl,ca-certificates,python3-pip,python3-requests,nodejs,npm"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	// suite, output, then every mirror: mmdebstrap never falls back to deb.debian.org.
	tail := args[len(args)-4:]
	if !slices.Equal(tail, append([]string{"bookworm", "/var/tmp/x/base.tar"}, mirrors...)) {
		t.Errorf("positional args %q", tail)
	}
	if !strings.Contains(p.String(), `chroot "$1" dpkg-query -W`) || !strings.Contains(p.String(), "OUTPUT.tar") {
		t.Errorf("dry-run text %q", p.String())
	}
	for _, bad := range []string{"--hook-dir=/x", "/etc/passwd", "deb http://x bookworm main\ndeb http://y", "http://x y", "ftp://x"} {
		if _, err := NewPlan(BaseOptions{Packages: SmallPackages, Suite: "bookworm", Mirrors: []string{bad}}); err == nil {
			t.Errorf("mirror %q accepted", bad)
		}
	}
	for _, bad := range []BaseOptions{
		{Packages: SmallPackages, Suite: "--x", Mirrors: mirrors},
		{Packages: SmallPackages, Suite: "bookworm", Variant: "extract; rm", Mirrors: mirrors},
		{Packages: []string{"-x"}, Suite: "bookworm", Mirrors: mirrors},
	} {
		if _, err := NewPlan(bad); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}

// fakeMMDebstrap writes a script standing in for mmdebstrap: it finds its
// output argument (…/base.tar) and runs body with $out set.
func fakeMMDebstrap(t *testing.T, body string) string {
	t.Helper()
	script := "#!/bin/sh\nfor a; do case $a in */base.tar) out=$a;; esac; done\n" + body + "\n"
	return writeFile(t, "mmdebstrap", []byte(script), 0o755)
}

func smallPlan(t *testing.T, program string) Plan {
	t.Helper()
	p, err := NewPlan(BaseOptions{Packages: SmallPackages, Suite: "bookworm", Mirrors: []string{"http://mirror.lan/debian"}, Program: program})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuildWithAStandInMMDebstrap(t *testing.T) {
	work := t.TempDir()
	p := smallPlan(t, fakeMMDebstrap(t, `echo "I: tmpdir=$TMPDIR" >&2; printf 'tar' > "$out"`))
	var progress strings.Builder
	b, err := p.Build(context.Background(), work, &progress)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Dir(b.Path))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("private dir mode %v, %v; want 0700", st.Mode().Perm(), err)
	}
	if !strings.Contains(progress.String(), "tmpdir="+filepath.Dir(b.Path)) {
		t.Errorf("mmdebstrap's TMPDIR is not the private directory: %q", progress.String())
	}
	kept := filepath.Join(t.TempDir(), "kept.tar")
	if err := b.Keep(kept); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(kept); string(data) != "tar" {
		t.Errorf("kept base holds %q", data)
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Errorf("work dir not empty after Remove: %v", ents)
	}
}

func TestBuildFailuresLeaveNothing(t *testing.T) {
	defer func(g time.Duration) { stopGrace = g }(stopGrace)
	stopGrace = time.Second
	for _, tc := range []struct {
		name, body, want string
		timeout          time.Duration
	}{
		{"exit status", `echo "E: cannot reach the mirror" >&2; exit 1`, "E: cannot reach the mirror", time.Minute},
		{"no tar", `exit 0`, "wrote no tar", time.Minute},
		{"deadline", `printf partial > "$out"; sleep 30 & wait`, "did not finish in time", 300 * time.Millisecond},
		{"deadline, TERM ignored", `trap '' TERM; sleep 30 & wait; sleep 30`, "did not finish in time", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			p := smallPlan(t, fakeMMDebstrap(t, tc.body))
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			b, err := p.Build(ctx, work, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error containing %q", b, err, tc.want)
			}
			if took := time.Since(start); took > stopGrace+5*time.Second {
				t.Errorf("took %v", took)
			}
			if ents, _ := os.ReadDir(work); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
	if _, err := smallPlan(t, "/nonexistent/mmdebstrap").Build(context.Background(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "apt-get install mmdebstrap") {
		t.Errorf("missing program: got %v", err)
	}
}

func TestRemoveRefusesAMountBelow(t *testing.T) {
	mi := writeFile(t, "mountinfo", []byte(
		"22 1 8:1 / / rw - ext4 /dev/vda rw\n"+
			"90 22 0:5 / /var/tmp/roundtable-toolbox.x/mmdebstrap.y/dev rw - devtmpfs udev rw\n"+
			"91 22 0:6 / /var/tmp/with\\040space rw - tmpfs t rw\n"), 0o644)
	got, err := mountsBelow(mi, "/var/tmp/roundtable-toolbox.x")
	if err != nil || len(got) != 1 || got[0] != "/var/tmp/roundtable-toolbox.x/mmdebstrap.y/dev" {
		t.Errorf("mountsBelow = %q, %v", got, err)
	}
	if got, _ := mountsBelow(mi, "/var/tmp/with space"); len(got) != 1 {
		t.Errorf("escaped mount point not matched: %q", got)
	}
	if got, _ := mountsBelow(mi, "/var/tmp/roundtable-toolbox"); len(got) != 0 {
		t.Errorf("a sibling prefix matched: %q", got)
	}
	// The real table: a fresh directory has nothing mounted.
	d := filepath.Join(t.TempDir(), "p")
	os.Mkdir(d, 0o700)
	if err := removePrivate(d); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Errorf("not removed: %v", err)
	}
}

func TestKeepAcrossFilesystems(t *testing.T) {
	// /dev/shm is a tmpfs on Linux: rename(2) to the test directory fails
	// with EXDEV, so Keep copies (temporary name, fsync, rename).
	src, err := os.MkdirTemp("/dev/shm", "toolbox-test.")
	if err != nil {
		t.Skip("no /dev/shm here:", err)
	}
	defer os.RemoveAll(src)
	b := &Base{Path: filepath.Join(src, "base.tar"), dir: src}
	os.WriteFile(b.Path, []byte("a base"), 0o600)
	dstDir := t.TempDir()
	dst := filepath.Join(dstDir, "kept.tar")
	if err := b.Keep(dst); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(dst); string(data) != "a base" {
		t.Errorf("kept %q", data)
	}
	if ents, _ := os.ReadDir(dstDir); len(ents) != 1 {
		t.Errorf("left beside it: %v", ents)
	}
	if _, err := os.Stat(b.Path); !os.IsNotExist(err) {
		t.Errorf("the source stays after the copy: %v", err)
	}
}
