package fleetcmd

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// TestFleetChannelRepair: show reports a state that does not decode
// without printing its bytes; reset puts it at the generation asked and is
// logged; a reset below the channel's generation is refused and logged.
func TestFleetChannelRepair(t *testing.T) {
	c := fleettest.Start(t, 1)
	nc := c.Connect("repair")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, nc, fleet.Layout{Partitions: 1, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, fleet.ChannelsBucket)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.ShowChannel(ctx, "chan-r")
	if _, err := kv.Put(ctx, v.Key, []byte("{secret guest text")); err != nil {
		t.Fatal(err)
	}
	var logged []string
	logf := func(msg string, attrs map[string]string) {
		logged = append(logged, msg+" "+attrs["ACTION"]+" "+attrs["GENERATION"])
	}

	var out bytes.Buffer
	if err := fleetChannelRun(ctx, f, "show", "chan-r", 0, &out, false, logf); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "do not decode") || strings.Contains(s, "secret") || !strings.Contains(s, "reset --generation N chan-r") {
		t.Errorf("show of a broken state printed %q", s)
	}
	if err := fleetChannelRun(ctx, f, "reset", "chan-r", 4, &out, false, logf); err != nil {
		t.Fatal(err)
	}
	st, _, err := f.Channel(ctx, "chan-r")
	if err != nil || st.Generation != 4 {
		t.Fatalf("state after reset: %+v, %v", st, err)
	}
	if err := fleetChannelRun(ctx, f, "reset", "chan-r", 2, &out, false, logf); err == nil {
		t.Fatal("reset below the channel's generation succeeded")
	}
	want := []string{"fleet channel reset done reset 4", "fleet channel reset refused reset 0"}
	if strings.Join(logged, "|") != strings.Join(want, "|") {
		t.Errorf("logged %q, want %q", logged, want)
	}
}
