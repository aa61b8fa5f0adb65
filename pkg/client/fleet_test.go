package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
)

// TestFleetClientRunsTurnOnABox: a frontend on no box gets the reply the
// box committed, and a box's failure kinds become the host API's errors.
func TestFleetClientRunsTurnOnABox(t *testing.T) {
	c := fleettest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, c.Connect("box-a"), fleet.Layout{Partitions: 2, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	box, err := fleet.NewBox(f, fleet.BoxOptions{Name: "box-a", AckWait: 2 * time.Second,
		Executor: fleet.ExecutorFunc(func(ctx context.Context, in fleet.Input) (fleet.Output, error) {
			switch in.Turn.Text {
			case "off":
				return fleet.Output{}, &fleet.TurnError{Kind: fleet.ErrorModeOff, Err: errors.New("off")}
			case "boom":
				return fleet.Output{}, errors.New("secret detail")
			}
			return fleet.Output{OK: true, Text: "echo " + in.Turn.Text}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	if err := box.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer box.Stop()
	fc, err := DialFleet(ctx, FleetOptions{Conn: c.Connect("frontend"), Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	tests := []struct {
		text    string
		want    string
		wantErr error
	}{
		{"hi", "echo hi", nil},
		{"off", "", ErrModeOff},
		{"boom", "", ErrTurnFailed},
	}
	for _, tt := range tests {
		rep, err := fc.RunTurn(ctx, "discord:1", apiwire.Speaker{ID: "u1"}, tt.text)
		if tt.wantErr != nil {
			var ce *Error
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &ce) || ce.Reason == "secret detail" {
				t.Errorf("RunTurn(%q) = %v, want %v with a generic reason", tt.text, err, tt.wantErr)
			}
			continue
		}
		if err != nil || rep.Text != tt.want || !rep.OK || len(rep.TurnID) != 32 {
			t.Errorf("RunTurn(%q) = %+v, %v; want %q", tt.text, rep, err, tt.want)
		}
	}
	if _, err := fc.RunTurn(ctx, "discord:1", apiwire.Speaker{}, "x"); !errors.Is(err, ErrBadRequest) {
		t.Errorf("no speaker: %v, want 400", err)
	}
}

// TestFleetClientTimesOut: with no box taking turns the call ends at its
// deadline with ErrTimeout.
func TestFleetClientTimesOut(t *testing.T) {
	c := fleettest.Start(t, 1)
	ctx := context.Background()
	if _, err := fleet.Open(ctx, c.Connect("setup"), fleet.Layout{Partitions: 1, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	fc, err := DialFleet(ctx, FleetOptions{Conn: c.Connect("frontend"), Partitions: 1, TurnTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.RunTurn(ctx, "discord:1", apiwire.Speaker{ID: "u1"}, "x"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("RunTurn with no box = %v, want ErrTimeout", err)
	}
}
