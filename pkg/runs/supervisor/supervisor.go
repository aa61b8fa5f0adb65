// Package supervisor is PID 1 of a run's container (`sandbox-worker
// run-supervise`): it reads the wire.Job on stdin, runs the setup commands
// as root and the main command as the job's user, streams their output as
// wire frames on stdout, kills every remaining process, sends the requested
// artifacts, then the result. It has no init: it reaps every process.
//
// Guarantee: setup commands run as root with no supplementary groups and
// only SetupCommandCapabilities in any set, and only once the project's
// gate is in place (wire.SetupGatePath: a read-only directory that is not
// root's nor in root's group and closed to others), so they reach no file
// of the project; the main command runs as the job's uid:gid with no
// supplementary groups, no_new_privs, and no capability in any set
// (bounding, permitted, effective, inheritable, ambient); no process the job
// started survives a command's end (when the supervisor is PID 1) so none
// runs during collection; an artifact is sent only if it is a regular file
// reached through real directories under the output directory without
// following a symlink, within the job's bounds, read whole and unchanged;
// every child is reaped and no command's exit status is lost to reaping.
package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/egress/bridge"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// Defaults inside the toolbox container.
const (
	DefaultOutputDir = "/output"
	DefaultWorkspace = "/workspace"
	// DefaultProjectGate is where a run with setup has its project.
	DefaultProjectGate = wire.SetupProjectPath
	DefaultShell       = "/bin/sh"
	DefaultPATH        = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// DefaultBrokerSocket is /run/broker/<layout.BrokerSocketName>
	// (protocol.BrokerSocketPath); a test keeps them equal.
	DefaultBrokerSocket = "/run/broker/broker.sock"
	// DefaultUser names the main command's user in USER and LOGNAME.
	DefaultUser = "sandbox"
	// DefaultDrainTimeout bounds waiting for a command's output pipes to
	// close once it and its process group were killed (a process that left
	// the group keeps them open when the supervisor is not PID 1).
	DefaultDrainTimeout = 5 * time.Second
)

// Options are the supervisor's paths and knobs; the zero value means the
// container defaults.
type Options struct {
	OutputDir string
	Workspace string
	// ProjectGate is the project behind its gate in a run with setup
	// (wire.SetupProjectPath); Workspace becomes a symlink to it once
	// setup ended.
	ProjectGate  string
	Shell        string
	PATH         string
	BrokerSocket string
	// BridgeAddr is where the egress bridge listens (default
	// 127.0.0.1:bridge.Port); the proxy variables name its actual address.
	BridgeAddr   string
	User         string
	DrainTimeout time.Duration
	// CABundle is where the run's CA bundle goes (DefaultCABundle),
	// SystemRoots the roots it starts with (DefaultSystemRoots).
	CABundle    string
	SystemRoots string
	// Log receives the supervisor's own log lines (never output or
	// payloads); nil logs JSON to the stderr Main is given.
	Log *slog.Logger

	// afterKill, when set (tests), runs after the main command's
	// stragglers were killed and before the artifacts are read.
	afterKill func()
}

func (o Options) withDefaults(stderr io.Writer) Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.OutputDir, DefaultOutputDir)
	def(&o.Workspace, DefaultWorkspace)
	def(&o.ProjectGate, DefaultProjectGate)
	def(&o.Shell, DefaultShell)
	def(&o.PATH, DefaultPATH)
	def(&o.BrokerSocket, DefaultBrokerSocket)
	def(&o.BridgeAddr, net.JoinHostPort("127.0.0.1", fmt.Sprint(bridge.Port)))
	def(&o.User, DefaultUser)
	def(&o.CABundle, DefaultCABundle)
	def(&o.SystemRoots, DefaultSystemRoots)
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewJSONHandler(stderr, nil)).With("component", "sandbox-run-supervisor")
	}
	return o
}

// Generic errors of Result.Error: the supervisor could not run the job.
const (
	errInvalidJob = "invalid job"
	errNeedsRoot  = "setup commands need the supervisor to run as root"
	errGate       = "the project is not behind its gate; setup was not run"
	errWrongUser  = "the supervisor cannot switch to the job's user"
	errBridge     = "egress bridge failed"
	errStart      = "could not start a command"
	errStopped    = wire.ErrorStopped
	errStragglers = "leftover processes could not be killed"
)

