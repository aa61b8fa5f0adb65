package sessionsup

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestForkerKeepsItsThreads: a kind's execs run on kept threads, a new
// one only when none is idle and never more than the bound; a job that
// finds every thread busy at the bound waits for one without blocking
// its caller (the request loop).
func TestForkerKeepsItsThreads(t *testing.T) {
	f := newForker(false, nil, 1)
	defer f.close()
	tids := make(chan int, 3)
	release := make(chan struct{})
	f.run(func(err error) {
		if err != nil {
			t.Error(err)
		}
		tids <- unix.Gettid()
		<-release
	})
	first := <-tids
	// The only thread is busy and at the bound: run returns at once and
	// the job waits for it.
	f.run(func(error) { tids <- unix.Gettid() })
	select {
	case tid := <-tids:
		t.Fatalf("a job ran on thread %d while the only one was busy", tid)
	default:
	}
	close(release)
	if second := <-tids; second != first {
		t.Errorf("the waiting job ran on thread %d, want the kept %d", second, first)
	}
	f.run(func(error) { tids <- unix.Gettid() })
	if third := <-tids; third != first {
		t.Errorf("a later job ran on thread %d, want the kept %d", third, first)
	}
	f.mu.Lock()
	n := f.threads
	f.mu.Unlock()
	if n != 1 {
		t.Errorf("%d threads, want 1", n)
	}
	if first == unix.Getpid() {
		t.Errorf("a job ran on the main thread")
	}
}
