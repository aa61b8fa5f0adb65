package sessionsup

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
)

// forker is the kept OS threads that run the execs of one kind (the
// guest's, or root's), each exec from its start to its result on one of
// them: a thread's privileges were dropped once, when it started, exactly
// as a run's forking thread drops them (runs/supervisor's
// DropThreadPrivileges: no_new_privs; as root, the bounding set cut to
// keep and no inheritable capability), and a child inherits them from the
// thread that forked it. Its effective set is kept (the child needs
// CAP_SETUID and CAP_SETGID), so the exec's own work before and after its
// fork (pipes, its CA bundle, the result) runs there as it would anywhere.
//
// Why kept threads rather than a throwaway thread per exec (as a run
// forks its one command): an exec of true paid a thread's creation and
// end and some eighty prctl calls each time. The state is the same for
// every exec of a kind, and no_new_privs and a bounding set cannot be
// raised again, so a thread that only ever runs execs of that kind holds
// nothing a fresh one would not. Why the whole exec on the thread rather
// than only its fork (handed to one forking thread, the pid handed back):
// each hand-over was a thread woken on the exec's critical path, and on
// two busy cores a wake-up waits for a core.
//
// A thread is started when none of the kind's is idle, up to max (the
// session's MaxExecs: at most that many execs run at once, so past it one
// is about to be idle). The threads are the children's parents for
// Pdeathsig (SIGKILL): they live as long as the supervisor (until Close,
// once every exec was reaped), so an exec's process dies with the
// supervisor, as before. A thread never runs anything but its kind's
// execs: it stays locked to its goroutine for its life.
type forker struct {
	jobs chan func(privErr error)
	root bool
	keep []uintptr
	max  int

	mu      sync.Mutex
	threads int
	stop    sync.Once
}

func newForker(root bool, keep []uintptr, max int) *forker {
	return &forker{jobs: make(chan func(error)), root: root, keep: keep, max: max}
}

// run runs job on one of the kind's threads; job gets nil, or the
// *privilegeError a thread whose privileges could not be dropped has (it
// must then fork nothing). It never blocks its caller (the request
// loop).
func (f *forker) run(job func(privErr error)) {
	select {
	case f.jobs <- job: // an idle thread took it
		return
	default:
	}
	f.mu.Lock()
	if f.threads >= f.max {
		f.mu.Unlock()
		// Every thread is busy with an exec that ended or is about to:
		// at most max run at once.
		go func() { f.jobs <- job }()
		return
	}
	f.threads++
	f.mu.Unlock()
	go supervisor.OnThrowawayThread(func() {
		var perr error
		if err := supervisor.DropThreadPrivileges(f.root, f.keep); err != nil {
			perr = &privilegeError{err}
		}
		job(perr)
		for j := range f.jobs {
			j(perr)
		}
	})
}

// close ends the threads once they are idle (the caller waited for every
// exec, so none is queued).
func (f *forker) close() {
	f.stop.Do(func() { close(f.jobs) })
}

// waitChild returns child pid's status, waiting on the child itself
// (waitid, WNOWAIT: the reaper still collects it) and then having the
// reaper collect it on the caller's goroutine: the status needs neither
// SIGCHLD's delivery to the process's signal goroutine nor another
// goroutine to wake the caller. A child the reaper collected first
// answers ECHILD; either way its status arrives on statusc.
func waitChild(rp *supervisor.Reaper, pid int, statusc <-chan unix.WaitStatus) unix.WaitStatus {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err == nil {
			rp.Reap()
		}
		return <-statusc
	}
}