// Main runs one job and returns the process exit code: 0 when the result
// frame was written (whatever the commands' exit codes), non-zero when the
// supervisor itself failed.
func Main(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, o Options) int {
	o = o.withDefaults(stderr)
	// Not dumpable: a main command of the same uid (no setup) can neither
	// ptrace the supervisor nor open its descriptors through /proc.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		o.Log.Warn("could not clear the dumpable flag", "reason", err.Error())
	}
	if os.Getpid() != 1 {
		// Outside a container's PID namespace kill(-1) would reach far
		// too much: stragglers are killed by process group only, and a
		// subreaper still reaps the orphans.
		o.Log.Warn("not PID 1: leftover processes are killed by process group only")
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	rp := newReaper()
	defer rp.close()
	s := &supervisor{o: o, enc: wire.NewEncoder(stdout), rp: rp, log: o.Log, pid1: os.Getpid() == 1, root: os.Geteuid() == 0}
	job, err := wire.ReadJob(bufio.NewReaderSize(stdin, 64<<10))
	if err != nil {
		s.log.Error("job refused", "reason", err.Error())
		return s.fail(errInvalidJob)
	}
	s.job = job
	s.out = [2]*streamOut{{t: wire.FrameStdout, max: job.MaxOutputBytes}, {t: wire.FrameStderr, max: job.MaxOutputBytes}}
	if !s.root {
		switch {
		case len(job.Setup) > 0:
			s.log.Error("job has setup commands but the supervisor is not root", "euid", os.Geteuid())
			return s.fail(errNeedsRoot)
		case job.UID != os.Geteuid() || job.GID != os.Getegid():
			s.log.Error("job's user differs from the supervisor's and the supervisor is not root",
				"euid", os.Geteuid(), "egid", os.Getegid(), "uid", job.UID, "gid", job.GID)
			return s.fail(errWrongUser)
		}
	}
	if s.root && len(job.Setup) > 0 {
		if err := s.checkGate(); err != nil {
			s.log.Error("setup refused: the project's gate is not in place", "reason", err.Error())
			return s.fail(errGate)
		}
	}
	if job.Proxy {
		stop, err := s.startBridge(ctx)
		if err != nil {
			s.log.Error("egress bridge failed to listen", "reason", err.Error())
			return s.fail(errBridge)
		}
		defer stop()
		if job.Placeholders {
			if err := s.setupRunEnv(ctx); err != nil {
				s.log.Error("run credentials' placeholders unavailable", "reason", err.Error())
				return s.fail(errBridge)
			}
		}
	}
	res, err := s.execute(ctx)
	if err != nil {
		return s.fail(err.Error())
	}
	if err := s.enc.Result(res); err != nil {
		s.log.Error("writing the result failed", "reason", err.Error())
		return 1
	}
	if err := s.encodeErr(); err != nil {
		s.log.Error("writing output failed", "reason", err.Error())
		return 1
	}
	return 0
}

type supervisor struct {
	o    Options
	job  wire.Job
	enc  *wire.Encoder
	rp   *reaper
	log  *slog.Logger
	pid1 bool // PID 1 of its namespace: kill(-1) reaches exactly the job's processes
	root bool
	out  [2]*streamOut
	// proxyURL is set when the bridge listens.
	proxyURL string
	// runEnv is the placeholders' and CA bundle's variables, if any.
	runEnv []string

	errMu  sync.Mutex
	encErr error
}

// fail writes a result with a generic error and returns a failure code.
func (s *supervisor) fail(reason string) int {
	r := wire.Result{ExitCode: -1, Error: reason}
	if s.out[0] != nil {
		r = s.result(r)
	}
	if err := s.enc.Result(r); err != nil {
		s.log.Error("writing the result failed", "reason", err.Error())
	}
	return 2
}

func (s *supervisor) noteEncodeErr(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.encErr == nil {
		s.encErr = err
	}
}

func (s *supervisor) encodeErr() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.encErr
}

// startBridge listens for the egress bridge; stop ends it and waits.
func (s *supervisor) startBridge(ctx context.Context) (stop func(), err error) {
	ln, err := net.Listen("tcp", s.o.BridgeAddr)
	if err != nil {
		return nil, err
	}
	s.proxyURL = "http://" + ln.Addr().String()
	b := &bridge.Bridge{Listener: ln, Dial: bridge.UnixDial(s.o.BrokerSocket), MaxConnections: bridge.MaxConnections, Log: s.log}
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.Serve(bctx); err != nil {
			s.log.Error("egress bridge failed", "reason", err.Error())
		}
	}()
	s.log.Info("egress bridge ready", "listen", ln.Addr().String())
	return func() { cancel(); <-done }, nil
}

