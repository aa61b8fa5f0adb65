package reaper

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// addStandby places a standby as the host prepares it: its container
// labelled as a standby with its expiry (also its deadline label), broker
// units, turn directory, and the placeholder policy (expiry plus the
// broker's 30 s slack). bound replaces the placeholder by a turn's policy
// with deadline boundDeadline, as binding does.
func (w *world) addStandby(turn string, created, expiry time.Time, bound bool, boundDeadline time.Time) {
	w.t.Helper()
	name, _ := ids.ContainerName("c", turn)
	exp := strconv.FormatInt(expiry.Unix(), 10)
	w.containers.list = append(w.containers.list, container.Info{
		ID: "id-" + turn, Name: name, Created: created.Truncate(time.Second), State: "running",
		Labels: map[string]string{
			layout.LabelInstallation: "test", layout.LabelTurn: turn,
			layout.LabelDeadline: exp, layout.LabelStandby: exp,
		},
	})
	w.units.turns = append(w.units.turns, turn)
	w.addDir(turn, created)
	if bound {
		w.addPolicy(turn, created, fmt.Sprintf(`{"version":1,"turnId":%q,"deadlineUnixMs":%d}`, turn, boundDeadline.UnixMilli()))
		return
	}
	w.addPolicy(turn, created, fmt.Sprintf(`{"version":1,"turnId":%q,"pending":true,"deadlineUnixMs":%d}`, turn, expiry.Add(30*time.Second).UnixMilli()))
}

// TestReapStandbys: a running host's listed standbys are never touched; a
// host that is not running leaves none; expired standbys go; a standby
// bound to a turn lives by its turn's deadline, not its expiry label.
func TestReapStandbys(t *testing.T) {
	sb := turnID(40)
	tests := []struct {
		name     string
		known    bool
		active   bool // the host lists sb
		activeEr bool // host knowledge failed
		setup    func(w *world)
		wantLeft bool
	}{
		{"ready, listed by the running host", true, true, false,
			func(w *world) {
				w.addStandby(sb, t0.Add(-100*time.Second), t0.Add(200*time.Second), false, time.Time{})
			}, true},
		{"ready, host not running", true, false, false,
			func(w *world) {
				w.addStandby(sb, t0.Add(-100*time.Second), t0.Add(200*time.Second), false, time.Time{})
			}, false},
		{"ready, no host knowledge", false, false, true,
			func(w *world) {
				w.addStandby(sb, t0.Add(-100*time.Second), t0.Add(200*time.Second), false, time.Time{})
			}, true},
		{"expired, no host knowledge", false, false, true,
			func(w *world) {
				w.addStandby(sb, t0.Add(-500*time.Second), t0.Add(-200*time.Second), false, time.Time{})
			}, false},
		{"expired within slack and grace", false, false, true,
			func(w *world) {
				w.addStandby(sb, t0.Add(-350*time.Second), t0.Add(-50*time.Second), false, time.Time{})
			}, true},
		{"bound after its expiry label, listed", true, true, false,
			func(w *world) {
				w.addStandby(sb, t0.Add(-500*time.Second), t0.Add(-200*time.Second), true, t0.Add(100*time.Second))
			}, true},
		{"bound after its expiry label, no host knowledge", false, false, true,
			func(w *world) {
				w.addStandby(sb, t0.Add(-500*time.Second), t0.Add(-200*time.Second), true, t0.Add(100*time.Second))
			}, true},
		{"bound and past its turn deadline", false, false, true,
			func(w *world) {
				w.addStandby(sb, t0.Add(-500*time.Second), t0.Add(-400*time.Second), true, t0.Add(-61*time.Second))
			}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.known = tt.known
			w.active = map[string]bool{}
			if tt.active {
				w.active[sb] = true
			}
			if tt.activeEr {
				w.activeErr = fmt.Errorf("host socket refused")
			}
			tt.setup(w)
			if _, err := w.reaper().Reap(context.Background()); err != nil {
				t.Fatalf("Reap: %v", err)
			}
			c, u, d, p := w.left(sb)
			if c != tt.wantLeft || u != tt.wantLeft || d != tt.wantLeft || p != tt.wantLeft {
				t.Errorf("left container=%v unit=%v dir=%v policy=%v, want all %v", c, u, d, p, tt.wantLeft)
			}
		})
	}
}

