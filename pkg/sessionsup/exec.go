package sessionsup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// execState is one running exec.
type execState struct {
	id    string
	uid   int // the uid its processes run as (0 for a root exec)
	pgid  int // 0 until started
	start time.Time

	mu        sync.Mutex
	out       [2]stream
	started   bool // the started event was sent
	ended     bool // the result was sent: later output is dropped
	cancelled bool
	timedOut  bool
}

type stream struct {
	t         sessionwire.Type
	n, max    int
	truncated bool
	dropped   int64
}

// signals maps sessionwire's names to signals.
var signals = map[string]unix.Signal{
	sessionwire.SignalInt: unix.SIGINT, sessionwire.SignalTerm: unix.SIGTERM, sessionwire.SignalKill: unix.SIGKILL,
	sessionwire.SignalHup: unix.SIGHUP, sessionwire.SignalQuit: unix.SIGQUIT, sessionwire.SignalUsr1: unix.SIGUSR1,
	sessionwire.SignalUsr2: unix.SIGUSR2,
}

// startExec registers the exec (or refuses it) and runs it in the
// background.
func (s *Server) startExec(ctx context.Context, id string, x sessionwire.Exec) {
	if x.Root && !s.root {
		s.fail(id, sessionwire.ErrDenied, "root execs need the supervisor to run as root")
		return
	}
	e := &execState{id: id, uid: s.o.UID, start: time.Now()}
	if x.Root {
		e.uid = 0
	}
	e.out = [2]stream{{t: sessionwire.FrameStdout, max: x.MaxOutputBytes}, {t: sessionwire.FrameStderr, max: x.MaxOutputBytes}}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.fail(id, sessionwire.ErrInternal, "the session is ending")
		return
	}
	if _, dup := s.execs[id]; dup {
		s.mu.Unlock()
		s.fail(id, sessionwire.ErrBadRequest, "an exec with this id is running")
		return
	}
	if len(s.execs) >= s.o.MaxExecs {
		s.mu.Unlock()
		s.fail(id, sessionwire.ErrBusy, fmt.Sprintf("%d execs are running, the session's bound", s.o.MaxExecs))
		return
	}
	s.execs[id] = e
	s.wg.Add(1)
	s.mu.Unlock()
	// On a kept thread of the exec's kind, start to end (forker.go).
	fk := s.guestFork
	if x.Root {
		fk = s.rootFork
	}
	fk.run(func(privErr error) {
		defer s.wg.Done()
		s.runExec(ctx, e, x, privErr)
		s.mu.Lock()
		delete(s.execs, id)
		s.mu.Unlock()
	})
}

// env is an exec's whole environment: the supervisor's fixed variables,
// then the client's (ValidEnvName kept the fixed names out).
func (s *Server) env(x sessionwire.Exec, bundle string) []string {
	e := []string{"PATH=" + s.o.PATH, "LANG=C.UTF-8"}
	if x.Root {
		e = append(e, "HOME=/root", "USER=root", "LOGNAME=root", "DEBIAN_FRONTEND=noninteractive")
	} else {
		e = append(e, "HOME="+s.o.WorkDir, "USER="+s.o.User, "LOGNAME="+s.o.User)
	}
	keys := make([]string, 0, len(x.Env))
	for k := range x.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e = append(e, k+"="+x.Env[k])
	}
	e = append(e, s.proxyEnv(x)...)                // network.go
	return append(e, placeholderEnv(x, bundle)...) // network.go
}

// dir returns the host path of a session path (a valid one).
func (s *Server) dir(p string) string {
	root, rel, err := sessionwire.SplitPath(p)
	if err != nil {
		return s.o.WorkDir
	}
	base := s.o.WorkDir
	switch root {
	case sessionwire.RootOutput:
		base = s.o.OutputDir
	case sessionwire.RootTmp:
		base = s.o.TmpDir
	}
	return filepath.Join(base, rel)
}

