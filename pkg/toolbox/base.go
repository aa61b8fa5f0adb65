package toolbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultTimeout bounds a build (BuildBase and Import together) when the
// caller's context has no deadline: a full toolbox took 2 min 14 s here
// on 2 loaded cores (docs/code-runs.md, Toolbox).
const DefaultTimeout = 20 * time.Minute

// DefaultWorkDir holds the private directory of a build: /var/tmp, not
// /tmp, because the base tar is hundreds of megabytes and /tmp may be a
// small tmpfs.
const DefaultWorkDir = "/var/tmp"

// stopGrace is how long mmdebstrap has after SIGTERM (it then cleans up
// its own temporary directory) before its process group is killed (a
// variable for the tests).
var stopGrace = 20 * time.Second

// dpkgExcludes keep what a slim Debian image leaves out: manuals,
// documentation (copyright files stay), translations.
var dpkgExcludes = []string{
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/locale/*",
}

// BaseOptions describe a base build.
type BaseOptions struct {
	// Packages to include (Packages or SmallPackages); required.
	Packages []string
	// Suite is the Debian codename; "" = the machine's (Root/etc/os-release).
	Suite string
	// Mirrors are mmdebstrap MIRROR arguments ("deb [opts] uri suite comp",
	// or a URI); nil = the machine's own apt sources for Suite.
	Mirrors []string
	// Variant is mmdebstrap's variant; "" = "apt" (Essential plus apt, so a
	// run's setup can install packages).
	Variant string
	// WorkDir is where the private build directory is made; "" = DefaultWorkDir.
	WorkDir string
	// Root is the machine's root for its apt sources and os-release; "" = "/".
	Root string
	// Program is the mmdebstrap to run; "" = "mmdebstrap" on PATH.
	Program string
	// Progress receives mmdebstrap's own progress lines; nil discards them.
	Progress io.Writer
}

// Plan is a resolved base build: what BuildBase runs.
type Plan struct {
	Suite    string
	Variant  string
	Packages []string
	Mirrors  []string
	// Skipped are the machine's sources left out (another suite).
	Skipped []Source
	program string
}

var variants = map[string]bool{"essential": true, "apt": true, "minbase": true, "buildd": true, "required": true, "important": true, "standard": true}

// NewPlan resolves o: the suite, the mirrors (the machine's sources unless
// o.Mirrors), the variant; it checks the package names.
func NewPlan(o BaseOptions) (Plan, error) {
	if err := ValidPackages(o.Packages); err != nil {
		return Plan{}, err
	}
	root := o.Root
	if root == "" {
		root = "/"
	}
	p := Plan{Suite: o.Suite, Variant: o.Variant, Packages: append([]string(nil), o.Packages...), program: o.Program}
	if p.program == "" {
		p.program = "mmdebstrap"
	}
	if p.Variant == "" {
		p.Variant = "apt"
	}
	if !variants[p.Variant] {
		return Plan{}, fmt.Errorf("toolbox: %q is not an mmdebstrap variant", p.Variant)
	}
	if p.Suite == "" {
		c, err := Codename(filepath.Join(root, "etc/os-release"))
		if err != nil {
			return Plan{}, err
		}
		p.Suite = c
	} else if !packageRe.MatchString(p.Suite) {
		return Plan{}, fmt.Errorf("toolbox: suite %q is not a Debian codename", p.Suite)
	}
	if len(o.Mirrors) > 0 {
		for _, m := range o.Mirrors {
			if err := validMirror(m); err != nil {
				return Plan{}, err
			}
		}
		p.Mirrors = append([]string(nil), o.Mirrors...)
		return p, nil
	}
	srcs, err := MachineSources(root)
	if err != nil {
		return Plan{}, fmt.Errorf("toolbox: the machine's apt sources: %w", err)
	}
	kept, skipped, err := SelectRelease(srcs, p.Suite)
	if err != nil {
		return Plan{}, err
	}
	for _, s := range kept {
		p.Mirrors = append(p.Mirrors, s.Line())
	}
	p.Skipped = skipped
	return p, nil
}

// validMirror accepts a one-line "deb ..." entry or a URI, never an option
// (a leading '-') or a file name (mmdebstrap pastes a file's content).
func validMirror(m string) error {
	switch {
	case strings.ContainsAny(m, "\n\r\x00"):
		return fmt.Errorf("toolbox: mirror %q spans lines", m)
	case strings.HasPrefix(m, "deb "):
		return nil
	case strings.HasPrefix(m, "http://"), strings.HasPrefix(m, "https://"), strings.HasPrefix(m, "file:/"):
		if strings.ContainsAny(m, " \t") {
			return fmt.Errorf("toolbox: mirror URI %q holds a space", m)
		}
		return nil
	}
	return fmt.Errorf("toolbox: mirror %q is neither a \"deb ...\" line nor an http(s):// or file:/ URI", m)
}

// Args is mmdebstrap's argument list writing the base tar to out.
// --mode=unshare as root unshares the mount and PID namespaces (not the
// user namespace): the chroot's /proc, /sys and /dev mounts die with the
// build, whatever ends it. Mirrors are always given: without one
// mmdebstrap would use deb.debian.org, which the machine may not reach.
func (p Plan) Args(out string) []string {
	args := []string{
		"--mode=unshare",
		"--variant=" + p.Variant,
		"--format=tar",
		"--include=" + strings.Join(p.Packages, ","),
	}
	for _, x := range dpkgExcludes {
		args = append(args, "--dpkgopt="+x)
	}
	dir := filepath.Dir(PackagesFile)
	args = append(args,
		`--customize-hook=mkdir -p "$1`+dir+`"`,
		// Package names were checked by ValidPackages: no quoting needed.
		`--customize-hook=chroot "$1" dpkg-query -W -f='${Package}=${Version}\n' `+strings.Join(p.Packages, " ")+` > "$1`+PackagesFile+`"`,
		p.Suite, out)
	return append(args, p.Mirrors...)
}

// String is the command line, shell-quoted, as `toolbox build --dry-run`
// prints it (and test/toolbox/build.sh keys its cache by).
func (p Plan) String() string {
	parts := []string{p.program}
	for _, a := range p.Args("OUTPUT.tar") {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Base is a built base tar inside its private directory.
type Base struct {
	// Path is the tar.
	Path string
	dir  string
}

// Remove deletes the private directory and everything in it. It refuses
// when something is mounted below it (mmdebstrap's namespaces should make
// that impossible; removing through a bind mount of /dev would not be).
func (b *Base) Remove() error {
	if b == nil || b.dir == "" {
		return nil
	}
	return removePrivate(b.dir)
}

// Keep moves the tar to path (atomically: a temporary name in path's
// directory, fsync, rename), so a later Import can use it again.
func (b *Base) Keep(path string) error {
	return moveFile(b.Path, path)
}

// BuildBase runs mmdebstrap for o into a new private directory (0700)
// under o.WorkDir and returns the tar. On error nothing is left behind.
// Without a deadline on ctx, DefaultTimeout applies.
func BuildBase(ctx context.Context, o BaseOptions) (*Base, error) {
	p, err := NewPlan(o)
	if err != nil {
		return nil, err
	}
	return p.Build(ctx, o.WorkDir, o.Progress)
}

// Build runs the plan (BuildBase after NewPlan).
func (p Plan) Build(ctx context.Context, workDir string, progress io.Writer) (*Base, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	dir, err := privateDir(workDir)
	if err != nil {
		return nil, err
	}
	b := &Base{Path: filepath.Join(dir, "base.tar"), dir: dir}
	if err := p.run(ctx, dir, b.Path, progress); err != nil {
		if rerr := b.Remove(); rerr != nil {
			err = fmt.Errorf("%w (and %v)", err, rerr)
		}
		return nil, err
	}
	st, err := os.Stat(b.Path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && (!st.Mode().IsRegular() || st.Size() == 0)) {
		err = errors.New("mmdebstrap reported success but wrote no tar")
	}
	if err != nil {
		b.Remove()
		return nil, fmt.Errorf("toolbox: %w", err)
	}
	return b, nil
}

// run executes mmdebstrap in its own process group, stopping it with
// SIGTERM (then SIGKILL for the whole group) when ctx ends.
func (p Plan) run(ctx context.Context, dir, out string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	cmd := exec.CommandContext(ctx, p.program, p.Args(out)...)
	cmd.Dir = dir
	cmd.Stdin = nil // /dev/null: with no mirror mmdebstrap would read sources from stdin
	// mmdebstrap's own temporary directory (the chroot it tars) goes into
	// the private directory too.
	cmd.Env = append(os.Environ(), "TMPDIR="+dir)
	tail := &lastLines{n: 8}
	w := io.MultiWriter(progress, tail)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever is left of the group (apt, dpkg) goes too.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("toolbox: mmdebstrap did not finish in time (%w); raise --build-timeout", ctx.Err())
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("toolbox: mmdebstrap failed (%v); its last lines:\n%s", err, tail)
		}
		return fmt.Errorf("toolbox: running %s: %w (apt-get install mmdebstrap)", p.program, err)
	}
	return nil
}

// lastLines keeps the last n lines written (for an error message).
type lastLines struct {
	n     int
	lines []string
	part  string
}

func (l *lastLines) Write(b []byte) (int, error) {
	s := l.part + string(b)
	parts := strings.Split(s, "\n")
	l.part = parts[len(parts)-1]
	if len(l.part) > 4096 {
		l.part = l.part[:4096]
	}
	for _, line := range parts[:len(parts)-1] {
		l.lines = append(l.lines, line)
		if len(l.lines) > l.n {
			l.lines = l.lines[1:]
		}
	}
	return len(b), nil
}

func (l *lastLines) String() string {
	out := append([]string(nil), l.lines...)
	if l.part != "" {
		out = append(out, l.part)
	}
	return "  " + strings.Join(out, "\n  ")
}

// privateDir makes a new 0700 directory under parent.
func privateDir(parent string) (string, error) {
	if parent == "" {
		parent = DefaultWorkDir
	}
	dir, err := os.MkdirTemp(parent, "roundtable-toolbox.")
	if err != nil {
		return "", fmt.Errorf("toolbox: private build directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("toolbox: private build directory: %w", err)
	}
	return dir, nil
}

// removePrivate removes dir unless a mount point lies at or below it.
func removePrivate(dir string) error {
	mounts, err := mountsBelow("/proc/self/mountinfo", dir)
	if err != nil {
		return fmt.Errorf("toolbox: not removing %s: cannot read the mount table: %w", dir, err)
	}
	if len(mounts) > 0 {
		return fmt.Errorf("toolbox: not removing %s: %s is mounted there (umount it, then remove the directory)", dir, mounts[0])
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("toolbox: removing %s: %w", dir, err)
	}
	return nil
}

// mountsBelow lists the mount points of a mountinfo file at or below dir.
func mountsBelow(mountinfo, dir string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// moveFile renames src to dst, or copies it through a temporary file in
// dst's directory (fsync, rename) when they are on different filesystems.
func moveFile(src, dst string) error {
	dst = filepath.Clean(dst)
	if f, err := os.Open(src); err == nil {
		f.Sync() // the data before the name: a crash leaves no empty cache file
		f.Close()
	}
	if err := os.Rename(src, dst); err == nil {
		return syncDir(filepath.Dir(dst))
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("toolbox: keep base: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return fmt.Errorf("toolbox: keep base: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		return fmt.Errorf("toolbox: keep base: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("toolbox: keep base: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("toolbox: keep base: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("toolbox: keep base: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("toolbox: keep base: %w", err)
	}
	ok = true
	os.Remove(src)
	return syncDir(filepath.Dir(dst))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
