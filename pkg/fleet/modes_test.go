package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
)

// TestModeWritesAndSeeds: SetMode writes by compare-and-swap and counts
// versions, an unchanged mode is not written again, SeedMode never
// overwrites, a value another box wrote under the wrong key or with a
// mode outside the list is refused, and bad input changes nothing.
func TestModeWritesAndSeeds(t *testing.T) {
	r := newRig(t, 1, 1)
	f, _ := r.fleet("a")
	ctx := r.ctx()
	if m, rev, err := f.Mode(ctx, "ch"); err != nil || rev != 0 || m.Mode != "" {
		t.Fatalf("Mode of a channel never set = %+v rev %d, %v", m, rev, err)
	}
	seeded, err := f.SeedMode(ctx, "ch", ModeOn, "", "a")
	if err != nil || seeded.Mode != ModeOn || seeded.Version != 1 {
		t.Fatalf("SeedMode = %+v, %v", seeded, err)
	}
	if m, err := f.SeedMode(ctx, "ch", ModeOff, "", "b"); err != nil || m.Mode != ModeOn || m.By != "a" {
		t.Fatalf("second SeedMode = %+v, %v; want the first value kept", m, err)
	}
	m, err := f.SetMode(ctx, "ch", ModeRich, "coder", "b")
	if err != nil || m.Version != 2 || m.By != "b" {
		t.Fatalf("SetMode = %+v, %v", m, err)
	}
	_, rev, _ := f.Mode(ctx, "ch")
	if m, err := f.SetMode(ctx, "ch", ModeRich, "coder", "c"); err != nil || m.Version != 2 || m.By != "b" {
		t.Fatalf("unchanged SetMode = %+v, %v; want no write", m, err)
	}
	if _, again, _ := f.Mode(ctx, "ch"); again != rev {
		t.Errorf("an unchanged mode was written (revision %d -> %d)", rev, again)
	}
	for _, bad := range []struct{ mode, profile, by string }{{"sideways", "", "b"}, {ModeOn, "coder", "b"}, {ModeRich, "", "b"},
		{ModeRich, "co\nder", "b"}, {ModeRich, "coder", "Box\nINFO forged=1"}, {ModeOn, "", "-b"}} {
		if _, err := f.SetMode(ctx, "ch", bad.mode, bad.profile, bad.by); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetMode(%q, %q, by %q) = %v, want ErrInvalid", bad.mode, bad.profile, bad.by, err)
		}
	}
	// The same values written past SetMode (a hostile box) are refused as read.
	for i, bad := range []ChannelMode{{Channel: "raw", Mode: ModeRich, Profile: "co\nder", Version: 1}, {Channel: "raw", Mode: ModeOn, By: "Box\nforged", Version: 2}} {
		b, _ := json.Marshal(bad)
		if _, err := f.channels.Put(ctx, modeKey("raw"), b); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.Mode(ctx, "raw"); !errors.Is(err, ErrInvalid) {
			t.Errorf("raw value %d %+v: Mode = %v, want ErrInvalid", i, bad, err)
		}
	}
	if _, again, _ := f.Mode(ctx, "ch"); again != rev {
		t.Errorf("a refused mode was written")
	}
	// Another box's values: one under another channel's key, one unknown.
	if _, err := f.channels.Put(ctx, modeKey("other"), []byte(`{"channel":"ch","mode":"on","version":9}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Mode(ctx, "other"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Mode under another channel's key = %v, want ErrInvalid", err)
	}
	if _, err := f.channels.Put(ctx, modeKey("x"), []byte(`{"channel":"x","mode":"root"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Mode(ctx, "x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Mode with an unknown mode = %v, want ErrInvalid", err)
	}
	// An invalid value is replaced by the next SetMode.
	if m, err := f.SetMode(ctx, "x", ModeOff, "", "a"); err != nil || m.Mode != ModeOff {
		t.Errorf("SetMode over an invalid value = %+v, %v", m, err)
	}
}

// TestWatchModesSeesEveryChange: a watcher hears the current values, then
// each change another box makes, in order; bad values are reported apart.
func TestWatchModesSeesEveryChange(t *testing.T) {
	r := newRig(t, 1, 1)
	a, _ := r.fleet("a")
	b, _ := r.fleet("b")
	ctx, cancel := context.WithCancel(r.ctx())
	defer cancel()
	if _, err := a.SetMode(ctx, "one", ModeOn, "", "a"); err != nil {
		t.Fatal(err)
	}
	seen := make(chan ChannelMode, 16)
	bad := make(chan error, 16)
	done := make(chan error, 1)
	go func() { done <- b.WatchModes(ctx, func(m ChannelMode) { seen <- m }, func(err error) { bad <- err }) }()
	if m := <-seen; m.Channel != "one" || m.Mode != ModeOn {
		t.Fatalf("first value = %+v", m)
	}
	if _, err := a.channels.Put(ctx, modeKey("two"), []byte(`{"channel":"one","mode":"off"}`)); err != nil {
		t.Fatal(err)
	}
	if err := <-bad; !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad value reported as %v", err)
	}
	if _, err := a.SetMode(ctx, "one", ModeOff, "", "a"); err != nil {
		t.Fatal(err)
	}
	if m := <-seen; m.Channel != "one" || m.Mode != ModeOff || m.Version != 2 {
		t.Fatalf("change = %+v", m)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("WatchModes = %v", err)
	}
}