// runExec runs one exec to its result event, on a thread of its kind
// whose privileges were dropped (privErr: they could not be).
func (s *Server) runExec(ctx context.Context, e *execState, x sessionwire.Exec, privErr error) {
	argv := []string{s.o.Shell, "-c", x.Command}
	if x.Command == "" {
		argv = append([]string{x.Executable}, x.Args...)
	}
	path, err := supervisor.LookPath(argv[0], s.o.PATH)
	if err != nil {
		e.mu.Lock()
		s.startedLocked(e)
		e.mu.Unlock()
		s.emit(e, 1, []byte(fmt.Sprintf("session: %s: not found in PATH\n", argv[0])))
		s.result(e, 127, "", 0)
		return
	}
	cwd := s.o.WorkDir
	if x.Cwd != "" {
		cwd = s.dir(x.Cwd)
	}
	// Stdin is the supervisor's one /dev/null (opened by New) unless the
	// exec has bytes for it.
	stdinFd := s.null.Fd()
	var inR, inW *os.File
	if len(x.Stdin) > 0 {
		r, w, err := os.Pipe()
		if err != nil {
			s.internal(e, "cannot create a pipe", err)
			return
		}
		inR, inW = r, w
		stdinFd = inR.Fd()
	}
	closeIn := func() {
		if inR != nil {
			inR.Close()
			inW.Close()
		}
	}
	outR, outW, err := outputPipe()
	if err != nil {
		closeIn()
		s.internal(e, "cannot create a pipe", err)
		return
	}
	errR, errW, err := outputPipe()
	if err != nil {
		closeIn()
		outR.Close()
		unix.Close(outW)
		s.internal(e, "cannot create a pipe", err)
		return
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.root {
		// No supplementary groups: an empty, non-nil Groups makes the
		// child call setgroups(0, NULL).
		sys.Credential = &syscall.Credential{Uid: uint32(s.o.UID), Gid: uint32(s.o.GID), Groups: []uint32{}}
		if x.Root {
			sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
		}
	}
	bundle, bundleDir, err := s.writeExecBundle(x)
	if err != nil {
		closeIn()
		outR.Close()
		errR.Close()
		unix.Close(outW)
		unix.Close(errW)
		s.internal(e, "cannot write the exec's CA bundle", err)
		return
	}
	// The bundle goes before the result, so the client that saw the end
	// finds none (and on every other way out).
	dropBundle := sync.OnceFunc(func() {
		if bundleDir != "" {
			_ = os.RemoveAll(bundleDir)
		}
	})
	defer dropBundle()
	attr := &syscall.ProcAttr{Dir: cwd, Env: s.env(x, bundle), Files: []uintptr{stdinFd, uintptr(outW), uintptr(errW)}, Sys: sys}

	// As a run's: the child inherits this thread's capabilities,
	// no_new_privs and Pdeathsig's parent (forker.go).
	pid, statusc, forkErr := 0, (<-chan unix.WaitStatus)(nil), privErr
	if forkErr == nil {
		pid, statusc, forkErr = s.rp.Start(func() (int, error) { return syscall.ForkExec(path, argv, attr) })
	}
	if inR != nil {
		inR.Close()
	}
	unix.Close(outW)
	unix.Close(errW)
	if forkErr != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		var errno syscall.Errno
		var perr *privilegeError
		if !errors.As(forkErr, &perr) && errors.As(forkErr, &errno) {
			// The child could not chdir or exec: the command's failure,
			// as a shell reports it.
			code := 126
			if errno == unix.ENOENT {
				code = 127
			}
			e.mu.Lock()
			s.startedLocked(e)
			e.mu.Unlock()
			s.emit(e, 1, []byte(fmt.Sprintf("session: %s: %s\n", argv[0], errno.Error())))
			s.result(e, code, "", 0)
			return
		}
		s.log.Error("cannot start an exec", "id", e.id, "reason", forkErr.Error())
		s.fail(e.id, sessionwire.ErrStart, "the command could not be started")
		return
	}
	started_ := time.Now()
	e.mu.Lock()
	e.pgid = pid
	e.mu.Unlock()
	// The started event waits a moment (StartedDelay): it goes with the
	// first output, or with the result in one write when the exec ends
	// first (an exec of true then crosses the attach stream's copies
	// once, not twice).
	startedLater := time.AfterFunc(s.o.StartedDelay, func() {
		e.mu.Lock()
		s.startedLocked(e)
		e.mu.Unlock()
	})
	defer startedLater.Stop()
	if inW != nil {
		go func() {
			// A command that does not read its stdin gets EPIPE here.
			_, _ = inW.Write(x.Stdin)
			inW.Close()
		}()
	}
	// drained is closed by the second pump to reach its pipe's end.
	drained := make(chan struct{})
	var pumping atomic.Int32
	pumping.Store(2)
	pump := func(i int, f *os.File) {
		s.pump(e, i, f)
		if pumping.Add(-1) == 0 {
			close(drained)
		}
	}
	go pump(0, outR)
	go pump(1, errR)

	// The timeout and the session's end kill the exec's process group
	// (e.pgid 0, set once the child is reaped, tells them it is too late:
	// the group may then hold only the background processes it left,
	// which outlive it, and its id may be reused); meanwhile
	// this goroutine waits for the child itself (waitChild), so its
	// status needs no other goroutine to wake this one.
	timer := time.AfterFunc(time.Duration(x.Timeout())*time.Second, func() {
		e.mu.Lock()
		pgid := e.pgid
		if pgid > 0 {
			e.timedOut = true
		}
		e.mu.Unlock()
		if pgid > 0 {
			s.killPgid(e, pgid)
		}
	})
	stopCtx := context.AfterFunc(ctx, func() {
		// The session is stopping: its execs end with it.
		s.killGroup(e)
	})
	ws := waitChild(s.rp, pid, statusc)
	e.mu.Lock()
	e.pgid = 0 // reaped: the group may be empty and its id reused
	e.mu.Unlock()
	timer.Stop()
	stopCtx()
	ran := time.Since(started_)
	// Output the exec's processes still hold: drained for a moment, then
	// dropped (a background process may keep its pipes for its life).
	select {
	case <-drained:
	default:
		grace := time.NewTimer(s.o.DrainGrace)
		select {
		case <-drained:
		case <-grace.C:
		}
		grace.Stop()
	}
	sig := ""
	if ws.Signaled() {
		sig = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
	}
	dropBundle()
	s.result(e, supervisor.ExitCode(ws), sig, ran)
}

