package supervisor

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// onThrowawayThread runs f on an OS thread of its own that ends when f
// returns, so that f may change that thread's kernel state (capabilities,
// no_new_privs) without the change reaching any other goroutine.
//
// The thread is never the process's main thread: Go does not end a main
// thread whose goroutine exits locked but parks it for good, with what f
// left on it, and the main thread is the thread-group leader, whose state
// /proc shows as the process's (and whose credentials the kernel checks
// when another process signals it).
func onThrowawayThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: hold it (locked to this goroutine, it
			// runs nothing else) while f runs on another thread, then
			// give it back untouched.
			onThrowawayThread(f)
			runtime.UnlockOSThread()
			return
		}
		// Never unlocked: the thread ends with this goroutine.
		f()
	}()
	<-done
}
