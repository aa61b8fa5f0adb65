package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// reaper is the only caller of wait4 in the process. It reaps every child
// (orphans reparent to PID 1) and hands the status of each process started
// through start to its waiter. start forks under the same lock that reaping
// holds, so a child that exits at once is never reaped before its waiter
// is registered, and syscall.ForkExec's own wait4 of a child whose exec
// failed never races with a wait4(-1). Nothing else may wait (no os/exec,
// no os.Process.Wait).
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	sig     chan os.Signal
	done    chan struct{}
	wg      sync.WaitGroup
}

func newReaper() *reaper {
	r := &reaper{waiting: map[int]chan unix.WaitStatus{}, sig: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(r.sig, unix.SIGCHLD)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// The tick covers a coalesced or early SIGCHLD.
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-r.sig:
			case <-t.C:
			case <-r.done:
				return
			}
			r.reap()
		}
	}()
	return r
}

func (r *reaper) close() {
	signal.Stop(r.sig)
	close(r.done)
	r.wg.Wait()
}

// start runs fork (which returns a new child's pid) and registers the
// child; its status arrives on the returned channel.
func (r *reaper) start(fork func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, nil, err
	}
	c := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = c
	return pid, c, nil
}

// reap collects every exited child without blocking.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if c, ok := r.waiting[pid]; ok {
			c <- ws
			delete(r.waiting, pid)
		}
	}
}

// streamOut is one output stream's bound, shared by the commands that run
// one after another; only the pump of the running command touches it.
type streamOut struct {
	t         wire.FrameType
	max       int
	n         int
	truncated bool
	dropped   int64 // bytes read past the bound
}

// emit frames what fits under the bound and drops (flagging and counting)
// the rest.
func (s *supervisor) emit(so *streamOut, phase string, p []byte) {
	keep := max(min(len(p), so.max-so.n), 0)
	if keep < len(p) {
		so.truncated = true
		so.dropped += int64(len(p) - keep)
	}
	if keep <= 0 {
		return
	}
	so.n += keep
	if err := s.enc.Output(so.t, phase, p[:keep]); err != nil {
		s.noteEncodeErr(err)
	}
}