// outputPipe is an exec's stdout or stderr pipe: its read end for the
// pump, through the netpoller; its write end a plain descriptor for the
// child alone. os.Pipe would register the write end with the netpoller
// too, then switch it back to blocking for the fork and deregister it:
// eight system calls of an exec's critical path for nothing.
func outputPipe() (*os.File, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, err
	}
	// Only the read end is non-blocking (os.NewFile then polls it); the
	// child's stdout must block when the pipe is full.
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, err
	}
	return os.NewFile(uintptr(p[0]), "|0"), p[1], nil
}

type privilegeError struct{ err error }

func (e *privilegeError) Error() string { return e.err.Error() }
func (e *privilegeError) Unwrap() error { return e.err }

// internal ends an exec that the supervisor could not start.
func (s *Server) internal(e *execState, what string, err error) {
	s.log.Error(what, "id", e.id, "reason", err.Error())
	s.fail(e.id, sessionwire.ErrInternal, "the supervisor could not run the exec")
}

// result sends the exec's result; output after it is dropped.
func (s *Server) result(e *execState, code int, sig string, ran time.Duration) {
	e.mu.Lock()
	e.ended = true
	startMs := int64(0)
	if ran > 0 {
		startMs = max(time.Since(e.start)-ran, 0).Milliseconds()
	}
	r := &sessionwire.ExecResult{
		ExitCode: code, Signal: sig, TimedOut: e.timedOut, Cancelled: e.cancelled,
		StdoutTruncated: e.out[0].truncated, StderrTruncated: e.out[1].truncated,
		StdoutDropped: e.out[0].dropped, StderrDropped: e.out[1].dropped,
		StartMs: startMs, RunMs: ran.Milliseconds(),
	}
	// The event goes out under e.mu so that no output frame of this exec
	// follows it.
	res := sessionwire.Event{ID: e.id, Kind: sessionwire.EventResult, Result: r}
	if !e.started {
		e.started = true
		if err := s.enc.Events(sessionwire.Event{ID: e.id, Kind: sessionwire.EventStarted}, res); err != nil {
			s.log.Error("writing an event failed", "kind", res.Kind, "reason", err.Error())
		}
	} else {
		s.event(res)
	}
	e.mu.Unlock()
}

