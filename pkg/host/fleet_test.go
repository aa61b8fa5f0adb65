package host

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// serveDaemon runs d until the test ends and waits for READY=1.
func serveDaemon(t *testing.T, d *Daemon, n *notes) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	waitFor(t, "READY=1", func() bool { return n.has("READY=1") })
}

// TestFleetDisabledStartsNothing: with fleet.enabled false (the default)
// the daemon never dials a fleet, the host has none, and a turn runs here.
func TestFleetDisabledStartsNothing(t *testing.T) {
	d, docker, _, n, sock := daemonRig(t, "initialChannels: [\"guild:1\"]\n")
	var dialed atomic.Int32
	d.ConnectFleet = func(context.Context, config.Fleet, *slog.Logger) (*nats.Conn, error) {
		dialed.Add(1)
		return nil, errors.New("must not be called")
	}
	serveDaemon(t, d, n)
	reply, err := client.New(sock).RunTurn(context.Background(), "guild:1", client.Speaker{ID: "s1"}, "hello")
	if err != nil || !reply.OK || reply.Text != "hello" {
		t.Fatalf("RunTurn = %+v, %v", reply, err)
	}
	if dialed.Load() != 0 || n.has("STATUS=joining the fleet") {
		t.Errorf("fleet dialed %d times with fleet.enabled false", dialed.Load())
	}
	if len(docker.created) != 1 {
		t.Errorf("containers created here = %d, want 1", len(docker.created))
	}
}

// TestFleetModeAnswersFromTheFleet: in fleet mode a frontend on host.sock
// gets its reply as before, and that reply is the fleet's committed one
// (the turn went through the stream and this box's partition).
func TestFleetModeAnswersFromTheFleet(t *testing.T) {
	c := fleettest.Start(t, 1)
	d, docker, _, n, sock := daemonRig(t, "initialChannels: [\"guild:1\"]\nfleet:\n  enabled: true\n  box: box-a\n  partitions: 2\n  replicas: 1\n")
	d.ConnectFleet = func(context.Context, config.Fleet, *slog.Logger) (*nats.Conn, error) { return c.Connect("box-a"), nil }
	serveDaemon(t, d, n)
	reply, err := client.New(sock).RunTurn(context.Background(), "guild:1", client.Speaker{ID: "s1"}, "hello")
	if err != nil || !reply.OK || reply.Text != "hello" {
		t.Fatalf("RunTurn = %+v, %v", reply, err)
	}
	f, err := fleet.Bind(context.Background(), c.Connect("observer"), 2)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := f.Reply(context.Background(), reply.TurnID)
	if err != nil || committed.Box != "box-a" || committed.Text != "hello" {
		t.Fatalf("fleet reply of %s = %+v, %v; want box-a's", reply.TurnID, committed, err)
	}
	if len(docker.created) != 1 {
		t.Errorf("containers created = %d, want 1", len(docker.created))
	}
}

// TestFleetTurnRunsWhereTheChannelIsUnknown: the owner box runs a turn the
// admitting box let in even if the channel is not on in its own state
// (channel state is each box's until it moves to the fleet), and refuses
// one whose channel is rich here, with the host API's 409.
func TestFleetTurnRunsWhereTheChannelIsUnknown(t *testing.T) {
	c := fleettest.Start(t, 1)
	ctx := context.Background()
	r := newRig(t, "", nil)
	must(t, r.h.state.SetRich("rich:1", "p"))
	f, err := fleet.Open(ctx, c.Connect("box-b"), fleet.Layout{Partitions: 1, Replicas: 1})
	must(t, err)
	box, err := fleet.NewBox(f, fleet.BoxOptions{Name: "box-b", Executor: fleetExecutor{r.h}, Logger: testLogger(t)})
	must(t, err)
	must(t, box.Start(ctx))
	defer box.Stop()
	fc, err := client.DialFleet(ctx, client.FleetOptions{Conn: c.Connect("frontend"), Partitions: 1})
	must(t, err)
	reply, err := fc.RunTurn(ctx, "guild:unknown-here", client.Speaker{ID: "s1"}, "hello")
	if err != nil || !reply.OK || reply.Text != "hello" {
		t.Fatalf("turn on a channel unknown to the owner box = %+v, %v", reply, err)
	}
	if _, err := fc.RunTurn(ctx, "rich:1", client.Speaker{ID: "s1"}, "hello"); !errors.Is(err, client.ErrModeOff) {
		t.Fatalf("sealed turn on a channel rich on the owner box = %v, want 409", err)
	}
}
