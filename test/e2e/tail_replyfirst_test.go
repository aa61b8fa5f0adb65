package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// TestNextTurnStartsAfterCleanup: the reply leaves before the cleanup
// (docs/sealed-turns.md), but a channel's next turn starts only once its
// predecessor's container and broker units are gone. Back-to-back turns of
// one channel (the first cold, the next ones on standbys): for each pair,
// Docker's destroy event of the first turn's container and systemd's last
// journal entry of its broker units come before the second turn's worker
// calls the model (which it does only once it started).
func TestNextTurnStartsAfterCleanup(t *testing.T) {
	diagnose(t)
	const ch = "e2e-replyfirst"
	channelOn(t, ch)

	// Docker's create and destroy events of this installation's containers,
	// by turn label.
	type life struct{ created, destroyed time.Time }
	var mu sync.Mutex
	lives := map[string]*life{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, errs := env.docker.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("label", layout.LabelInstallation))})
	listening := make(chan struct{})
	go func() {
		close(listening)
		for {
			select {
			case m := <-msgs:
				turn := m.Actor.Attributes[layout.LabelTurn]
				if turn == "" {
					continue
				}
				at := time.Unix(0, m.TimeNano)
				mu.Lock()
				l := lives[turn]
				if l == nil {
					l = &life{}
					lives[turn] = l
				}
				switch m.Action {
				case events.ActionCreate:
					l.created = at
				case events.ActionDestroy:
					l.destroyed = at
				}
				mu.Unlock()
			case <-errs:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	<-listening

	type sent struct{ id, marker string }
	var turns []sent
	run := randHex(3)
	for i := range 4 {
		marker := "REPLYFIRST-" + run + "-" + strconv.Itoa(i)
		r := turn(ch, "alice", marker)
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("turn %d: %s", i, r)
		}
		id, _ := r.Body["turnId"].(string)
		turns = append(turns, sent{id, marker})
	}
	assertNothingLeft(t, "after back-to-back turns")

	// unitsGone is the last journal entry of a turn's broker units (their
	// stop), from systemd.
	unitsGone := func(id string) time.Time {
		out := journal("-o", "short-unix", "-u", "sandbox-broker@"+id+".service", "-u", "sandbox-broker@"+id+".socket")
		var last time.Time
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			sec, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				continue
			}
			last = time.Unix(0, int64(sec*1e9))
		}
		return last
	}
	for i := 1; i < len(turns); i++ {
		a, b := turns[i-1], turns[i]
		recs := recordsForUser(env.modelRec, b.marker)
		if len(recs) != 1 {
			t.Fatalf("turn %d: the fake model saw %d requests, want 1", i, len(recs))
		}
		started := recs[0].Start
		var la, lb life
		if msg := eventually(10*time.Second, func() string {
			mu.Lock()
			defer mu.Unlock()
			if l := lives[a.id]; l != nil && !l.destroyed.IsZero() {
				la = *l
				if l := lives[b.id]; l != nil {
					lb = *l
				}
				return ""
			}
			return "no destroy event of " + a.id
		}); msg != "" {
			t.Fatalf("turn %d: %s", i-1, msg)
		}
		units := unitsGone(a.id)
		if units.IsZero() {
			t.Errorf("turn %d: systemd's journal has nothing of sandbox-broker@%s", i-1, a.id)
		}
		if !la.destroyed.Before(started) || !units.Before(started) {
			t.Errorf("turn %d's worker called the model at %s, before turn %d's container was destroyed (%s) or its units stopped (%s)",
				i, started.Format(time.RFC3339Nano), i-1, la.destroyed.Format(time.RFC3339Nano), units.Format(time.RFC3339Nano))
		}
		// A standby was created while the previous turn ran (by design:
		// it is bound only after that turn's cleanup); a cold turn's
		// container comes after the destroy.
		standby := !lb.created.IsZero() && lb.created.Before(la.destroyed)
		t.Logf("turn %d (standby %v): previous container destroyed %v and its units stopped %v before this worker's model call",
			i, standby, started.Sub(la.destroyed).Round(time.Millisecond), started.Sub(units).Round(time.Millisecond))
	}
}
