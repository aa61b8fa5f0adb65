package supervisor

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// onSpareThread runs fn in a new goroutine locked to an OS thread that is not
// the process's main thread, and never unlocks it: fn may change the
// thread's credentials or capabilities, and the thread ends with the
// goroutine, so nothing else ever runs with them.
//
// Not the main thread: a goroutine that exits locked to it does not end it
// (the Go runtime wedges the main thread instead), and the kernel judges the
// process by that thread, the thread group leader: /proc/1/status and
// kill(2)'s permission check would show the job's uid for the supervisor
// for the rest of the run, so the job's processes could signal it.
func onSpareThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		// Hold the main thread while fn runs (so it runs elsewhere), then
		// give it back unchanged.
		done := make(chan struct{})
		onSpareThread(func() { defer close(done); fn() })
		<-done
		runtime.UnlockOSThread()
	}()
}
