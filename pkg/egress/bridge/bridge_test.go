package bridge

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// unixEcho serves an echo on a Unix socket and counts connections.
func unixEcho(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return path, &n
}

func startBridge(t *testing.T, sock string, max int) (string, context.CancelFunc, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b := &Bridge{Listener: ln, Dial: UnixDial(sock), MaxConnections: max}
	go func() { done <- b.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("bridge did not stop")
		}
	})
	return ln.Addr().String(), cancel, done
}

// TestBridgeRelaysBytes: what the client writes reaches the socket and the
// socket's answer comes back, byte for byte (every byte value included).
func TestBridgeRelaysBytes(t *testing.T) {
	sock, _ := unixEcho(t)
	addr, _, _ := startBridge(t, sock, 4)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, 300_000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != string(msg) {
		t.Errorf("relayed %d bytes (%v), want the same %d", len(got), err, len(msg))
	}
}

// TestBridgeConnectionBound: beyond MaxConnections a connection is closed
// at once and never reaches the socket; a freed slot is usable again.
func TestBridgeConnectionBound(t *testing.T) {
	sock, seen := unixEcho(t)
	addr, _, _ := startBridge(t, sock, 2)
	var open []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "x")
		io.ReadFull(c, make([]byte, 1))
		open = append(open, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(extra, "y")
	if n, err := extra.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("third connection read %d bytes, %v; want it closed", n, err)
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("socket saw %d connections, want 2", n)
	}
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, "z")
		n, _ := io.ReadFull(c, make([]byte, 1))
		c.Close()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a freed slot was never reused")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBridgeStops: ending ctx closes the listener and live relays.
func TestBridgeStops(t *testing.T) {
	sock, _ := unixEcho(t)
	addr, cancel, done := startBridge(t, sock, 2)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "x")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.ReadFull(c, make([]byte, 1))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil on ctx end", err)
		}
		done <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("bridge did not stop")
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a live relay survived the stop")
	}
}
