package supervisor

import (
	"time"

	"golang.org/x/sys/unix"
)

// The pieces a session's supervisor (package sessionsup) shares with a
// run's: the same reaping, privilege dropping and killing, not copies.

// Reaper is the process's only caller of wait4 (see reaper): it reaps every
// child, orphans included, and hands each started child's status to its
// waiter. One per process.
type Reaper struct{ r *reaper }

// NewReaper starts reaping on SIGCHLD; Close stops it.
func NewReaper() *Reaper { return &Reaper{r: newReaper()} }

// Close stops reaping.
func (r *Reaper) Close() { r.r.close() }

// Start runs fork under the reaping lock and registers the child.
func (r *Reaper) Start(fork func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	return r.r.start(fork)
}

// Reap collects every exited child now.
func (r *Reaper) Reap() { r.r.reap() }

// OnThrowawayThread runs f on an OS thread that ends when f returns (see
// onThrowawayThread): f may change the thread's credentials.
func OnThrowawayThread(f func()) { onThrowawayThread(f) }

// DropThreadPrivileges prepares the calling locked thread so that a child
// it forks has no_new_privs and, as root, a bounding set of exactly keep
// (see dropThreadPrivileges).
func DropThreadPrivileges(root bool, keep []uintptr) error { return dropThreadPrivileges(root, keep) }

// LookPath finds name in path as a run's command is found.
func LookPath(name, path string) (string, error) { return lookPath(name, path) }

// KillAs sends SIGKILL to target (-pgid) as uid from a KillMain child (see
// killAs): root without CAP_KILL reaches a guest's processes that way.
func KillAs(r *Reaper, uid, target int, deadline time.Time) error {
	s := &supervisor{rp: r.r}
	return s.killAs(uid, target, deadline)
}

// ExitCode maps a wait status to a shell's exit code.
func ExitCode(ws unix.WaitStatus) int { return exitCode(ws) }
