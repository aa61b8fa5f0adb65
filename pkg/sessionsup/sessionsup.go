// Package sessionsup is PID 1 of a session's container (`sandbox-worker
// session`, DESIGN.md section 18): it reads sessionwire requests on stdin
// (the attach stream), runs execs and file operations, and writes
// sessionwire events on stdout, until stdin ends or a signal stops it.
//
// What a session keeps: its files (the work directory, /output, /tmp, and
// whatever root execs installed in the writable layer) and the processes
// left running. An exec runs in a process group of its own; when its main
// process ends the result is sent (after a short drain of its pipes) and
// whatever it started in the background stays: a dev server, a build
// daemon. A background process keeps the exec's uid and capabilities (a
// guest's: none), may write to the session's files and reach what the
// exec could reach, and its later output is read and dropped (redirect it
// to a file to keep it). It dies when the session ends (the container's
// PID namespace goes with PID 1), or with its exec's process group when
// the exec is cancelled or times out. The supervisor reaps every process.
//
// Guarantees: a guest exec runs as the session's uid:gid with no
// supplementary groups, no_new_privs and no capability in any set; a root
// exec runs as root in no group but root's with only
// supervisor.SetupCommandCapabilities, what a run's setup command holds
// (both are package runs/supervisor's code, not a copy); at most
// MaxExecs execs run at once, a request past it is refused with a busy
// error at once; an exec's stdout and stderr are each bounded by its
// maxOutputBytes (the rest read and dropped, the result saying how much);
// its timeout kills its process group; its started event precedes its
// output and its result, at most DefaultStartedDelay after its fork (with
// the result, in one write, when it ended sooner). A file put, get, list or get-dir
// resolves its path beneath its root (the work directory, /output or /tmp)
// with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS,
// so no symlink anywhere on the path is followed and no ".." escapes, even
// when a directory is swapped for a symlink at the same moment; it runs on
// a throwaway thread whose filesystem uid and gid are the guest's with no
// supplementary groups (setfsuid: the kernel then drops the thread's
// filesystem capabilities), so it reaches exactly the files the guest
// could; a put is written to a temporary file in the target's directory,
// synced, then renamed over the target, so a crash leaves the old file or
// the new one whole; sizes are bounded both ways (sessionwire's
// MaxPutBytes, MaxGetBytes, MaxTarBytes, MaxListEntries).
//
// Why setfsuid on a thread rather than a helper process of the guest's
// uid: no fork and exec per file operation (a put or get of 1 MiB should
// cost milliseconds), the data needs no second pipe, and the thread ends
// with the operation. The filesystem uid is used by no permission check
// but the filesystem's: signals and ptrace look at the real, effective
// and saved uids, which stay root's, so the guest cannot signal or trace
// the supervisor through that thread (a thread holding the guest's
// effective uid, even for a moment, would let it: see runs/supervisor's
// killAs).
package sessionsup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
)

// Defaults inside the session's container.
const (
	// DefaultWorkDir is the session's writable work directory, owned by
	// its guest uid; relative paths and the default cwd are there.
	DefaultWorkDir   = "/work"
	DefaultOutputDir = sessionwire.RootOutput
	DefaultTmpDir    = sessionwire.RootTmp
	DefaultShell     = supervisor.DefaultShell
	DefaultPATH      = supervisor.DefaultPATH
	DefaultUser      = supervisor.DefaultUser
	// DefaultMaxExecs bounds the execs running at once in one session.
	DefaultMaxExecs = 16
	// DefaultDrainGrace bounds waiting, once an exec's main process
	// ended, for its pipes to close (a background process that kept
	// them open): its output past that is read and dropped.
	DefaultDrainGrace = 100 * time.Millisecond
	// DefaultStartedDelay bounds how long after its fork an exec's
	// started event may wait: it goes at once with the exec's first
	// output, or with its result in one write when the exec ends sooner.
	DefaultStartedDelay = 2 * time.Millisecond
)

// Options are the supervisor's paths and knobs; UID and GID are the
// session's guest (both > 0); the zero value of the rest means the
// container defaults.
type Options struct {
	UID, GID   int
	WorkDir    string
	OutputDir  string
	TmpDir     string
	Shell      string
	PATH       string
	User       string
	MaxExecs   int
	DrainGrace time.Duration
	// StartedDelay: DefaultStartedDelay when 0.
	StartedDelay time.Duration
	// BrokerSocket is a network session's broker socket (default
	// supervisor.DefaultBrokerSocket); when it exists at start, the
	// egress bridge listens on BridgeAddr (network.go).
	BrokerSocket string
	BridgeAddr   string
	// SystemRoots (default supervisor.DefaultSystemRoots) start a
	// network exec's CA bundle (network.go).
	SystemRoots string
	// Log receives the supervisor's own lines (never output, payloads or
	// paths a client chose).
	Log *slog.Logger
}

func (o Options) withDefaults(stderr io.Writer) Options {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.WorkDir, DefaultWorkDir)
	def(&o.OutputDir, DefaultOutputDir)
	def(&o.TmpDir, DefaultTmpDir)
	def(&o.Shell, DefaultShell)
	def(&o.PATH, DefaultPATH)
	def(&o.User, DefaultUser)
	def(&o.SystemRoots, supervisor.DefaultSystemRoots)
	if o.MaxExecs <= 0 {
		o.MaxExecs = DefaultMaxExecs
	}
	if o.DrainGrace <= 0 {
		o.DrainGrace = DefaultDrainGrace
	}
	if o.StartedDelay <= 0 {
		o.StartedDelay = DefaultStartedDelay
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewJSONHandler(stderr, nil)).With("component", "sandbox-session-supervisor")
	}
	return o
}

