package fleet

import (
	"context"
	"errors"
	"testing"
)

// TestRepairChannel: a state that does not decode is shown as such, its
// turn answered failed at once; reset puts the channel at a known
// generation and its next turn commits above it; drop-snapshot leaves a
// decodable state without its snapshot, and the snapshot's object gone.
func TestRepairChannel(t *testing.T) {
	r := newRig(t, 1, 1)
	r.box("a", newRecorder())
	client, _ := r.fleet("client")
	ctx := r.ctx()
	ch := "chan-repair"
	if _, err := client.channels.Put(ctx, channelKey(ch), []byte("{broken")); err != nil {
		t.Fatal(err)
	}
	v, err := client.ShowChannel(ctx, ch)
	if err != nil || v.State != nil || v.Invalid == "" || string(v.Raw) != "{broken" {
		t.Fatalf("show of a broken state: %+v, %v", v, err)
	}
	if _, err := client.DropSnapshot(ctx, ch); !errors.Is(err, ErrInvalid) {
		t.Fatalf("drop-snapshot of a broken state: %v, want ErrInvalid", err)
	}
	rep, _, err := client.Ask(ctx, newTurn(ch, "x"))
	if err != nil || rep.Error != ErrorFailed {
		t.Fatalf("turn on the broken state: %+v, %v; want failed", rep, err)
	}
	if _, err := client.ResetChannel(ctx, ch, 7); err != nil {
		t.Fatal(err)
	}
	rep, _, err = client.Ask(ctx, newTurn(ch, "y"))
	if err != nil || !rep.OK || rep.Generation != 8 {
		t.Fatalf("turn after the reset: %+v, %v; want OK at generation 8", rep, err)
	}
	if _, err := client.ResetChannel(ctx, ch, 3); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reset below the channel's generation: %v, want ErrInvalid", err)
	}
	st, _, err := client.Channel(ctx, ch)
	if err != nil || st.Workspace == "" {
		t.Fatalf("state after a turn: %+v, %v; want a snapshot", st, err)
	}
	dropped, err := client.DropSnapshot(ctx, ch)
	if err != nil || dropped.Workspace != "" || dropped.Generation != 8 {
		t.Fatalf("drop-snapshot: %+v, %v", dropped, err)
	}
	if _, err := client.Workspace(context.Background(), st.Workspace); err == nil {
		t.Errorf("snapshot %s still in the store after drop-snapshot", st.Workspace)
	}
	rep, _, err = client.Ask(ctx, newTurn(ch, "z"))
	if err != nil || !rep.OK || rep.Generation != 9 {
		t.Fatalf("turn after drop-snapshot: %+v, %v; want OK at generation 9", rep, err)
	}
}
