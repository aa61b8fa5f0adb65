// Command stubborn is a worker image for the end-to-end deadline test: as the
// container's PID 1 it ignores SIGTERM, activates its broker by connecting to
// the broker socket and holding the connection, never prints a reply and
// never exits. Only SIGKILL ends it.
package main

import (
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin) }()
	var conns []net.Conn
	for {
		if len(conns) == 0 {
			if c, err := net.Dial("unix", "/run/broker/broker.sock"); err == nil {
				conns = append(conns, c)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}
