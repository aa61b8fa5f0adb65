// Command sandbox-worker is the per-turn agent inside the sealed container:
// one turn JSON on stdin, one reply JSON on stdout, JSON logs on stderr. Its
// only way out is the broker's Unix socket; see package worker.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/version"
	"github.com/roundtable-sandbox/sandbox/pkg/worker"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "sandbox-worker", "version", version.Version)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := worker.Main(ctx, os.Stdin, os.Stdout, worker.Options{
		Broker:    worker.NewUnixBroker(protocol.BrokerSocketPath, 0),
		Workspace: protocol.WorkspacePath,
		Logger:    log,
	})
	stop()
	os.Exit(code)
}
