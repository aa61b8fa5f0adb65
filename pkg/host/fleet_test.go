package host

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
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
	reply, err := client.New(sock).RunTurn(context.Background(), "guild:1", apiwire.Speaker{ID: "s1"}, "hello")
	if err != nil || !reply.OK || reply.Text != "hello" {
		t.Fatalf("RunTurn = %+v, %v", reply, err)
	}
	if dialed.Load() != 0 || n.has("STATUS=joining the fleet") {
		t.Errorf("fleet dialed %d times with fleet.enabled false", dialed.Load())
	}
	if len(docker.Created) != 1 {
		t.Errorf("containers created here = %d, want 1", len(docker.Created))
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
	reply, err := client.New(sock).RunTurn(context.Background(), "guild:1", apiwire.Speaker{ID: "s1"}, "hello")
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
	if len(docker.Created) != 1 {
		t.Errorf("containers created = %d, want 1", len(docker.Created))
	}
}

// fleetRig is a host in fleet mode on cluster c as box name (one
// partition), its box not started yet (startBox).
func fleetRig(t *testing.T, c *fleettest.Cluster, name, extra string) (*rig, *fleet.Fleet) {
	t.Helper()
	f, err := fleet.Open(context.Background(), c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
	must(t, err)
	r := newRig(t, "standby:\n  enabled: false\nfleet:\n  enabled: true\n  box: "+name+"\n  partitions: 1\n  replicas: 1\n"+extra,
		func(o *Options) { o.Fleet = f })
	return r, f
}

// startBox starts r's box on f: r's host runs the turns it takes.
func startBox(t *testing.T, r *rig, f *fleet.Fleet) *fleet.Box {
	t.Helper()
	box, err := fleet.NewBox(f, fleet.BoxOptions{Name: r.cfg.Fleet.Box, Executor: r.h.fl, Logger: testLogger(t), AckWait: 2 * time.Second, OnEvent: r.h.fl.Event})
	must(t, err)
	must(t, box.Start(context.Background()))
	t.Cleanup(box.Stop)
	return box
}

var fleetClient = sandboxtest.FleetClient

// TestFleetModeChangeOnOneBoxIsWhatTheOwnerApplies: a mode changed
// through box a's API is written to the fleet; owner box b (whose state
// never heard of the channel) runs and then refuses turns by it; b's
// state follows the fleet, and the channels b knew are brought in.
func TestFleetModeChangeOnOneBoxIsWhatTheOwnerApplies(t *testing.T) {
	c := fleettest.Start(t, 1)
	ctx := context.Background()
	owner, f := fleetRig(t, c, "box-b", "")
	must(t, owner.h.state.SetMode("known-to-b", ModeOn))
	startBox(t, owner, f)
	follow, stop := context.WithCancel(ctx)
	defer stop()
	must(t, owner.h.fl.Follow(ctx, follow))
	if m, _, err := f.Mode(ctx, "known-to-b"); err != nil || m.Mode != fleet.ModeOn || m.By != "box-b" {
		t.Errorf("a channel box b knew, in the fleet = %+v, %v", m, err)
	}
	admitting, _ := fleetRig(t, c, "box-a", "")
	hc, _ := serve(t, admitting)
	if status, body := call(t, hc, "PUT", "/v1/channels/ch/mode", `{"mode":"on"}`); status != 200 {
		t.Fatalf("mode on through box a = %d %v", status, body)
	}
	if status, body := call(t, hc, "POST", "/v1/channels/ch/turns", `{"speaker":{"id":"s"},"text":"x"}`); status != 200 || body["text"] != "hello" {
		t.Fatalf("turn through box a = %d %v", status, body)
	}
	if n := len(owner.docker.Created); n != 1 || len(admitting.docker.Created) != 0 {
		t.Fatalf("containers on the owner %d, on the admitting box %d; want 1 and 0", n, len(admitting.docker.Created))
	}
	waitFor(t, "box b's state follows the fleet (on)", func() bool { return owner.h.state.Mode("ch") == ModeOn })
	if status, _ := call(t, hc, "PUT", "/v1/channels/ch/mode", `{"mode":"off"}`); status != 200 {
		t.Fatalf("mode off through box a = %d", status)
	}
	// Past box a's admission (a frontend on no box): the owner refuses.
	if _, err := fleetClient(t, c).RunTurn(ctx, "ch", apiwire.Speaker{ID: "s1"}, "hello"); !errors.Is(err, client.ErrModeOff) {
		t.Fatalf("turn after box a turned the channel off = %v, want 409", err)
	}
	if n := len(owner.docker.Created); n != 1 {
		t.Errorf("the owner ran %d turns, want 1", n)
	}
	waitFor(t, "box b's state follows the fleet (off)", func() bool { return owner.h.state.Mode("ch") == ModeOff })
	if status, body := call(t, hc, "POST", "/v1/channels/ch/turns", `{"speaker":{"id":"s"},"text":"x"}`); status != 409 {
		t.Errorf("turn through box a once off = %d %v, want 409", status, body)
	}
}

// watchPublished returns each turn published on partition 0 once, by its
// id: a publish whose ack was lost is retried under the same id
// (fleet.Ask), which the stream stores once but a core subscriber sees
// again. The subscription is known to the server before it returns, so
// no publish made after it is missed.
func watchPublished(t *testing.T, c *fleettest.Cluster) <-chan string {
	t.Helper()
	nc := c.Connect("watcher")
	ids := make(chan string, 8)
	seen := map[string]bool{} // the handler runs on one goroutine
	sub, err := nc.Subscribe(fleet.TurnSubject(0), func(m *nats.Msg) {
		var turn fleet.Turn
		if json.Unmarshal(m.Data, &turn) != nil || seen[turn.ID] {
			return
		}
		seen[turn.ID] = true
		ids <- turn.ID
	})
	must(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	must(t, nc.Flush())
	return ids
}

// TestFleetQueueFull429: in fleet mode the box a frontend talks to bounds
// the channel's turns before publishing, as for a local turn: with
// queue.depth 1 a second turn waits behind the published one, a third is
// a 429 and never published.
func TestFleetQueueFull429(t *testing.T) {
	c := fleettest.Start(t, 1)
	r, f := fleetRig(t, c, "box-a", "queue:\n  depth: 1\n")
	startBox(t, r, f)
	must(t, r.h.state.SetMode("ch", ModeOn))
	_, err := f.SetMode(context.Background(), "ch", fleet.ModeOn, "", "admin")
	must(t, err)
	// started closes on the first run: a turn delivered again (its ack
	// wait expired on a loaded machine) runs again, and a signal sent per
	// run would block that run once nobody reads it.
	release, started := make(chan struct{}), make(chan struct{})
	var startOnce sync.Once
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		startOnce.Do(func() { close(started) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return okRun(ctx, spec, stdin)
	}
	queued := make(chan string, 8)
	r.h.fl.OnQueued(func(ch string) { queued <- ch })
	published := watchPublished(t, c)
	hc, _ := serve(t, r)
	// After serve: a failed check still lets the running turn end before
	// the host's shutdown waits on it.
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	body := `{"speaker":{"id":"s"},"text":"x"}`
	first, second := make(chan int, 1), make(chan int, 1)
	go func() { first <- post(hc, "/v1/channels/ch/turns", body) }()
	<-started
	<-published
	go func() { second <- post(hc, "/v1/channels/ch/turns", body) }()
	select {
	case <-queued:
	case <-published:
		t.Fatal("a second turn was published while the first ran: this box did not queue it")
	}
	third := make(chan *http.Response, 1)
	go func() {
		resp, err := hc.Post("http://host/v1/channels/ch/turns", "application/json", strings.NewReader(body))
		if err != nil {
			resp = &http.Response{StatusCode: -1}
		} else {
			resp.Body.Close()
		}
		third <- resp
	}()
	select {
	case resp := <-third:
		if resp.StatusCode != 429 {
			t.Errorf("third turn = %d, want 429", resp.StatusCode)
		}
		// Never published: no turn id, and no empty header standing for one.
		if got := resp.Header.Values("X-Sandbox-Turn"); len(got) != 0 {
			t.Errorf("429's X-Sandbox-Turn = %q, want no header", got)
		}
	case <-published:
		t.Error("a turn beyond the channel's queue was published")
	}
	releaseOnce()
	if s1, s2 := <-first, <-second; s1 != 200 || s2 != 200 {
		t.Errorf("first and second turns = %d, %d; want 200 both", s1, s2)
	}
	if n := counter(t, r, "sandbox_fleet_turns_published_total", nil); n != 2 {
		t.Errorf("turns published = %v, want 2", n)
	}
}
