package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
	"github.com/roundtable-sandbox/sandbox/pkg/broker/hosttool"
	"github.com/roundtable-sandbox/sandbox/pkg/credential"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/safefetch"
)

// MaxHeaderBytes bounds a request's header block.
const MaxHeaderBytes = 16 << 10

// closeTimeout bounds closing the MCP sessions at the end.
const closeTimeout = 5 * time.Second

// Serve answers calls on ln until ctx ends or the policy deadline passes,
// whichever is first, then closes every connection (in-flight calls are cut:
// the turn is over) and the MCP sessions. It returns nil on such an end.
func (b *Broker) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithDeadline(ctx, b.pol.Deadline())
	defer cancel()
	l := b.pol.Limits
	request := time.Duration(l.RequestTimeoutMs) * time.Millisecond
	header := time.Duration(l.HeaderTimeoutMs) * time.Millisecond
	var protocols http.Protocols
	protocols.SetHTTP1(true) // no HTTP/2, no h2c
	srv := &http.Server{
		Handler:           b,
		ReadHeaderTimeout: header,
		ReadTimeout:       request,
		WriteTimeout:      request + 5*time.Second,
		IdleTimeout:       header,
		MaxHeaderBytes:    MaxHeaderBytes,
		Protocols:         &protocols,
		// "OPTIONS *" would otherwise get net/http's own 200.
		DisableGeneralOptionsHandler: true,
		// Every request's context carries ctx, so a call cut short can tell
		// the broker stopping from its caller leaving (interrupted).
		BaseContext: func(net.Listener) context.Context { return context.WithValue(ctx, serveKey{}, ctx) },
		// The peer's uid (SO_PEERCRED): a rich channel broker's control
		// route answers the host's connections only.
		ConnContext: b.connContext,
		ConnState:   b.connState,
		ErrorLog:    slog.NewLogLogger(b.log.Handler(), slog.LevelWarn),
	}
	srv.SetKeepAlivesEnabled(true)
	errc := make(chan error, 1)
	limited := LimitListener(ln, l.MaxConnections)
	if b.grants != nil {
		// The host's connections do not count: a guest holding every slot
		// must not keep a revoke from reaching the broker (grant.go).
		limited = limitListenerExempt(ln, l.MaxConnections, b.grants.isHost)
	}
	go func() { errc <- srv.Serve(limited) }()
	var err error
	select {
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			b.log.Info("turn deadline reached")
		}
	case err = <-errc:
	}
	// No handler starts from here on (enter), not even for a request a
	// connection had read before the close below.
	b.stopMu.Lock()
	b.stopping = true
	b.stopMu.Unlock()
	_ = srv.Close()
	if b.grants != nil {
		b.grants.stop()
	}
	// Closing the connections cancelled every call's context; wait (bounded)
	// for the handlers so an exec tool's process group is killed before the
	// broker exits.
	waited := make(chan struct{})
	go func() { b.active.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(closeTimeout):
		b.log.Warn("calls still running at shutdown")
	}
	if n := b.unread.Load(); n > 0 {
		b.log.Warn("requests refused unread after the refusal budget", "requests", n)
	}
	b.model.CloseIdleConnections()
	b.tools.CloseIdleConnections()
	b.closeMCP()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// connContext is each connection's context: its peer uid, and a session
// broker's grant slot (grant.go).
func (b *Broker) connContext(ctx context.Context, c net.Conn) context.Context {
	ctx = connPeer(ctx, c)
	if b.grants != nil {
		ctx = b.grants.connContext(ctx, c)
	}
	return ctx
}

// connState lets a session broker forget a closed connection.
func (b *Broker) connState(c net.Conn, st http.ConnState) {
	if b.grants != nil {
		b.grants.connState(c, st)
	}
}

// connPeer records the peer uid of a Unix socket connection (SO_PEERCRED:
// the kernel's word, not the client's).
func connPeer(ctx context.Context, c net.Conn) context.Context {
	if uid, ok := peerUID(c); ok {
		return envelope.WithPeerUID(ctx, uid)
	}
	return ctx
}

// peerUID is a Unix socket connection's peer uid (SO_PEERCRED).
func peerUID(c net.Conn) (int, bool) {
	for {
		switch cc := c.(type) {
		case *limitConn:
			c = cc.Conn
			continue
		case *net.UnixConn:
			raw, err := cc.SyscallConn()
			if err != nil {
				return 0, false
			}
			var cred *syscall.Ucred
			var cerr error
			if err := raw.Control(func(fd uintptr) {
				cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
			}); err != nil || cerr != nil || cred == nil {
				return 0, false
			}
			return int(cred.Uid), true
		}
		return 0, false
	}
}

// serveKey holds Serve's context in each request's context.
type serveKey struct{}

