package fleetjobs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// testAckWait keeps failover short; pcgroups advises at least 2 s.
const testAckWait = 2 * time.Second

// quiet drops the workers' log lines (FLEET_TEST_LOG shows them).
var quiet = func() *slog.Logger {
	if os.Getenv("FLEET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// rig is a cluster and the boxes' queues a test runs on it.
type rig struct {
	t      *testing.T
	c      *fleettest.Cluster
	layout fleet.Layout
}

func newRig(t *testing.T, servers, partitions int) *rig {
	t.Helper()
	return &rig{t: t, c: fleettest.Start(t, servers), layout: fleet.Layout{Partitions: partitions, Replicas: min(servers, 3)}}
}

func (r *rig) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	r.t.Cleanup(cancel)
	return ctx
}

// fleet opens a connection of its own, the fleet on it (which makes the
// jobs' resources) and the jobs queue over that fleet.
func (r *rig) fleet(name string) (*Queue, *nats.Conn) {
	r.t.Helper()
	nc := r.c.Connect(name)
	f, err := fleet.Open(r.ctx(), nc, r.layout)
	if err != nil {
		r.t.Fatalf("open fleet for %s: %v", name, err)
	}
	return New(f), nc
}