// TestTurnRunsUnderTheFleetsMode: the executor gets the mode as the fleet
// holds it when the turn is taken; a mode change while a turn runs does
// not refuse that turn's commit (the turn is not run again), and the next
// turn sees the new mode.
func TestTurnRunsUnderTheFleetsMode(t *testing.T) {
	r := newRig(t, 1, 1)
	var mu sync.Mutex
	var modes []string
	started, release := make(chan struct{}), make(chan struct{})
	first := true
	r.box("a", ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		mu.Lock()
		modes = append(modes, in.Mode.Mode)
		block := first
		first = false
		mu.Unlock()
		if block {
			close(started)
			<-release
		}
		return Output{OK: true, Text: "ok"}, nil
	}))
	client, _ := r.fleet("client")
	ctx := r.ctx()
	if _, err := client.SetMode(ctx, "ch", ModeOn, "", "client"); err != nil {
		t.Fatal(err)
	}
	t1 := newTurn("ch", "one")
	if _, err := client.Submit(ctx, t1); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := client.SetMode(ctx, "ch", ModeOff, "", "client"); err != nil {
		t.Fatal(err)
	}
	close(release)
	if rep, err := client.AwaitReply(ctx, t1.ID); err != nil || !rep.OK {
		t.Fatalf("turn 1 = %+v, %v", rep, err)
	}
	t2 := newTurn("ch", "two")
	if _, err := client.Submit(ctx, t2); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AwaitReply(ctx, t2.ID); err != nil {
		t.Fatal(err)
	}
	if n := r.count(EventRefused, ""); n != 0 {
		t.Errorf("%d commits refused: a mode change fenced a running turn", n)
	}
	if n := r.count(EventTaken, t1.ID); n != 1 {
		t.Errorf("turn 1 taken %d times, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(modes) != 2 || modes[0] != ModeOn || modes[1] != ModeOff {
		t.Errorf("modes the executor saw = %q, want [on off]", modes)
	}
	if m, _, _ := client.Mode(ctx, "ch"); m.Mode != ModeOff {
		t.Errorf("mode after the commit = %+v: the commit lost the change", m)
	}
}

