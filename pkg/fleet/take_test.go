package fleet

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestNextTurnClaimsTheRememberedState: the box that committed a
// channel's last turn takes its next one without reading the state first:
// the claim goes out at the revision its commit wrote, beside the reads of
// the reply and the mode (takeRemembered). Seen from the wire: no read of
// the channel's state key during the second turn. Before, every take read
// the state, then claimed.
func TestNextTurnClaimsTheRememberedState(t *testing.T) {
	r := newRig(t, 1, 1)
	r.box("a", newRecorder())
	client, nc := r.fleet("client")
	ctx := r.ctx()
	if _, _, err := client.Ask(ctx, newTurn("chan-fast", "1")); err != nil {
		t.Fatal(err)
	}
	// Reads of a key from the channels bucket's leader (no direct get)
	// name the key's subject in their request; the copy reaches this
	// connection before the reply's watch does (the read precedes the
	// commit, on the server's order of this connection's deliveries). A
	// channel subscription is filled by the connection's reader itself,
	// so once a Flush's answer is read every earlier copy is in it (an
	// asynchronous callback could still be pending: the test failed so
	// under load).
	stateSubject := "$KV." + ChannelsBucket + "." + channelKey("chan-fast")
	copies := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe("$JS.API.STREAM.MSG.GET.KV_"+ChannelsBucket, copies)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	reads := 0
	readsSoFar := func() int {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-copies:
				if strings.Contains(string(m.Data), stateSubject) {
					reads++
				}
			default:
				return reads
			}
		}
	}
	readsSoFar()
	// The sniffer must see a state read when one happens.
	if _, _, err := client.Channel(ctx, "chan-fast"); err != nil {
		t.Fatal(err)
	}
	if n := readsSoFar(); n != 1 {
		t.Fatalf("the sniffer saw %d reads of the state for one read", n)
	}
	rep, _, err := client.Ask(ctx, newTurn("chan-fast", "2"))
	if err != nil || rep.Generation != 2 {
		t.Fatalf("second turn: %+v, %v", rep, err)
	}
	if n := readsSoFar() - 1; n != 0 {
		t.Fatalf("the second turn read the channel's state %d time(s) before claiming; want none (the box's own commit wrote it)", n)
	}
}

// TestRememberedClaimIsFenced: a state written since the box's own commit
// (here a repair's reset to generation 5) refuses the claim at the
// remembered revision; the box takes the turn on the state as it is, and
// commits generation 6 on it, not 2 on what it remembered.
func TestRememberedClaimIsFenced(t *testing.T) {
	r := newRig(t, 1, 1)
	r.box("a", newRecorder())
	client, _ := r.fleet("client")
	ctx := r.ctx()
	if _, _, err := client.Ask(ctx, newTurn("chan-reset", "1")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ResetChannel(ctx, "chan-reset", 5); err != nil {
		t.Fatal(err)
	}
	second := newTurn("chan-reset", "2")
	rep, _, err := client.Ask(ctx, second)
	if err != nil || rep.Generation != 6 {
		t.Fatalf("turn after the reset: %+v, %v; want generation 6", rep, err)
	}
	st, _, err := client.Channel(ctx, "chan-reset")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := client.Workspace(ctx, st.Workspace)
	if got := strings.TrimSpace(string(ws)); err != nil || st.Generation != 6 || got != second.ID {
		t.Fatalf("state after the reset's turn: generation %d, workspace %q, %v; want 6 and the second turn alone", st.Generation, got, err)
	}
}