// addRunStandby places a run standby as the host prepares it: its toolbox
// container labelled as a standby with its expiry (also its deadline
// label) and its deadline record (a placeholder policy: no broker, no turn
// directory). bound rewrites the record with the run's deadline, as
// binding does.
func (w *world) addRunStandby(id string, created, expiry time.Time, bound bool, runDeadline time.Time) {
	w.t.Helper()
	name, _ := ids.ContainerName(ids.RunName(id), id)
	exp := strconv.FormatInt(expiry.Unix(), 10)
	w.containers.list = append(w.containers.list, container.Info{
		ID: "id-" + id, Name: name, Created: created.Truncate(time.Second), State: "running",
		Labels: map[string]string{
			layout.LabelInstallation: "test", layout.LabelTurn: id, layout.LabelChannel: ids.RunName(id),
			layout.LabelDeadline: exp, layout.LabelStandby: exp,
		},
	})
	deadline := expiry
	if bound {
		deadline = runDeadline
	}
	w.addPolicy(id, created, fmt.Sprintf(`{"version":1,"turnId":%q,"pending":true,"deadlineUnixMs":%d}`, id, deadline.UnixMilli()))
}

// TestReapRunStandbys: run standbys need no rule of their own either: a
// running host's listed ones stay, a host that is not running (killed)
// leaves none, an expired one goes, and one bound to a run lives by the
// run's deadline (its deadline record), not by its expiry label.
func TestReapRunStandbys(t *testing.T) {
	sb := turnID(41)
	tests := []struct {
		name     string
		known    bool
		active   bool
		setup    func(w *world)
		wantLeft bool
	}{
		{"ready, listed by the running host", true, true,
			func(w *world) {
				w.addRunStandby(sb, t0.Add(-100*time.Second), t0.Add(200*time.Second), false, time.Time{})
			}, true},
		{"ready, host killed and down", true, false,
			func(w *world) {
				w.addRunStandby(sb, t0.Add(-100*time.Second), t0.Add(200*time.Second), false, time.Time{})
			}, false},
		{"ready, no host knowledge", false, false,
			func(w *world) {
				w.addRunStandby(sb, t0.Add(-100*time.Second), t0.Add(200*time.Second), false, time.Time{})
			}, true},
		{"expired, no host knowledge", false, false,
			func(w *world) {
				w.addRunStandby(sb, t0.Add(-500*time.Second), t0.Add(-200*time.Second), false, time.Time{})
			}, false},
		{"bound to a long run past its expiry label, no host knowledge", false, false,
			func(w *world) {
				w.addRunStandby(sb, t0.Add(-500*time.Second), t0.Add(-200*time.Second), true, t0.Add(3000*time.Second))
			}, true},
		{"bound and past the run's deadline", false, false,
			func(w *world) {
				w.addRunStandby(sb, t0.Add(-500*time.Second), t0.Add(-400*time.Second), true, t0.Add(-61*time.Second))
			}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.known = tt.known
			w.active = map[string]bool{}
			if tt.active {
				w.active[sb] = true
			}
			if !tt.known {
				w.activeErr = fmt.Errorf("host socket refused")
			}
			tt.setup(w)
			if _, err := w.reaper().Reap(context.Background()); err != nil {
				t.Fatalf("Reap: %v", err)
			}
			c, _, _, p := w.left(sb)
			if c != tt.wantLeft || p != tt.wantLeft {
				t.Errorf("left container=%v deadline record=%v, want both %v", c, p, tt.wantLeft)
			}
		})
	}
}
