// Package bridge is the in-container end of the egress route: a listener on
// the container's loopback whose every connection is relayed, byte for
// byte, to the broker's Unix socket, so HTTP_PROXY and HTTPS_PROXY work in a
// container that has no network interface. It parses nothing, resolves
// nothing and dials nothing but the socket; it imports only the standard
// library, so the worker binary that carries it stays small.
package bridge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Defaults inside a container: HTTP_PROXY and HTTPS_PROXY point at
// http://127.0.0.1:Port.
const (
	Port           = 3128
	MaxConnections = 32
	// bridgeDialTimeout bounds reaching the broker socket.
	bridgeDialTimeout = 5 * time.Second
)

// Bridge accepts TCP connections inside a container (on its loopback) and
// forwards each one, byte for byte, over a new connection to the broker's
// Unix socket: it parses nothing, resolves nothing and dials nothing but
// Dial. At most MaxConnections are relayed at once; one more is closed at
// once.
type Bridge struct {
	Listener net.Listener
	// Dial opens one connection to the broker socket.
	Dial           func(ctx context.Context) (net.Conn, error)
	MaxConnections int
	Log            *slog.Logger
}

// UnixDial returns a Bridge.Dial for the socket at path.
func UnixDial(path string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// Serve relays until ctx ends or the listener fails, then closes the
// listener and every relayed connection and waits for them.
func (b *Bridge) Serve(ctx context.Context) error {
	log := b.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	max := b.MaxConnections
	if max <= 0 {
		max = MaxConnections
	}
	slots := make(chan struct{}, max)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = b.Listener.Close() })
	defer stop()
	var err error
	for {
		var c net.Conn
		c, err = b.Listener.Accept()
		if err != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		default:
			_ = c.Close() // over the bound: refused at once, never queued
			log.Warn("bridge connection refused: limit reached", "max", max)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			b.relay(ctx, c, log)
		}()
	}
	cancel()
	wg.Wait()
	if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (b *Bridge) relay(ctx context.Context, c net.Conn, log *slog.Logger) {
	defer c.Close()
	dctx, cancel := context.WithTimeout(ctx, bridgeDialTimeout)
	up, err := b.Dial(dctx)
	cancel()
	if err != nil {
		log.Warn("bridge: broker socket unreachable", "reason", err.Error())
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close(); _ = up.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c)
		closeWrite(up)
	}()
	// The broker's side ending ends the exchange: a client that never
	// closes its side does not hold a slot.
	_, _ = io.Copy(c, up)
	_ = c.Close()
	_ = up.Close()
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
