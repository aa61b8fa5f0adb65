package host

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// Handler is the API (exported for tests that want httptest).
func (h *Host) Handler() http.Handler { return http.HandlerFunc(h.route) }

// Run serves the API on ln until ctx ends, then stops admitting (503),
// cancels running and waiting turns, waits for their cleanup, sends
// STOPPING=1 and closes the server.
func (h *Host) Run(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           h.Handler(),
		ConnContext:       h.connContext,
		ReadHeaderTimeout: 10 * time.Second,
		// No ReadTimeout: a turn's request lasts minutes; decodeBody
		// bounds the body read with its own deadline instead.
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
	}
	// Standbys (a code run's) are made once the host serves: after its
	// startup reap.
	for _, k := range h.kinds {
		if w, ok := k.(kind.Warmer); ok {
			w.WarmUp()
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(&steadyListener{Listener: ln, log: h.log, closed: make(chan struct{})}) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
		h.log.Error("API server stopped", "err", serveErr)
	}
	// Leave time under the unit's TimeoutStopSec=60s for the HTTP shutdown
	// and the exit: retries still running after this are left to the reaper.
	cctx, ccancel := context.WithTimeout(context.Background(), ShutdownCleanupTimeout)
	h.ShutdownContext(cctx)
	ccancel()
	if h.opts.Notify != nil {
		h.opts.Notify("STOPPING=1")
	}
	sctx, cancel := context.WithTimeout(context.Background(), h.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// steadyListener never lets an accept error end the server: a process of
// the host's uid that cannot register one more socket (ENOSPC once the uid's
// epoll watches are used up, EMFILE, ENFILE, ENOBUFS) is a reason to log,
// back off (5 ms doubling to 1 s) and try again, not to stop serving and
// cancel every channel's turn. Only closing the listener ends Accept.
type steadyListener struct {
	net.Listener
	log       *slog.Logger
	closeOnce sync.Once
	closed    chan struct{}
}

// Accept retries until a connection arrives or the listener is closed.
func (l *steadyListener) Accept() (net.Conn, error) {
	delay := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return c, nil
		}
		select {
		case <-l.closed:
			return nil, err
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		l.log.Warn("API accept failed; retrying (the host keeps serving)", "err", err, "retry_in_ms", delay.Milliseconds())
		t := time.NewTimer(delay)
		select {
		case <-l.closed:
			t.Stop()
			return nil, net.ErrClosed
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// Close ends a pending backoff at once.
func (l *steadyListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// ShutdownCleanupTimeout bounds how long Run's shutdown lets container
// removal retries go on.
const ShutdownCleanupTimeout = 40 * time.Second

// Shutdown stops admitting, cancels every turn and waits until each has
// finished its cleanup.
func (h *Host) Shutdown() { h.ShutdownContext(context.Background()) }

// ShutdownContext is Shutdown that, once ctx ends, stops container removal
// retries (each turn's cleanup then ends within one bounded operation,
// leaving what it could not remove to sandbox-reaper) and still waits for
// every turn's cleanup to finish.
func (h *Host) ShutdownContext(ctx context.Context) {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	h.queue.Close()
	h.starts.Close()
	h.stopAll(ErrShuttingDown)
	h.await(ctx, h.turns.Wait)
	// After the turns, each kind lets go of what outlives a turn (rich
	// sessions, then standbys: no turn takes either any more).
	for _, k := range h.kinds {
		h.await(ctx, k.Stop)
	}
}

// await runs fn to its end; once ctx ends, container removal retries stop,
// so fn ends within one bounded operation of each cleanup it waits for.
func (h *Host) await(ctx context.Context, fn func()) {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		h.life.Abandon(context.Cause(ctx))
		<-done
	}
}

// connContext attaches the peer to every request of the connection.
func (h *Host) connContext(ctx context.Context, c net.Conn) context.Context {
	p := PeerOf(c)
	if p.Known {
		p.Groups = h.opts.PeerGroups(p.UID)
	}
	return context.WithValue(ctx, peerKey{}, p)
}
