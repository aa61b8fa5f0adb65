package sessionsup

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/supervisor"
)

// forker is one OS thread that forks every exec of one kind (the guest's,
// or root's): its privileges were dropped once, when it started, exactly
// as a run's forking thread drops them (runs/supervisor's
// DropThreadPrivileges: no_new_privs; as root, the bounding set cut to
// keep and no inheritable capability), and a child inherits them from it.
//
// Why one thread per kind rather than a throwaway thread per exec (as a
// run forks its one command): an exec of `true` paid a thread's creation
// and end and some eighty prctl calls each time, and its status came
// through that thread, woken for it. The state is the same for every exec
// of a kind, and no_new_privs and a bounding set cannot be raised again,
// so a thread that only ever forks children of that kind holds nothing a
// fresh one would not. It is also the children's parent for Pdeathsig
// (SIGKILL): it lives as long as the supervisor (until Close, once every
// exec was reaped), so an exec's process dies with the supervisor, as
// before.
type forker struct {
	reqs chan forkReq
	once sync.Once
	stop sync.Once
	root bool
	keep []uintptr
}

type forkReq struct {
	fork func() (int, error)
	done chan forked
}

// forked is a fork's outcome: the child and where its status arrives.
type forked struct {
	pid    int
	status <-chan unix.WaitStatus
	err    error
}

func newForker(root bool, keep []uintptr) *forker {
	return &forker{reqs: make(chan forkReq), root: root, keep: keep}
}

// start forks on the forker's thread under the reaper (rp), starting the
// thread on first use. A thread whose privileges could not be dropped
// answers every fork with that error (a *privilegeError).
func (f *forker) start(rp *supervisor.Reaper, fork func() (int, error)) forked {
	f.once.Do(func() {
		go supervisor.OnThrowawayThread(func() {
			err := supervisor.DropThreadPrivileges(f.root, f.keep)
			for r := range f.reqs {
				if err != nil {
					r.done <- forked{err: &privilegeError{err}}
					continue
				}
				pid, ch, ferr := rp.Start(r.fork)
				r.done <- forked{pid: pid, status: ch, err: ferr}
			}
		})
	})
	done := make(chan forked, 1)
	f.reqs <- forkReq{fork: fork, done: done}
	return <-done
}

// close ends the thread (its children were all reaped: the caller waited
// for every exec); a forker never started stays unstarted.
func (f *forker) close() {
	f.stop.Do(func() { close(f.reqs) })
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