// Server is one session's supervisor. Serve reads requests; Close ends
// every exec.
type Server struct {
	o    Options
	enc  *sessionwire.EventEncoder
	rp   *supervisor.Reaper
	log  *slog.Logger
	root bool // euid 0: execs and file operations switch to the guest

	mu     sync.Mutex
	execs  map[string]*execState // running, by request id
	closed bool                  // Close began: no exec starts
	wg     sync.WaitGroup        // exec goroutines
	// guestFork and rootFork run the guest's and root's execs
	// (forker.go).
	guestFork, rootFork *forker
	// null is /dev/null, every exec's stdin unless it has bytes for it:
	// opened once, not per exec (reading it gives nothing whoever else
	// holds it).
	null      *os.File
	closeOnce sync.Once

	// afterStat, when set (tests), runs in a get between the file's
	// fstat and its read.
	afterStat func()

	// proxyURL is the egress bridge's, when it listens (network.go).
	proxyURL string
}

// New returns a supervisor writing events to stdout, sharing rp (the
// process's only reaper).
func New(o Options, stdout, stderr io.Writer, rp *supervisor.Reaper) (*Server, error) {
	o = o.withDefaults(stderr)
	if o.UID <= 0 || o.GID <= 0 {
		return nil, fmt.Errorf("sessionsup: the guest uid and gid must be > 0, got %d:%d", o.UID, o.GID)
	}
	root := os.Geteuid() == 0
	if !root && (o.UID != os.Geteuid() || o.GID != os.Getegid()) {
		return nil, fmt.Errorf("sessionsup: not root, so the guest must be this process's %d:%d, not %d:%d",
			os.Geteuid(), os.Getegid(), o.UID, o.GID)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("sessionsup: %w", err)
	}
	return &Server{o: o, enc: sessionwire.NewEventEncoder(stdout), rp: rp, log: o.Log, root: root, null: null,
		execs:     map[string]*execState{},
		guestFork: newForker(root, nil, o.MaxExecs), rootFork: newForker(root, supervisor.SetupCommandCapabilities, o.MaxExecs)}, nil
}

// Main runs a session until stdin ends or ctx is done and returns the
// process exit code.
func Main(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, o Options) int {
	// Not dumpable: a guest process can neither ptrace the supervisor
	// nor open its descriptors through /proc.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if os.Getpid() != 1 {
		// Outside a container a subreaper still collects the orphans.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	rp := supervisor.NewReaper()
	defer rp.Close()
	s, err := New(o, stdout, stderr, rp)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer s.Close()
	defer s.startBridge(ctx)() // network.go
	if err := s.Serve(ctx, stdin); err != nil {
		s.log.Error("session ended on a stream error", "reason", err.Error())
		return 1
	}
	s.log.Info("session ended")
	return 0
}

// Serve reads requests until stdin ends (nil), ctx is done (nil) or the
// stream breaks the protocol (the error). Execs run concurrently; file
// operations run one at a time, in the order they arrive.
func (s *Server) Serve(ctx context.Context, stdin io.Reader) error {
	d := sessionwire.NewRequestDecoder(stdin)
	type next struct {
		r   sessionwire.Request
		err error
	}
	reqs := make(chan next)
	ack := make(chan struct{})
	go func() {
		// The decoder runs here so that ctx can end Serve; each request
		// is handled before the next is read (a put reads its data).
		for {
			r, err := d.Next()
			select {
			case reqs <- next{r, err}:
			case <-ctx.Done():
				return
			}
			var re *sessionwire.RequestError
			if err != nil && !errors.As(err, &re) {
				return
			}
			select {
			case <-ack:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var n next
		select {
		case n = <-reqs:
		case <-ctx.Done():
			return nil
		}
		var re *sessionwire.RequestError
		switch {
		case errors.As(n.err, &re):
			s.fail(re.ID, sessionwire.ErrBadRequest, "request refused: "+generic(re.Err))
		case n.err == io.EOF:
			return nil
		case n.err != nil:
			return n.err
		default:
			s.handle(ctx, n.r, d)
		}
		ack <- struct{}{}
	}
}

// generic is the first words of a validation error (it never quotes the
// request: sessionwire's messages name fields, not values).
func generic(err error) string {
	m := err.Error()
	if len(m) > 200 {
		m = m[:200]
	}
	return printableOnly(m)
}

func printableOnly(m string) string {
	b := []byte(m)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

func (s *Server) handle(ctx context.Context, r sessionwire.Request, d *sessionwire.RequestDecoder) {
	switch r.Op {
	case sessionwire.OpExec:
		s.startExec(ctx, r.ID, *r.Exec)
	case sessionwire.OpSignal:
		s.signal(r.ID, *r.Signal)
	case sessionwire.OpPut:
		s.put(r.ID, *r.File, d.Data())
	case sessionwire.OpGet:
		s.get(r.ID, r.File.Path)
	case sessionwire.OpList:
		s.list(r.ID, r.File.Path)
	case sessionwire.OpGetDir:
		s.getDir(r.ID, r.File.Path)
	}
}

// fail ends request id with an error event.
func (s *Server) fail(id, code, msg string) {
	s.event(sessionwire.Event{ID: id, Kind: sessionwire.EventError, Error: &sessionwire.Error{Code: code, Message: msg}})
}

func (s *Server) event(ev sessionwire.Event) {
	if err := s.enc.Event(ev); err != nil {
		s.log.Error("writing an event failed", "kind", ev.Kind, "reason", err.Error())
	}
}

// Close kills every running exec's process group and waits for their
// results to be written.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, e := range s.execs {
		s.killGroup(e)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.guestFork.close()
	s.rootFork.close()
	s.closeOnce.Do(func() { s.null.Close() })
}
