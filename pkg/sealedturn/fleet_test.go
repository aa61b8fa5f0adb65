package sealedturn_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetside"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// Moved from pkg/host (fleet_test.go): a sealed channel's workspace moving
// between boxes, and the owner box running under the fleet's mode. Each box is the sealed turn over its own kit, its fleet
// side's executor running a taken turn on the kind as the host runs an
// admitted one (rig.run): the host's own part of a fleet turn (its
// admission, its answers, the daemon's fleet start) stays in pkg/host.

// fleetHost is a box's fleet side's Host: the kit's slots and the kind.
type fleetHost struct{ r *rig }

func (h fleetHost) Accepting() bool { return h.r.kit.Host.Accepting() }

func (h fleetHost) Slot(ctx context.Context, channel string) (func(), error) {
	return h.r.kit.Host.Slot(ctx, channel)
}

func (h fleetHost) Run(ctx context.Context, t fleet.Turn) (bool, string, error) {
	reply, _, err := h.r.run(ctx, turnIn{Channel: t.Channel, SpeakerID: t.Speaker.ID, SpeakerName: t.Speaker.Name, PrincipalID: t.Speaker.PrincipalID, Text: t.Text})
	if err != nil {
		return false, "", err
	}
	return reply.OK, reply.Text, nil
}

// fleetBox is a rig in fleet mode on cluster c as box name (one
// partition) and its fleet side, its box not started yet (startBox).
type fleetBox struct {
	*rig
	side *fleetside.Side
}

func fleetRig(t *testing.T, c *fleettest.Cluster, name string) (*fleetBox, *fleet.Fleet) {
	t.Helper()
	f, err := fleet.Open(context.Background(), c.Connect(name), fleet.Layout{Partitions: 1, Replicas: 1})
	must(t, err)
	r := newColdRig(t, "standby:\n  enabled: false\nfleet:\n  enabled: true\n  box: "+name+"\n  partitions: 1\n  replicas: 1\n",
		sandboxtest.KitOptions{Fleet: f})
	side := fleetside.New(fleetside.Options{Fleet: f, Host: fleetHost{r}, Workspaces: r.k, Config: r.kit.Cfg, Closed: sandbox.ErrShuttingDown,
		State: r.kit.Host.State, ChannelMode: r.k.ChannelMode, Registry: r.kit.Registry, Logger: r.kit.Deps.Logger, Now: time.Now, NewTurnID: ids.NewTurnID})
	return &fleetBox{rig: r, side: side}, f
}

// startBox starts b's box on f: b's kind runs the turns it takes.
func startBox(t *testing.T, b *fleetBox, f *fleet.Fleet) *fleet.Box {
	t.Helper()
	box, err := fleet.NewBox(f, fleet.BoxOptions{Name: b.kit.Cfg.Fleet.Box, Executor: b.side, Logger: b.kit.Deps.Logger, AckWait: 2 * time.Second, OnEvent: b.side.Event})
	must(t, err)
	must(t, box.Start(context.Background()))
	t.Cleanup(box.Stop)
	return box
}

var fleetClient = sandboxtest.FleetClient

// workspaceRun is a worker that appends the turn's text to history.txt
// in its workspace and answers with the whole history.
func workspaceRun(ctx context.Context, spec sandbox.ContainerSpec, stdin []byte) (sandbox.RunResult, error) {
	var turn protocol.Turn
	if err := json.Unmarshal(stdin, &turn); err != nil {
		return sandbox.RunResult{}, err
	}
	p := filepath.Join(spec.WorkspaceDir, "history.txt")
	old, _ := os.ReadFile(p)
	hist := string(old) + turn.Text + "\n"
	if err := os.WriteFile(p, []byte(hist), 0o600); err != nil {
		return sandbox.RunResult{}, err
	}
	out, _ := json.Marshal(protocol.Reply{OK: true, Text: hist})
	return sandbox.RunResult{Stdout: append(out, '\n')}, nil
}

