// Command sandbox-host is the roundtable-sandbox host daemon and its control
// commands. It stays thin: signals are taken before anything else (as
// containerd does), socket activation is read exactly once, and everything
// else lives in pkg/host and pkg/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"

	"github.com/roundtable-sandbox/sandbox/pkg/cli"
)

func main() {
	// Signals before init: a SIGTERM during startup cancels it cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	// Listeners() unsets LISTEN_*: call it once, here, and pass it down.
	ls, err := activation.Listeners()
	code := cli.Main(ctx, os.Args[1:], cli.Inputs{Listeners: ls, ListenersErr: err})
	stop()
	os.Exit(code)
}