// interrupted names who ended a call that failed: the broker stopping (turn
// deadline or a stop), or the caller closing its connection, instead of
// blaming an upstream that was only cancelled. Any other failure is err.
func (b *Broker) interrupted(r *http.Request, err error) error {
	if r.Context().Err() == nil {
		if !b.now().Before(b.pol.Deadline()) && (errors.Is(err, envelope.ErrUpstreamTime) || errors.Is(err, hosttool.ErrTimeout)) {
			return refused("turn deadline reached mid-call", envelope.ErrTurnOver)
		}
		return err
	}
	if sc, ok := r.Context().Value(serveKey{}).(context.Context); ok && sc.Err() != nil {
		if errors.Is(sc.Err(), context.DeadlineExceeded) {
			return refused("turn deadline reached mid-call", envelope.ErrTurnOver)
		}
		return refused("broker stopping mid-call", envelope.ErrTurnOver)
	}
	return refused("client went away mid-call", envelope.ErrClientGone)
}

func (b *Broker) closeMCP() {
	if b.mcp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := b.mcp.Close(ctx); err != nil {
		b.log.Warn("closing MCP sessions failed", "reason", err.Error())
	}
}

// LimitListener accepts at most max open connections; a connection beyond
// that is closed at once instead of waiting.
func LimitListener(ln net.Listener, max int) net.Listener {
	return &limitListener{Listener: ln, max: int64(max)}
}

// limitListenerExempt is LimitListener, but a connection exempt reports
// true for is accepted without taking a slot.
func limitListenerExempt(ln net.Listener, max int, exempt func(net.Conn) bool) net.Listener {
	return &limitListener{Listener: ln, max: int64(max), exempt: exempt}
}

type limitListener struct {
	net.Listener
	max    int64
	open   atomic.Int64
	exempt func(net.Conn) bool
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.exempt != nil && l.exempt(c) {
			return c, nil
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.Close()
			continue
		}
		return &limitConn{Conn: c, release: sync.OnceFunc(func() { l.open.Add(-1) })}, nil
	}
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// RunOptions configures Run (the sandbox-broker serve command).
type RunOptions struct {
	TurnID         string
	PolicyDir      string // default layout.PolicyDir
	CredentialsDir string // $CREDENTIALS_DIRECTORY
	// CredentialPrefix starts every credential file name (layout.CredentialPrefix
	// under systemd's LoadCredential=sandbox:<dir>; "" for a plain directory).
	CredentialPrefix string
	// Listener is the socket-activated listener; when nil, ListenPath is
	// created as a Unix socket (development and tests).
	Listener   net.Listener
	ListenPath string
	// NewMCP builds the MCP upstream with the policy's bounds and the
	// broker's logger (for session lifecycle lines); nil refuses every MCP
	// call.
	NewMCP func(maxResponseBytes int64, timeout time.Duration, log *slog.Logger) MCPUpstream
	Logger *slog.Logger
	// Notify sends a systemd notification ("READY=1", "STOPPING=1").
	Notify func(state string)
}

