package host

// The sealed turn's guests, workspace hand-over and worker stderr are
// pkg/sealedturn's tests (guest_test.go there); here the host's listener.

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// flakyListener fails its first accepts the way a uid out of epoll watches
// does, then hands out real connections.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails []error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.fails) > 0 {
		err := l.fails[0]
		l.fails = l.fails[1:]
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", err)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func TestAcceptErrorsNeverStopTheHost(t *testing.T) {
	r := newRig(t, "", nil)
	sock := filepath.Join(r.cfg.RunRoot+"-api", "host.sock")
	must(t, os.MkdirAll(filepath.Dir(sock), 0o700))
	inner, err := net.Listen("unix", sock)
	must(t, err)
	// ENOSPC and ENOBUFS are not "temporary" to net/http: without the
	// steady listener the first one ends Serve, and Run shuts the host down.
	ln := &flakyListener{Listener: inner, fails: []error{syscall.ENOSPC, syscall.ENOBUFS, syscall.ENOSPC, syscall.EMFILE}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.h.Run(ctx, ln) }()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://host/v1/health")
	if err != nil {
		t.Fatalf("health after accept errors: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health after accept errors = %d, want 200", resp.StatusCode)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned after accept errors: %v", err)
	default:
	}
	if !r.h.accepting() {
		t.Errorf("the host stopped admitting turns after accept errors")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