// execute runs the setup commands, the main command and the collection, and
// returns the result; an error is a generic reason the job could not run.
func (s *supervisor) execute(ctx context.Context) (wire.Result, error) {
	if len(s.job.Setup) > 0 {
		// Setup's working directory: an empty directory of the writable
		// root until the project replaces it (the image's WORKDIR, or
		// made here).
		if err := os.Mkdir(s.o.Workspace, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			s.log.Error("cannot make setup's working directory", "reason", err.Error())
			return wire.Result{}, errors.New(errStart)
		}
	}
	for i, cmd := range s.job.Setup {
		code, err := s.runCommand(ctx, wire.PhaseSetup, []string{s.o.Shell, "-c", cmd})
		if err != nil {
			return wire.Result{}, err
		}
		if err := s.enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseSetup, Index: i + 1, ExitCode: code}); err != nil {
			s.noteEncodeErr(err)
		}
		if code != 0 {
			return s.result(wire.Result{ExitCode: code, FailedSetup: i + 1}), nil
		}
	}
	if len(s.job.Setup) > 0 {
		// No setup process is left (runCommand killed them): the project
		// becomes reachable for the main command only now.
		if err := s.linkWorkspace(); err != nil {
			s.log.Error("cannot link the workspace to the project", "reason", err.Error())
			return wire.Result{}, errors.New(errStart)
		}
	}
	argv := s.job.Argv
	if s.job.Command != "" {
		argv = []string{s.o.Shell, "-c", s.job.Command}
	}
	code, err := s.runCommand(ctx, wire.PhaseMain, argv)
	if err != nil {
		return wire.Result{}, err
	}
	if err := s.enc.PhaseEnd(wire.PhaseEnd{Phase: wire.PhaseMain, ExitCode: code}); err != nil {
		s.noteEncodeErr(err)
	}
	if s.o.afterKill != nil {
		s.o.afterKill()
	}
	s.collect()
	return s.result(wire.Result{ExitCode: code}), nil
}

// result adds what was cut of each stream.
func (s *supervisor) result(r wire.Result) wire.Result {
	r.StdoutTruncated, r.StderrTruncated = s.out[0].truncated, s.out[1].truncated
	r.StdoutDropped, r.StderrDropped = s.out[0].dropped, s.out[1].dropped
	return r
}

// exitCode maps a wait status to a shell's exit code: 128 + the signal
// number for a signalled process.
func exitCode(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 128 + int(unix.SIGKILL)
}

var errStoppedSentinel = errors.New(errStopped)

// checkGate refuses to run setup unless the project is behind its gate:
// the gate a read-only directory of the job's uid, not in root's group,
// that its owner can pass and nobody else can enter, with the project
// inside. Root without DAC_OVERRIDE, DAC_READ_SEARCH, SETUID and SETGID
// (SetupCommandCapabilities), in no group but root's, then cannot pass it,
// and CHOWN and FOWNER cannot change it.
func (s *supervisor) checkGate() error {
	gate := filepath.Dir(s.o.ProjectGate)
	var st unix.Stat_t
	if err := unix.Lstat(gate, &st); err != nil {
		return fmt.Errorf("gate %s: %w", gate, err)
	}
	perm := st.Mode & 0o777
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("gate %s is not a directory", gate)
	case st.Uid == 0 || int(st.Uid) != s.job.UID:
		return fmt.Errorf("gate %s belongs to uid %d, not the job's %d", gate, st.Uid, s.job.UID)
	case st.Gid == 0:
		return fmt.Errorf("gate %s is in root's group", gate)
	case perm&0o077 != 0 || perm&0o100 == 0:
		return fmt.Errorf("gate %s has mode %#o: its owner must pass and nobody else enter", gate, perm)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(gate, &sfs); err != nil {
		return fmt.Errorf("gate %s: %w", gate, err)
	}
	if sfs.Flags&unix.ST_RDONLY == 0 {
		return fmt.Errorf("gate %s is not mounted read-only", gate)
	}
	if err := unix.Lstat(s.o.ProjectGate, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("the project %s is not a directory (%v)", s.o.ProjectGate, err)
	}
	return nil
}

// linkWorkspace replaces setup's working directory (whatever setup left
// there) with a symlink to the project behind its gate.
func (s *supervisor) linkWorkspace() error {
	if err := os.RemoveAll(s.o.Workspace); err != nil {
		return err
	}
	return os.Symlink(s.o.ProjectGate, s.o.Workspace)
}