// TestInvalidModeIsNotSet: a mode value that fails its checks (only a box
// could write it) makes the channel's turns run as if no mode were set,
// once each, instead of being returned for ever.
func TestInvalidModeIsNotSet(t *testing.T) {
	r := newRig(t, 1, 1)
	got := make(chan ChannelMode, 4)
	r.box("a", ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		got <- in.Mode
		return Output{OK: true}, nil
	}))
	client, _ := r.fleet("client")
	ctx := r.ctx()
	if _, err := client.channels.Put(ctx, modeKey("ch"), []byte(`{"channel":"ch","mode":"root"}`)); err != nil {
		t.Fatal(err)
	}
	tn := newTurn("ch", "x")
	if _, err := client.Submit(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AwaitReply(ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m.Mode != "" || m.Channel != "ch" {
		t.Errorf("mode the executor got = %+v, want none set", m)
	}
	if n := r.count(EventReturned, tn.ID); n != 0 {
		t.Errorf("turn returned %d times", n)
	}
}

// TestConcurrentModeChangesNeverShareAVersion: two boxes changing one
// channel's mode at once each write only on the value they read, so every
// write takes a version of its own and none is lost unseen.
func TestConcurrentModeChangesNeverShareAVersion(t *testing.T) {
	r := newRig(t, 1, 1)
	ctx := r.ctx()
	a, _ := r.fleet("a")
	b, _ := r.fleet("b")
	if _, err := a.SetMode(ctx, "ch", ModeOn, "", "a"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	written := map[uint64]string{}
	var wg sync.WaitGroup
	for box, f := range map[string]*Fleet{"a": a, "b": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				mode, profile := ModeOff, ""
				if i%2 == 1 {
					mode = ModeOn
					if box == "b" {
						mode, profile = ModeRich, "p"
					}
				}
				m, err := f.SetMode(ctx, "ch", mode, profile, box)
				if errors.Is(err, ErrModeContended) {
					continue // refused whole: nothing of it written
				}
				if err != nil {
					t.Error(err)
					return
				}
				if m.By != box { // unchanged: the other box's value was this one
					continue
				}
				mu.Lock()
				if other, dup := written[m.Version]; dup {
					t.Errorf("version %d written by %s and %s", m.Version, other, box)
				}
				written[m.Version] = box
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	final, _, err := a.Mode(ctx, "ch")
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(2); v <= final.Version; v++ {
		if _, ok := written[v]; !ok {
			t.Errorf("version %d of %d was written by no one the test knows", v, final.Version)
		}
	}
	if len(written) != int(final.Version)-1 {
		t.Errorf("%d writes for final version %d", len(written), final.Version)
	}
}

// A mode write that another writer overtakes on every attempt is refused
// as contended, after its bounded attempts, and writes nothing.
func TestModeWriteOvertakenEveryTimeIsRefusedWhole(t *testing.T) {
	r := newRig(t, 1, 1)
	ctx := r.ctx()
	f, _ := r.fleet("a")
	if _, err := f.SetMode(ctx, "ch", ModeOn, "", "a"); err != nil {
		t.Fatal(err)
	}
	writes := 0
	f.beforeModeWrite = func() {
		writes++
		cur, _, err := f.Mode(ctx, "ch")
		if err != nil {
			t.Error(err)
			return
		}
		next := ChannelMode{Channel: "ch", Mode: ModeOn, By: "other", Version: cur.Version + 1}
		data, _ := json.Marshal(next)
		if _, err := f.channels.Put(ctx, modeKey("ch"), data); err != nil {
			t.Error(err)
		}
	}
	_, err := f.SetMode(ctx, "ch", ModeOff, "", "a")
	if !errors.Is(err, ErrModeContended) {
		t.Fatalf("SetMode overtaken on every attempt = %v, want ErrModeContended", err)
	}
	if writes != maxModeWrites {
		t.Errorf("%d attempts, want %d", writes, maxModeWrites)
	}
	f.beforeModeWrite = nil
	got, _, err := f.Mode(ctx, "ch")
	if err != nil {
		t.Fatal(err)
	}
	if want := (ChannelMode{Channel: "ch", Mode: ModeOn, By: "other", Version: 1 + maxModeWrites}); got != want {
		t.Errorf("mode after the refused write = %+v, want %+v (the other writer's)", got, want)
	}
}