// pump reads a command's pipe to EOF (or until it is closed), framing
// output as it comes and draining past the bound so the writer never
// blocks on a full pipe.
func (s *supervisor) pump(f *os.File, so *streamOut, phase string) {
	buf := make([]byte, wire.MaxChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			s.emit(so, phase, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// env is a command's whole environment: nothing is inherited.
func (s *supervisor) env(phase string) []string {
	e := []string{"PATH=" + s.o.PATH, "LANG=C.UTF-8"}
	if phase == wire.PhaseSetup {
		e = append(e, "HOME=/root", "USER=root", "LOGNAME=root", "DEBIAN_FRONTEND=noninteractive")
	} else {
		e = append(e, "HOME=/tmp", "USER="+s.o.User, "LOGNAME="+s.o.User)
	}
	if s.proxyURL != "" {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			e = append(e, k+"="+s.proxyURL)
		}
		e = append(e, s.runEnv...)
	}
	return e
}

// lookPath finds argv[0] in the children's PATH (a name with a slash is
// used as it is, relative to the working directory).
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", unix.ENOENT
}

// runCommand runs one command to its end in phase, streams its output, then
// kills what it left running and drains its pipes. It returns the exit
// code; a failure to start the command at all (not found, not executable)
// is exit code 127 or 126 with a line on its stderr, as a shell reports it.
// The error is a generic reason the supervisor itself failed.
func (s *supervisor) runCommand(ctx context.Context, phase string, argv []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, errStoppedSentinel
	}
	stdout, stderr := s.out[0], s.out[1]
	path, err := lookPath(argv[0], s.o.PATH)
	if err != nil {
		s.emit(stderr, phase, []byte(fmt.Sprintf("run-supervise: %s: not found in PATH\n", argv[0])))
		return 127, nil
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		s.log.Error("cannot open the null device", "reason", err.Error())
		return 0, errors.New(errStart)
	}
	defer devnull.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		s.log.Error("cannot create a pipe", "reason", err.Error())
		return 0, errors.New(errStart)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		s.log.Error("cannot create a pipe", "reason", err.Error())
		return 0, errors.New(errStart)
	}
	defer errR.Close()
	main := phase == wire.PhaseMain
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.root {
		// No supplementary groups: an empty, non-nil Groups makes the
		// child call setgroups(0, NULL). Setup stays root, in no group
		// but root's (not the gate's).
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
		if main {
			sys.Credential = &syscall.Credential{Uid: uint32(s.job.UID), Gid: uint32(s.job.GID), Groups: []uint32{}}
		}
	}
	// Fd puts the write ends in blocking mode, as a child expects.
	attr := &syscall.ProcAttr{Dir: s.o.Workspace, Env: s.env(phase), Files: []uintptr{devnull.Fd(), outW.Fd(), errW.Fd()}, Sys: sys}

	type started struct {
		pid int
		err error
	}
	startc := make(chan started, 1)
	statusc := make(chan unix.WaitStatus, 1)
	go onThrowawayThread(func() {
		// Capabilities and no_new_privs are per thread and a child
		// inherits its forking thread's; so is Pdeathsig's "parent".
		// The thread lives until the child's status arrives.
		keep := SetupCommandCapabilities
		if main {
			keep = nil
		}
		if main || s.root {
			if err := dropThreadPrivileges(s.root, keep); err != nil {
				startc <- started{err: &privilegeError{err}}
				return
			}
		}
		pid, ch, err := s.rp.start(func() (int, error) { return syscall.ForkExec(path, argv, attr) })
		startc <- started{pid: pid, err: err}
		if err == nil {
			statusc <- <-ch
		}
	})
	st := <-startc
	outW.Close()
	errW.Close()
	if st.err != nil {
		var errno syscall.Errno
		var perr *privilegeError
		if !errors.As(st.err, &perr) && errors.As(st.err, &errno) {
			// The child could not chdir or exec: the command's failure.
			code := 126
			if errno == unix.ENOENT {
				code = 127
			}
			s.emit(stderr, phase, []byte(fmt.Sprintf("run-supervise: %s: %s\n", argv[0], errno.Error())))
			return code, nil
		}
		s.log.Error("cannot start a command", "phase", phase, "reason", st.err.Error())
		return 0, errors.New(errStart)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.pump(outR, stdout, phase) }()
	go func() { defer wg.Done(); s.pump(errR, stderr, phase) }()

	var ws unix.WaitStatus
	stopped := false
	select {
	case ws = <-statusc:
	case <-ctx.Done():
		stopped = true
		s.killStragglers(st.pid)
		select {
		case ws = <-statusc:
		case <-time.After(killTimeout):
			s.log.Error("the command survived the kill", "phase", phase)
			return 0, errors.New(errStragglers)
		}
	}
	if !s.killStragglers(st.pid) {
		// Fail closed: nothing runs, and nothing is collected, while a
		// process of the job may still be alive.
		s.log.Error("processes of the job survived the kill", "phase", phase)
		return 0, errors.New(errStragglers)
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(s.o.DrainTimeout):
		s.log.Warn("a command's output pipes stayed open after it ended; closing them", "phase", phase)
		outR.Close()
		errR.Close()
		<-drained
	}
	if stopped {
		return 0, errStoppedSentinel
	}
	return exitCode(ws), nil
}

// privilegeError: the thread could not shed its privileges, so the main
// command was not started (fail closed, a supervisor failure).
type privilegeError struct{ err error }

func (e *privilegeError) Error() string { return e.err.Error() }
func (e *privilegeError) Unwrap() error { return e.err }

// SetupCommandCapabilities are all a setup command holds (as root, the
// capabilities root gets on exec are the bounding set): dpkg's chown,
// chmod of what it chowned and setuid bits. Not DAC_OVERRIDE or
// DAC_READ_SEARCH (which read past a file's mode), not SETUID or SETGID
// (which would become the project gate's owner or group, then read as
// root what root owns): the project's gate stops setup (checkGate). apt
// cannot drop to its _apt user either: the toolbox sets
// APT::Sandbox::User "root".
var SetupCommandCapabilities = []uintptr{unix.CAP_CHOWN, unix.CAP_FOWNER, unix.CAP_FSETID}

// dropThreadPrivileges prepares the calling (locked) thread so that a child
// it forks has no_new_privs and, as root, a capability bounding set of
// exactly keep (of what it had), no inheritable and no ambient
// capabilities; for the main command (keep nil) the child's setuid to a
// non-zero uid then clears its permitted and effective sets, for a setup
// command root's exec takes the bounding set. The thread's effective set
// is kept: the child needs CAP_SETUID and CAP_SETGID to set its ids and
// groups before exec.
func dropThreadPrivileges(root bool, keep []uintptr) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	if !root {
		return nil
	}
	for c := uintptr(0); c < 64; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0)
		if err == unix.EINVAL {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	for c := uintptr(0); c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if err == unix.EINVAL {
			break
		}
		if err != nil || in != 0 && !slices.Contains(keep, c) {
			return fmt.Errorf("capability %d is still in the bounding set (%v)", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3} // Pid 0: this thread
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear the inheritable capabilities: %w", err)
	}
	return nil
}
