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