// TestFleetWorkspaceMovesToAnotherBox: a channel's workspace written by
// its turn on box a is restored on box b once a is gone (b's stale copy
// replaced), b's next turn needs no restore, and a hostile snapshot is
// refused on box c leaving its copy as it was.
func TestFleetWorkspaceMovesToAnotherBox(t *testing.T) {
	c := fleettest.Start(t, 1)
	ctx := context.Background()
	a, fa := fleetRig(t, c, "box-a")
	b, fb := fleetRig(t, c, "box-b")
	for _, r := range []*fleetBox{a, b} {
		r.docker.RunFn = workspaceRun
	}
	_, err := fa.SetMode(ctx, "ch", fleet.ModeOn, "", "admin")
	must(t, err)
	wsB, err := layout.WorkspaceDir(b.kit.Cfg.WorkspaceRoot, "ch")
	must(t, err)
	must(t, os.MkdirAll(wsB, 0o700))
	must(t, os.WriteFile(filepath.Join(wsB, "stale.txt"), []byte("b's own old copy"), 0o600))
	boxA := startBox(t, a, fa)
	fc := fleetClient(t, c)
	if reply, err := fc.RunTurn(ctx, "ch", apiwire.Speaker{ID: "s1"}, "one"); err != nil || reply.Text != "one\n" {
		t.Fatalf("turn on box a = %+v, %v", reply, err)
	}
	boxA.Kill()
	boxB := startBox(t, b, fb)
	for _, tc := range []struct{ text, want string }{{"two", "one\ntwo\n"}, {"three", "one\ntwo\nthree\n"}} {
		if reply, err := fc.RunTurn(ctx, "ch", apiwire.Speaker{ID: "s1"}, tc.text); err != nil || reply.Text != tc.want {
			t.Fatalf("turn %s on box b = %+v, %v; want %q", tc.text, reply, err, tc.want)
		}
	}
	if got, err := os.ReadFile(filepath.Join(wsB, "history.txt")); err != nil || string(got) != "one\ntwo\nthree\n" {
		t.Errorf("box b's workspace history = %q, %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(wsB, "stale.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("box b's stale copy survived the restore: %v", err)
	}
	if n := counter(t, b.rig, "sandbox_fleet_workspace_restores_total", map[string]string{"result": "ok"}); n != 1 {
		t.Errorf("box b restored %v times, want 1 (its second turn ran on its own copy)", n)
	}

	// A box with write rights replaces the committed snapshot with one
	// whose path climbs out of the workspace.
	st, _, err := fb.Channel(ctx, "ch")
	must(t, err)
	js, err := jetstream.New(c.Connect("hostile"))
	must(t, err)
	hostile := append([]byte("RTSBWS1\nf\x01\x80\x00\x09../escape"), 0, 0, 0, 0, 0, 0, 0, 1, 'x', 'e')
	if len(st.WorkspaceData) > 0 {
		// A small snapshot is committed inside the channel's state
		// (docs/fleet.md, *Workspaces*): the hostile box rewrites that.
		kv, err := js.KeyValue(ctx, fleet.ChannelsBucket)
		must(t, err)
		st.WorkspaceData = hostile
		data, err := json.Marshal(st)
		must(t, err)
		sum := sha256.Sum256([]byte("ch"))
		_, err = kv.Put(ctx, "c."+hex.EncodeToString(sum[:16]), data)
		must(t, err)
	} else {
		objects, err := js.ObjectStore(ctx, fleet.WorkspaceBucket)
		must(t, err)
		_, err = objects.PutBytes(ctx, st.Workspace, hostile)
		must(t, err)
	}
	cr, fcr := fleetRig(t, c, "box-c")
	cr.docker.RunFn = workspaceRun
	wsC, err := layout.WorkspaceDir(cr.kit.Cfg.WorkspaceRoot, "ch")
	must(t, err)
	must(t, os.MkdirAll(wsC, 0o700))
	must(t, os.WriteFile(filepath.Join(wsC, "history.txt"), []byte("c's copy\n"), 0o600))
	boxB.Kill()
	startBox(t, cr, fcr)
	if _, err := fc.RunTurn(ctx, "ch", apiwire.Speaker{ID: "s1"}, "four"); err == nil {
		t.Fatal("a turn on a hostile snapshot succeeded")
	}
	if got, _ := os.ReadFile(filepath.Join(wsC, "history.txt")); string(got) != "c's copy\n" {
		t.Errorf("box c's workspace after a refused snapshot = %q, want it unchanged", got)
	}
	if _, err := os.Lstat(filepath.Join(cr.kit.Cfg.WorkspaceRoot, "escape")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the hostile snapshot wrote outside the workspace: %v", err)
	}
	if len(cr.docker.Created) != 0 {
		t.Errorf("box c ran the turn on a refused snapshot")
	}
}

// TestFleetOwnerRunsUnderTheFleetsMode: the owner box runs a turn under
// the channel's mode as the fleet knows it, not its own state: on in the
// fleet runs though unknown or rich here; off in the fleet, or never set
// there, is refused with the host API's 409 though on here.
func TestFleetOwnerRunsUnderTheFleetsMode(t *testing.T) {
	c := fleettest.Start(t, 1)
	ctx := context.Background()
	r, f := fleetRig(t, c, "box-b")
	startBox(t, r, f)
	must(t, r.kit.Host.State.SetRich("rich-here", "p"))
	must(t, r.kit.Host.State.SetMode("off-there", chanstate.ModeOn))
	must(t, r.kit.Host.State.SetMode("never-there", chanstate.ModeOn))
	for ch, mode := range map[string]string{"unknown-here": fleet.ModeOn, "rich-here": fleet.ModeOn, "off-there": fleet.ModeOff} {
		_, err := f.SetMode(ctx, ch, mode, "", "admin")
		must(t, err)
	}
	fc := fleetClient(t, c)
	for _, tc := range []struct {
		channel string
		want    error
	}{{"unknown-here", nil}, {"rich-here", nil}, {"off-there", client.ErrModeOff}, {"never-there", client.ErrModeOff}} {
		reply, err := fc.RunTurn(ctx, tc.channel, apiwire.Speaker{ID: "s1"}, "hello")
		if tc.want == nil && (err != nil || !reply.OK || reply.Text != "hello") || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("turn on %s = %+v, %v; want %v", tc.channel, reply, err, tc.want)
		}
	}
	if n := len(r.docker.Created); n != 2 {
		t.Errorf("containers = %d, want 2 (the two channels on in the fleet)", n)
	}
}