// Run validates the turn id, loads that turn's policy and nothing else, opens
// the credentials directory, serves until the policy deadline or ctx ends,
// and closes the MCP sessions.
//
// A standby turn's broker starts before its turn exists: its policy file is
// then a placeholder (policy.Pending) with only an expiry. Run reports ready
// and waits for the first connection, which the worker opens only for its
// first request, and the worker makes none before its stdin, which the host
// writes only after the full policy. At that connection Run loads the policy
// (a placeholder still there is refused: the connection is closed, a line
// logged and Run fails with policy.ErrNotBound) and serves as for any turn,
// that connection first. No connection
// before the expiry: Run returns nil, having served nothing.
func Run(ctx context.Context, o RunOptions) error {
	if err := ids.ValidTurnID(o.TurnID); err != nil {
		return fmt.Errorf("broker: --turn: %w", err)
	}
	if o.PolicyDir == "" {
		o.PolicyDir = layout.PolicyDir
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The box's own addresses, watched from the start (a standby's too):
	// a failure (netlink refused; every public destination is then
	// refused) is logged once, now, in this broker's log.
	local := safefetch.SystemLocalAddrs(log)
	notify := o.Notify
	if notify == nil {
		notify = func(string) {}
	}
	path, err := layout.PolicyFile(o.PolicyDir, o.TurnID)
	if err != nil {
		return err
	}
	pol, pending, err := policy.Read(path)
	if err != nil {
		return err
	}
	if pending != nil {
		if pending.TurnID != o.TurnID {
			return fmt.Errorf("broker: policy names another turn: %w", policy.ErrInvalid)
		}
		if !time.Now().Before(pending.Expiry()) {
			return fmt.Errorf("broker: standby already expired: %w", envelope.ErrTurnOver)
		}
	} else if err := checkPolicy(pol, o.TurnID); err != nil {
		return err
	}
	creds, err := credential.OpenDir(o.CredentialsDir, o.CredentialPrefix)
	if err != nil {
		return err
	}
	ln := o.Listener
	if ln == nil {
		if o.ListenPath == "" {
			return errors.New("broker: no socket-activated listener and no --listen path")
		}
		ln, err = net.Listen("unix", o.ListenPath)
		if err != nil {
			return fmt.Errorf("broker: listen: %w", err)
		}
		if err := os.Chmod(o.ListenPath, 0o600); err != nil {
			ln.Close()
			return fmt.Errorf("broker: chmod socket: %w", err)
		}
	}
	defer ln.Close()
	if pending != nil {
		log.Info("standby broker waiting for its turn", "turn", o.TurnID,
			"expires", pending.Expiry().UTC().Format(time.RFC3339))
		notify("READY=1")
		first, err := firstConn(ctx, ln, pending.Expiry())
		if err != nil {
			return err
		}
		if first == nil {
			log.Info("standby broker ending with no turn bound (expired or stopped)", "turn", o.TurnID)
			notify("STOPPING=1")
			return nil
		}
		// Read, not Load: a placeholder still there is a connection
		// before the bind (refused as such), not a malformed policy.
		var still *policy.Pending
		if pol, still, err = policy.Read(path); err == nil && still != nil {
			first.Close()
			log.Warn("standby broker refused a connection: its turn is not bound yet (the policy file is still the placeholder)", "turn", o.TurnID)
			return fmt.Errorf("broker: first connection while the standby is not bound yet (refused, connection closed): %w", policy.ErrNotBound)
		}
		if err == nil {
			err = checkPolicy(pol, o.TurnID)
		}
		if err != nil {
			first.Close()
			return fmt.Errorf("broker: first connection before a valid policy was bound: %w", err)
		}
		ln = &firstListener{Listener: ln, first: first}
	}
	var up MCPUpstream
	if o.NewMCP != nil && len(pol.MCP) > 0 {
		up = o.NewMCP(pol.Limits.MaxResponseBytes, time.Duration(pol.Limits.UpstreamTimeoutMs)*time.Millisecond,
			log.With("turn", pol.TurnID))
	}
	cfg := Config{Policy: pol, Credentials: creds, MCP: up, Logger: log, LocalAddrs: local}
	if pol.Rich != nil || pol.Grants != nil {
		// The host wrote the policy file: its owner is the one peer the
		// control route accepts.
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("broker: policy owner: %w", err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("broker: policy owner unknown")
		}
		cfg.ControlUID = int(sys.Uid)
	}
	b, err := New(cfg)
	if err != nil {
		return err
	}
	log.Info("broker ready", "turn", pol.TurnID, "channel", pol.Identity.ChannelTag, "standby", pending != nil,
		"tools", len(pol.Tools), "mcp_servers", len(pol.MCP), "deadline", pol.Deadline().UTC().Format(time.RFC3339))
	if pending == nil {
		notify("READY=1")
	}
	err = b.Serve(ctx, ln)
	notify("STOPPING=1")
	log.Info("broker stopped", "turn", pol.TurnID, "calls", b.callCount())
	return err
}

// checkPolicy: the policy is this turn's and its deadline is ahead.
func checkPolicy(pol *policy.Policy, turnID string) error {
	if pol.TurnID != turnID {
		return fmt.Errorf("broker: policy names another turn: %w", policy.ErrInvalid)
	}
	if !time.Now().Before(pol.Deadline()) {
		return fmt.Errorf("broker: turn deadline already passed: %w", envelope.ErrTurnOver)
	}
	return nil
}

// firstConn waits for the first connection until expiry or ctx's end; it
// returns nil, nil when none came. The listener is closed on that path
// (Run is about to return).
func firstConn(ctx context.Context, ln net.Listener, expiry time.Time) (net.Conn, error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	got := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		got <- accepted{c, err}
	}()
	timer := time.NewTimer(time.Until(expiry))
	defer timer.Stop()
	select {
	case a := <-got:
		if a.err != nil {
			return nil, fmt.Errorf("broker: accept: %w", a.err)
		}
		return a.c, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	ln.Close()
	if a := <-got; a.err == nil {
		a.c.Close() // raced with the end: nothing is bound to serve it
	}
	return nil, nil
}

// firstListener hands out the connection firstConn took before the others.
type firstListener struct {
	net.Listener
	mu    sync.Mutex
	first net.Conn
}

func (l *firstListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.first
	l.first = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return l.Listener.Accept()
}

func (b *Broker) callCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}