// pump reads one of an exec's pipes to its end, framing what fits under
// the bound; it never stops reading, so a writer never blocks on a full
// pipe.
func (s *Server) pump(e *execState, i int, f *os.File) {
	defer f.Close()
	buf := make([]byte, sessionwire.MaxChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			s.emit(e, i, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// emit frames what fits under stream i's bound and counts the rest; after
// the result it drops everything.
func (s *Server) emit(e *execState, i int, p []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return
	}
	s.startedLocked(e)
	so := &e.out[i]
	keep := max(min(len(p), so.max-so.n), 0)
	if keep < len(p) {
		so.truncated = true
		so.dropped += int64(len(p) - keep)
	}
	if keep == 0 {
		return
	}
	so.n += keep
	if err := s.enc.Data(so.t, e.id, p[:keep]); err != nil {
		s.log.Error("writing output failed", "id", e.id, "reason", err.Error())
	}
}

// startedLocked sends e's started event once (the caller holds e.mu).
func (s *Server) startedLocked(e *execState) {
	if !e.started && !e.ended {
		e.started = true
		s.event(sessionwire.Event{ID: e.id, Kind: sessionwire.EventStarted})
	}
}

// signal sends a signal request's signal to its target exec's process
// group.
func (s *Server) signal(id string, sg sessionwire.Signal) {
	s.mu.Lock()
	e, ok := s.execs[sg.Target]
	s.mu.Unlock()
	if !ok {
		s.fail(id, sessionwire.ErrNotFound, "no running exec has this id")
		return
	}
	e.mu.Lock()
	pgid := e.pgid
	if sg.Name == sessionwire.SignalKill && pgid > 0 {
		e.cancelled = true
	}
	e.mu.Unlock()
	if pgid == 0 {
		s.fail(id, sessionwire.ErrNotFound, "the exec is not running")
		return
	}
	if err := s.signalGroup(e, pgid, signals[sg.Name]); err != nil {
		s.log.Warn("signal not delivered", "id", id, "target", sg.Target, "reason", err.Error())
		s.fail(id, sessionwire.ErrDenied, "the signal could not be delivered")
		return
	}
	s.event(sessionwire.Event{ID: id, Kind: sessionwire.EventDone})
}

// killGroup sends SIGKILL to e's process group (the caller may hold s.mu).
func (s *Server) killGroup(e *execState) {
	e.mu.Lock()
	pgid := e.pgid
	e.mu.Unlock()
	if pgid > 0 {
		s.killPgid(e, pgid)
	}
}

// killPgid sends SIGKILL to e's process group pgid.
func (s *Server) killPgid(e *execState, pgid int) {
	if err := s.signalGroup(e, pgid, unix.SIGKILL); err != nil {
		s.log.Warn("kill of an exec's process group failed", "id", e.id, "reason", err.Error())
	}
}

// signalGroup signals -pgid. A root supervisor without CAP_KILL (a
// container that was not given it) cannot signal a guest's processes; it
// kills them as the guest instead (runs/supervisor's KillAs), which only
// SIGKILL can do.
func (s *Server) signalGroup(e *execState, pgid int, sig unix.Signal) error {
	err := unix.Kill(-pgid, sig)
	if err == unix.ESRCH {
		return nil // the group is gone already
	}
	if err == unix.EPERM && sig == unix.SIGKILL && s.root && e.uid > 0 {
		return supervisor.KillAs(s.rp, e.uid, -pgid, time.Now().Add(5*time.Second))
	}
	return err
}
