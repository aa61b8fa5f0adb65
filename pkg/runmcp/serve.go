package runmcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPPath is where the Streamable HTTP endpoint answers.
const HTTPPath = "/mcp"

// Bounds of the HTTP server. Sessions idle for SessionIdle are closed (a
// tool call in progress keeps its session busy, not idle).
const (
	SessionIdle       = 30 * time.Minute
	readHeaderTimeout = 10 * time.Second
	shutdownTimeout   = 10 * time.Second
	maxHeaderBytes    = 64 << 10
	maxBodyBytes      = 2 << 20
	// SocketMode is the Unix socket's mode: the owner and its group.
	SocketMode fs.FileMode = 0o660
)

// Listener is where ServeHTTP accepts connections, with its cleanup.
type Listener struct {
	net.Listener
	// Where is what to tell an operator: the socket path or http://addr/mcp.
	Where string
	path  string // the socket to remove, "" for TCP
}

// TCP reports a loopback TCP listener, which every local user can reach.
func (l *Listener) TCP() bool { return l.path == "" }

// CheckTCPRole decides whether a TCP listener may serve, from the role the
// host gives this server's user (the health answer's role): only "client".
// Every local user can reach a loopback port and would act as that user,
// and so answer its own network approval question; an admin's server
// would then grant network on the host's admin role to whoever connects.
// An admin, a user without a role, or a host that does not say is refused.
func CheckTCPRole(role string) error {
	switch role {
	case "client":
		return nil
	case "admin":
		return errors.New("--http on a TCP port is refused for a user with the host's admin role: every local user can reach the port and would answer the network approval question as an admin; serve on a Unix socket (--http unix:/path) or stdio")
	case "none":
		return errors.New("--http: this user is not an API client of the host (access.clientUids/clientGids)")
	}
	return errors.New("--http on a TCP port needs the host to name this user's role (a host older than this command does not); serve on a Unix socket (--http unix:/path) or stdio")
}

// Close stops listening and removes the socket file.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	if l.path != "" {
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = rerr
		}
	}
	return err
}

// Listen opens the --http address: "unix:/abs/path" (a socket of mode
// 0660, created in a private directory and renamed into place so it is
// never reachable with a wider mode; a stale socket nobody answers on is
// replaced, anything else at the path is refused) or "IP:PORT" with a
// loopback IP (anything else is refused: expose it with a proxy of your
// own).
func Listen(spec string) (*Listener, error) {
	if p, ok := strings.CutPrefix(spec, "unix:"); ok {
		return listenUnix(p)
	}
	ap, err := netip.ParseAddrPort(spec)
	if err != nil {
		return nil, fmt.Errorf("--http %q: want unix:/path or a loopback IP:PORT such as 127.0.0.1:8765", spec)
	}
	if !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("--http %q: not a loopback address; this server listens on loopback or a Unix socket only (put a proxy of your own in front to expose it)", spec)
	}
	ln, err := net.Listen("tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("--http %q: %w", spec, err)
	}
	return &Listener{Listener: ln, Where: "http://" + ln.Addr().String() + HTTPPath}, nil
}

func listenUnix(p string) (*Listener, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("--http unix:%s: the socket path must be absolute", p)
	}
	p = filepath.Clean(p)
	if fi, err := os.Lstat(p); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("--http unix:%s: exists and is not a socket; refusing to replace it", p)
		}
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("--http unix:%s: another server answers on this socket", p)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--http unix:%s: %w", p, err)
	}
	dir, err := os.MkdirTemp(filepath.Dir(p), ".sandbox-mcp-")
	if err != nil {
		return nil, fmt.Errorf("--http unix:%s: %w", p, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("--http unix:%s: %w", p, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // Close removes p itself
	if err := os.Chmod(tmp, SocketMode); err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("--http unix:%s: %w", p, err)
	}
	return &Listener{Listener: ln, Where: p, path: p}, nil
}

// HTTPHandler is srv's Streamable HTTP endpoint at HTTPPath (stateful
// sessions: elicitation needs them), with the SDK's DNS-rebinding check
// for loopback and cross-origin browser requests refused.
func HTTPHandler(srv *mcp.Server, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger:              quieter(logger),
		SessionTimeout:      SessionIdle,
		MaxRequestBodyBytes: maxBodyBytes,
	})
	mux := http.NewServeMux()
	mux.Handle(HTTPPath, http.NewCrossOriginProtection().Handler(h))
	return mux
}

// ServeHTTP serves srv on ln until ctx ends, then shuts down (in-flight
// calls end with Options.Context, which should be ctx or end with it) and
// closes ln.
func ServeHTTP(ctx context.Context, srv *mcp.Server, ln *Listener, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hs := &http.Server{
		Handler:           HTTPHandler(srv, logger),
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		ln.Close()
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		hs.Close()
	}
	ln.Close()
	<-done
	return nil
}

// ServeStdio serves one session on in/out (the process's stdin and stdout:
// nothing else may write to out) until the client closes in or ctx ends.
// The client closing in cancels the calls in flight, hence their runs.
func ServeStdio(ctx context.Context, srv *mcp.Server, in io.Reader, out io.Writer) error {
	rc, ok := in.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(in)
	}
	err := srv.Run(ctx, &mcp.IOTransport{Reader: rc, Writer: nopCloser{out}})
	if ctx.Err() != nil || err == nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil
	}
	return err
}

// nopCloser keeps the session's end from closing stdout.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
