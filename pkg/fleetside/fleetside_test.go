package fleetside

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/wsarchive"
)

// fakeHost records what the side asks of its host and of the
// workspaces.
type fakeHost struct {
	runs      int
	restored  []string
	runErr    error
	packErr   error
	unpackErr error
}

func (f *fakeHost) Accepting() bool { return true }
func (f *fakeHost) Slot(context.Context, string) (func(), error) {
	return func() {}, nil
}
func (f *fakeHost) Run(context.Context, fleet.Turn) (bool, string, error) {
	f.runs++
	return true, "reply", f.runErr
}
func (f *fakeHost) PackWorkspace(string, wsarchive.Limits) ([]byte, error) {
	return []byte("packed"), f.packErr
}
func (f *fakeHost) RestoreWorkspace(_ string, data []byte, _ wsarchive.Limits) error {
	f.restored = append(f.restored, string(data))
	return f.unpackErr
}

// TestExecuteRestoresOnlyWhatIsNotCurrent: a turn runs only on a channel
// on in the fleet; the committed snapshot is restored unless this box's
// copy is known to be it (its own last packed turn), and again after a
// turn whose outcome left the copy unknown; a store failure returns the
// turn for another delivery, a refused snapshot fails it.
func TestExecuteRestoresOnlyWhatIsNotCurrent(t *testing.T) {
	h := &fakeHost{}
	cfg := &config.Config{}
	cfg.Queue.Depth, cfg.Fleet.Partitions = 1, 1
	s := New(Options{Host: h, Workspaces: h, Config: cfg, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var storeErr error
	in := func(mode, snapshot, next string) fleet.Input {
		return fleet.Input{Turn: fleet.Turn{Channel: "ch"}, Mode: fleet.ChannelMode{Channel: "ch", Mode: mode},
			Snapshot: snapshot, NextSnapshot: next,
			Restore: func(context.Context) ([]byte, error) { return []byte("snapshot " + snapshot), storeErr }}
	}
	ctx := context.Background()
	steps := []struct {
		name      string
		in        fleet.Input
		setup     func()
		wantErr   func(error) bool
		wantRuns  int
		restored  string // the snapshot restored by this step ("" none)
		workspace string
	}{
		{name: "off in the fleet", in: in(fleet.ModeOff, "", "s1"), wantErr: func(err error) bool {
			var te *fleet.TurnError
			return errors.As(err, &te) && te.Kind == fleet.ErrorModeOff
		}},
		{name: "never set", in: in("", "", "s1"), wantErr: func(err error) bool { return err != nil && !errors.Is(err, fleet.ErrElsewhere) }},
		{name: "first turn: nothing committed", in: in(fleet.ModeOn, "", "s1"), wantRuns: 1, workspace: "packed"},
		{name: "own last turn committed", in: in(fleet.ModeOn, "s1", "s2"), wantRuns: 2, workspace: "packed"},
		{name: "another box committed since", in: in(fleet.ModeOn, "x3", "s4"), wantRuns: 3, restored: "snapshot x3", workspace: "packed"},
		{name: "store fails", in: in(fleet.ModeOn, "x5", "s6"), setup: func() { storeErr = errors.New("no leader") },
			wantErr: func(err error) bool { return errors.Is(err, fleet.ErrElsewhere) }, wantRuns: 3},
		{name: "snapshot refused", in: in(fleet.ModeOn, "x5", "s6"), setup: func() { storeErr, h.unpackErr = nil, fmt.Errorf("bad: %w", wsarchive.ErrInvalid) },
			wantErr: func(err error) bool {
				return errors.Is(err, wsarchive.ErrInvalid) && !errors.Is(err, fleet.ErrElsewhere)
			}, wantRuns: 3, restored: "snapshot x5"},
		{name: "turn fails after a restore", in: in(fleet.ModeOn, "x5", "s6"), setup: func() { h.unpackErr, h.runErr = nil, errors.New("worker") },
			wantErr: func(err error) bool { return err != nil }, wantRuns: 4, restored: "snapshot x5"},
		{name: "the failed turn's copy is no snapshot", in: in(fleet.ModeOn, "x5", "s7"), setup: func() { h.runErr = nil },
			wantRuns: 5, restored: "snapshot x5", workspace: "packed"},
		{name: "pack fails", in: in(fleet.ModeOn, "s7", "s8"), setup: func() { h.packErr = errors.New("too big") },
			wantErr: func(err error) bool { return err != nil }, wantRuns: 6},
		{name: "after a failed pack the copy is no snapshot", in: in(fleet.ModeOn, "s7", "s9"), setup: func() { h.packErr = nil },
			wantRuns: 7, restored: "snapshot s7", workspace: "packed"},
	}
	for _, st := range steps {
		if st.setup != nil {
			st.setup()
		}
		before := len(h.restored)
		out, err := s.Execute(ctx, st.in)
		if st.wantErr == nil && err != nil || st.wantErr != nil && !st.wantErr(err) {
			t.Fatalf("%s: Execute = %v", st.name, err)
		}
		if h.runs != st.wantRuns {
			t.Fatalf("%s: runs = %d, want %d", st.name, h.runs, st.wantRuns)
		}
		restored := ""
		if len(h.restored) > before {
			restored = h.restored[len(h.restored)-1]
		}
		if restored != st.restored {
			t.Fatalf("%s: restored %q, want %q", st.name, restored, st.restored)
		}
		if string(out.Workspace) != st.workspace {
			t.Fatalf("%s: workspace %q, want %q", st.name, out.Workspace, st.workspace)
		}
	}
}
