package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet/fleettest"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// testAckWait keeps failover short; pcgroups advises at least 2 s.
const testAckWait = 2 * time.Second

// pinnedPartition is Partition("discord:1234", 16), computed once by hand.
const pinnedPartition = 6

// quiet drops the boxes' log lines (the events are what tests check).
var quiet = func() *slog.Logger {
	if os.Getenv("FLEET_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// rig is a cluster and the boxes a test runs on it.
type rig struct {
	t      *testing.T
	c      *fleettest.Cluster
	layout Layout
	events chan Event
	mu     sync.Mutex
	log    []Event
}

func newRig(t *testing.T, servers, partitions int) *rig {
	t.Helper()
	r := &rig{t: t, c: fleettest.Start(t, servers), layout: Layout{Partitions: partitions, Replicas: min(servers, 3)}, events: make(chan Event, 4096)}
	return r
}

func (r *rig) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	r.t.Cleanup(cancel)
	return ctx
}

// fleet opens a connection of its own and the fleet on it.
func (r *rig) fleet(name string) (*Fleet, *nats.Conn) {
	r.t.Helper()
	nc := r.c.Connect(name)
	f, err := Open(r.ctx(), nc, r.layout)
	if err != nil {
		r.t.Fatalf("open fleet for %s: %v", name, err)
	}
	return f, nc
}

// box starts a box with its own connection.
func (r *rig) box(name string, ex Executor) (*Box, *nats.Conn) {
	r.t.Helper()
	return r.boxWith(BoxOptions{Name: name, Executor: ex})
}

func (r *rig) boxWith(o BoxOptions) (*Box, *nats.Conn) {
	r.t.Helper()
	f, nc := r.fleet(o.Name)
	o.AckWait, o.OnEvent, o.Logger = testAckWait, r.record, quiet
	b, err := NewBox(f, o)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := b.Start(r.ctx()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(b.Stop)
	return b, nc
}

func (r *rig) record(e Event) {
	if os.Getenv("FLEET_TEST_LOG") != "" {
		fmt.Fprintf(os.Stderr, "%s event %s box=%s ch=%s seq=%d attempt=%d\n", time.Now().Format("15:04:05.000"), e.Kind, e.Box, e.Channel, e.Seq, e.Attempt)
	}
	r.mu.Lock()
	r.log = append(r.log, e)
	r.mu.Unlock()
	r.events <- e
}

// waitEvent waits for an event matching pred (the test's deadline bounds it).
func (r *rig) waitEvent(what string, pred func(Event) bool) Event {
	r.t.Helper()
	timeout := time.NewTimer(45 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case e := <-r.events:
			if pred(e) {
				return e
			}
		case <-timeout.C:
			r.t.Fatalf("no event %s within 45 s; events: %+v", what, r.snapshot())
		}
	}
}

// waitCommitted waits until each turn has a commit event (the reply is
// published just before the box acknowledges and reports).
func (r *rig) waitCommitted(turns []Turn) {
	r.t.Helper()
	for _, tn := range turns {
		if r.count(EventCommitted, tn.ID) > 0 {
			continue
		}
		r.waitEvent("commit of "+tn.ID, func(e Event) bool { return e.Kind == EventCommitted && e.TurnID == tn.ID })
	}
}

func (r *rig) snapshot() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.log...)
}

func (r *rig) count(kind EventKind, turn string) int {
	n := 0
	for _, e := range r.snapshot() {
		if e.Kind == kind && (turn == "" || e.TurnID == turn) {
			n++
		}
	}
	return n
}

func newTurn(channel, text string) Turn {
	return Turn{ID: ids.NewTurnID(), Channel: channel, Speaker: Speaker{ID: "u1"}, Text: text, DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli()}
}

// replyCount is how many values the turn's key ever had (history included),
// as the replies stream's leader counts them. The bucket allows direct gets,
// and a watch's consumer may sit on any replica: either can lag a reply the
// leader has just acknowledged (seen in CI: 0 replies right after the commit
// event), so the count asks the leader.
func replyCount(t *testing.T, f *Fleet, turnID string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := f.js.Stream(ctx, "KV_"+RepliesBucket)
	if err != nil {
		t.Fatalf("replies stream: %v", err)
	}
	subject := "$KV." + RepliesBucket + "." + turnID
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatalf("reply count of %s: %v", turnID, err)
	}
	return int(info.State.Subjects[subject])
}

// recorder executes instantly, records each channel's turns in execution
// order and fails the test when two turns of one channel overlap.
type recorder struct {
	d       time.Duration // each turn's run (default 1 ms)
	mu      sync.Mutex
	running map[string]bool
	order   map[string][]string
	overlap []string
}

func newRecorder() *recorder {
	return &recorder{running: map[string]bool{}, order: map[string][]string{}}
}

func (rc *recorder) Execute(ctx context.Context, in Input) (Output, error) {
	rc.mu.Lock()
	if rc.running[in.Turn.Channel] {
		rc.overlap = append(rc.overlap, in.Turn.ID)
	}
	rc.running[in.Turn.Channel] = true
	rc.order[in.Turn.Channel] = append(rc.order[in.Turn.Channel], in.Turn.ID)
	rc.mu.Unlock()
	out, err := (&StubExecutor{Duration: max(rc.d, time.Millisecond)}).Execute(ctx, in)
	rc.mu.Lock()
	rc.running[in.Turn.Channel] = false
	rc.mu.Unlock()
	return out, err
}

func TestPartitionIsStable(t *testing.T) {
	tests := []struct {
		channel string
		n       int
		want    int
	}{
		{"discord:1234", 16, Partition("discord:1234", 16)},
		{"a", 1, 0},
	}
	for _, tt := range tests {
		for i := 0; i < 3; i++ {
			if got := Partition(tt.channel, tt.n); got != tt.want || got < 0 || got >= tt.n {
				t.Fatalf("Partition(%q, %d) = %d, want %d", tt.channel, tt.n, got, tt.want)
			}
		}
	}
	// Pinned values: a change of the hash would move every channel.
	if got := Partition("discord:1234", 16); got != pinnedPartition {
		t.Fatalf("Partition(discord:1234, 16) = %d, want %d (the hash changed: every channel would move)", got, pinnedPartition)
	}
}

// TestOrderPerChannel: two boxes, turns of several channels submitted in
// order; each channel's turns run one at a time in submission order and
// its workspace holds them in that order.
func TestOrderPerChannel(t *testing.T) {
	r := newRig(t, 3, 4)
	rec := newRecorder()
	r.box("a", rec)
	r.box("b", rec)
	client, _ := r.fleet("client")
	ctx := r.ctx()
	channels := []string{"chan-1", "chan-2", "chan-3"}
	want := map[string][]string{}
	var all []Turn
	for i := 0; i < 6; i++ {
		for _, ch := range channels {
			tn := newTurn(ch, fmt.Sprint(i))
			if _, err := client.Submit(ctx, tn); err != nil {
				t.Fatal(err)
			}
			want[ch] = append(want[ch], tn.ID)
			all = append(all, tn)
		}
	}
	for _, tn := range all {
		rep, err := client.AwaitReply(ctx, tn.ID)
		if err != nil || !rep.OK {
			t.Fatalf("turn %s: reply %+v, %v", tn.ID, rep, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.overlap) > 0 {
		t.Fatalf("turns ran while another turn of their channel ran: %v", rec.overlap)
	}
	for _, ch := range channels {
		// Execution is at least once: a turn may run again (a redelivery)
		// but only before the next one starts.
		if got := strings.Join(slices.Compact(rec.order[ch]), ","); got != strings.Join(want[ch], ",") {
			t.Errorf("channel %s ran %s, want %s", ch, got, strings.Join(want[ch], ","))
		}
		st, _, err := client.Channel(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := client.Workspace(ctx, st.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		if got, w := strings.TrimSpace(string(ws)), strings.Join(want[ch], "\n"); got != w {
			t.Errorf("channel %s workspace %q, want %q", ch, got, w)
		}
		if st.Generation != uint64(len(want[ch])) {
			t.Errorf("channel %s generation %d, want %d", ch, st.Generation, len(want[ch]))
		}
	}
}

// TestResubmissionIsDeduplicated: the same turn id published twice is one
// stream message, one execution and one reply; a resubmission past the
// stream's window (another message id) is answered from the reply without
// running.
func TestResubmissionIsDeduplicated(t *testing.T) {
	r := newRig(t, 1, 2)
	rec := newRecorder()
	r.box("a", rec)
	client, nc := r.fleet("client")
	ctx := r.ctx()
	tn := newTurn("chan-dup", "hello")
	first, err := client.Submit(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	second, err := client.Submit(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Duplicate || second.Seq != first.Seq || first.Duplicate {
		t.Fatalf("submissions %+v then %+v: want the second a duplicate of the first", first, second)
	}
	if _, err := client.AwaitReply(ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	// Past the window: same turn, another message id.
	data, _ := json.Marshal(tn)
	js, _ := jetstream.New(nc)
	late, err := js.PublishMsg(ctx, &nats.Msg{Subject: TurnSubject(Partition(tn.Channel, 2)), Data: data}, jetstream.WithMsgID("late-"+tn.ID))
	if err != nil {
		t.Fatal(err)
	}
	r.waitEvent("late resubmission answered", func(e Event) bool { return e.Seq == late.Sequence && e.Kind == EventAnswered })
	if n := r.count(EventTaken, tn.ID); n != 1 {
		t.Errorf("turn taken %d times, want 1", n)
	}
	if n := replyCount(t, client, tn.ID); n != 1 {
		t.Errorf("turn has %d replies, want 1", n)
	}
}

// blocker blocks the first turn it runs (on whichever box) until released.
type blocker struct {
	once    sync.Once
	started chan string // the box that runs the blocked turn
	release chan struct{}
	box     string
}

func newBlocker() *blocker {
	return &blocker{started: make(chan string, 1), release: make(chan struct{})}
}

func (bl *blocker) on(box string) Executor {
	return ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		first := false
		bl.once.Do(func() { first = true })
		if first {
			bl.started <- box
			<-bl.release // deliberately deaf to ctx: a paused process is
		}
		return (&StubExecutor{Duration: time.Millisecond}).Execute(context.WithoutCancel(ctx), in)
	})
}

// TestFailoverWhenOwnerDies: the pinned box dies (its connection
// closes) while it runs a turn; the other box takes the partition, runs the turn
// and commits it once; the dead owner's commit never lands.
func TestFailoverWhenOwnerDies(t *testing.T) {
	r := newRig(t, 3, 2)
	bl := newBlocker()
	boxA, _ := r.box("a", bl.on("a"))
	boxB, _ := r.box("b", bl.on("b"))
	client, _ := r.fleet("client")
	ctx := r.ctx()
	tn := newTurn("chan-failover", "x")
	if _, err := client.Submit(ctx, tn); err != nil {
		t.Fatal(err)
	}
	owner := <-bl.started
	other, dead := "b", boxA
	if owner == "b" {
		other, dead = "a", boxB
	}
	dead.Kill()
	rep, err := client.AwaitReply(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Box != other || !rep.OK {
		t.Fatalf("reply %+v, want an OK reply committed by %s", rep, other)
	}
	r.waitCommitted([]Turn{tn})
	close(bl.release) // the dead owner finishes: its commit cannot land
	r.waitEvent("the dead owner's turn ends", func(e Event) bool {
		return e.Box == owner && (e.Kind == EventReturned || e.Kind == EventRefused)
	})
	if n := r.count(EventCommitted, tn.ID); n != 1 {
		t.Errorf("turn committed %d times, want 1", n)
	}
	if n := replyCount(t, client, tn.ID); n != 1 {
		t.Errorf("turn has %d replies, want 1", n)
	}
	st, _, err := client.Channel(ctx, tn.Channel)
	if err != nil || st.Generation != 1 || st.LastTurn != tn.ID {
		t.Fatalf("channel state %+v, %v: want generation 1 at the turn", st, err)
	}
}

// TestZombieOwnerCannotCommit: the owner stops answering the cluster (as
// under SIGSTOP) while it runs a turn; the turn moves to the other box,
// which commits; when the zombie resumes, its commit is refused by the
// fence and the turn keeps exactly one reply.
func TestZombieOwnerCannotCommit(t *testing.T) {
	r := newRig(t, 3, 2)
	bl := newBlocker()
	boxA, _ := r.box("a", bl.on("a"))
	boxB, _ := r.box("b", bl.on("b"))
	client, _ := r.fleet("client")
	ctx := r.ctx()
	tn := newTurn("chan-zombie", "x")
	if _, err := client.Submit(ctx, tn); err != nil {
		t.Fatal(err)
	}
	owner := <-bl.started
	zombie, other := boxA, "b"
	if owner == "b" {
		zombie, other = boxB, "a"
	}
	zombie.Detach()
	committed := r.waitEvent("the other box commits", func(e Event) bool { return e.Kind == EventCommitted && e.TurnID == tn.ID })
	if committed.Box != other {
		t.Fatalf("committed by %s, want %s", committed.Box, other)
	}
	close(bl.release)
	r.waitEvent("the zombie's commit refused", func(e Event) bool { return e.Box == owner && e.Kind == EventRefused && e.TurnID == tn.ID })
	if n := r.count(EventCommitted, tn.ID); n != 1 {
		t.Errorf("turn committed %d times, want 1", n)
	}
	if n := replyCount(t, client, tn.ID); n != 1 {
		t.Errorf("turn has %d replies, want 1", n)
	}
	rep, err := client.AwaitReply(ctx, tn.ID)
	if err != nil || rep.Box != other {
		t.Fatalf("reply %+v, %v: want %s's", rep, err, other)
	}
}

// TestRepliesExactlyOnceUnderRedelivery: every turn's first delivery is
// handed back (as by a stopping box), and a committed turn whose reply was
// never published (its box died in between) is published from the state
// without running again: one reply per turn id, one commit per turn.
func TestRepliesExactlyOnceUnderRedelivery(t *testing.T) {
	r := newRig(t, 1, 2)
	var mu sync.Mutex
	runs := map[string]int{}
	ex := ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		mu.Lock()
		runs[in.Turn.ID]++
		mu.Unlock()
		if in.Attempt == 1 {
			return Output{}, ErrElsewhere
		}
		return (&StubExecutor{Duration: time.Millisecond}).Execute(ctx, in)
	})
	r.box("a", ex)
	client, _ := r.fleet("client")
	ctx := r.ctx()
	var turns []Turn
	for i := 0; i < 8; i++ {
		tn := newTurn(fmt.Sprintf("chan-%d", i%3), "x")
		if _, err := client.Submit(ctx, tn); err != nil {
			t.Fatal(err)
		}
		turns = append(turns, tn)
	}
	for _, tn := range turns {
		if _, err := client.AwaitReply(ctx, tn.ID); err != nil {
			t.Fatal(err)
		}
	}
	r.waitCommitted(turns)
	for _, tn := range turns {
		if n := replyCount(t, client, tn.ID); n != 1 {
			t.Errorf("turn %s has %d replies, want 1", tn.ID, n)
		}
		if n := r.count(EventCommitted, tn.ID); n != 1 {
			t.Errorf("turn %s committed %d times, want 1", tn.ID, n)
		}
	}

	// A commit whose reply was lost: the state holds it, the key does not.
	tn := newTurn("chan-lost-reply", "x")
	st := ChannelState{Channel: tn.Channel, Generation: 1, LastTurn: tn.ID, LastSeq: 0,
		LastReply: &Reply{TurnID: tn.ID, OK: true, Text: "from the state", Box: "gone", Generation: 1}}
	data, _ := json.Marshal(st)
	if _, err := client.channels.Create(ctx, channelKey(tn.Channel), data); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Submit(ctx, tn); err != nil {
		t.Fatal(err)
	}
	rep, err := client.AwaitReply(ctx, tn.ID)
	if err != nil || rep.Text != "from the state" || rep.Box != "gone" {
		t.Fatalf("reply %+v, %v: want the committed one from the state", rep, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs[tn.ID] != 0 {
		t.Errorf("a committed turn ran %d times on redelivery, want 0", runs[tn.ID])
	}
}

// TestEnsureRefusesAnotherLayout: a box configured with other partitions
// or replicas than the fleet's resources is refused, naming the key.
func TestEnsureRefusesAnotherLayout(t *testing.T) {
	c := fleettest.Start(t, 1)
	nc := c.Connect("x")
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := Ensure(ctx, js, Layout{Partitions: 4, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(ctx, js, Layout{Partitions: 4, Replicas: 1}); err != nil {
		t.Fatalf("second Ensure with the same layout: %v", err)
	}
	tests := []struct {
		name string
		l    Layout
		key  string
		want error
	}{
		{"partitions", Layout{Partitions: 8, Replicas: 1}, "fleet.partitions", ErrMismatch},
		{"replicas", Layout{Partitions: 4, Replicas: 3}, "fleet.replicas", ErrMismatch},
		{"bad partitions", Layout{Partitions: 0, Replicas: 1}, "fleet.partitions", ErrInvalid},
		{"bad replicas", Layout{Partitions: 4, Replicas: 2}, "fleet.replicas", ErrInvalid},
	}
	for _, tt := range tests {
		err := Ensure(ctx, js, tt.l)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%s: Ensure = %v, want %v naming %s", tt.name, err, tt.want, tt.key)
		}
	}
}

// TestAuditAfterKillingTheBusiestBox: three boxes share turns of several
// channels; the box that committed most loses its connection mid-run. Every
// turn is answered once, in order, with no extra commit, and the channels'
// workspaces hold their turns in order.
func TestAuditAfterKillingTheBusiestBox(t *testing.T) {
	r := newRig(t, 3, 4)
	conns := map[string]*nats.Conn{}
	for _, name := range []string{"a", "b", "c"} {
		_, conns[name] = r.box(name, &StubExecutor{Duration: 20 * time.Millisecond})
	}
	client, _ := r.fleet("client")
	ctx := r.ctx()
	var turns []Turn
	want := map[string][]string{}
	for i := 0; i < 10; i++ {
		for c := 0; c < 6; c++ {
			tn := newTurn(fmt.Sprintf("chan-%d", c), "x")
			if _, err := client.Submit(ctx, tn); err != nil {
				t.Fatal(err)
			}
			turns = append(turns, tn)
			want[tn.Channel] = append(want[tn.Channel], tn.ID)
		}
	}
	perBox := map[string]int{}
	for n := 0; n < 10; {
		e := r.waitEvent("ten commits", func(e Event) bool { return e.Kind == EventCommitted })
		perBox[e.Box]++
		n++
	}
	busiest := "a"
	for b, n := range perBox {
		if n > perBox[busiest] {
			busiest = b
		}
	}
	// Its connection closes under it (not Kill): the box must leave its
	// partitions by itself (pcgroups would spin on the closed watcher and
	// starve the process).
	conns[busiest].Close()
	// Replies, not commit events: the killed box may have committed a turn
	// whose answer it never saw (its event never comes; the next box then
	// answers the redelivery from the committed state).
	for _, tn := range turns {
		if _, err := client.AwaitReply(ctx, tn.ID); err != nil {
			t.Fatal(err)
		}
	}
	a, err := client.Audit(ctx, turns)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Clean() || a.Failed != 0 {
		t.Fatalf("audit after killing %s: %s (lost %v, reordered %v)", busiest, a, a.Lost, a.Reordered)
	}
	for ch, ids := range want {
		st, _, err := client.Channel(ctx, ch)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := client.Workspace(ctx, st.Workspace)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(ws)); got != strings.Join(ids, "\n") {
			t.Errorf("channel %s workspace:\n%s\nwant:\n%s", ch, got, strings.Join(ids, "\n"))
		}
	}
	t.Logf("killed %s after %v commits per box; %s", busiest, perBox, a)
}

// TestPeersShareThePartitions: boxes that name each other own a share of
// the partitions each (the balanced assignment), not first come first
// pinned; the standby joins are far off, so the owner is each share's box.
func TestPeersShareThePartitions(t *testing.T) {
	r := newRig(t, 1, 4)
	peers := []string{"a", "b"}
	for _, name := range peers {
		r.boxWith(BoxOptions{Name: name, Executor: &StubExecutor{Duration: time.Millisecond}, Peers: peers, StandbyDelay: time.Hour})
	}
	client, _ := r.fleet("client")
	ctx := r.ctx()
	want := map[string]string{}
	var turns []Turn
	for i := 0; len(want) < 8; i++ {
		ch := fmt.Sprintf("chan-%d", i)
		tn := newTurn(ch, "x")
		if _, err := client.Submit(ctx, tn); err != nil {
			t.Fatal(err)
		}
		want[tn.ID] = peers[Partition(ch, 4)%2]
		turns = append(turns, tn)
	}
	for _, tn := range turns {
		rep, err := client.AwaitReply(ctx, tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Box != want[tn.ID] {
			t.Errorf("turn of %s (partition %d) committed by %s, want %s", tn.Channel, Partition(tn.Channel, 4), rep.Box, want[tn.ID])
		}
	}
}

// TestLateTurnAnsweredDeadlineWithoutRunning: a turn whose time ran out,
// on the engine's clock, before a box took it (it waited in the stream
// longer than its TimeoutMs) commits a "deadline" reply and never runs; a
// turn whose deadline passed before it was published is refused.
func TestLateTurnAnsweredDeadlineWithoutRunning(t *testing.T) {
	r := newRig(t, 1, 1)
	client, nc := r.fleet("client")
	ctx := r.ctx()
	past := newTurn("chan-late", "x")
	past.DeadlineUnixMs = time.Now().Add(-time.Second).UnixMilli()
	if _, err := client.Submit(ctx, past); !errors.Is(err, ErrInvalid) {
		t.Fatalf("submitting a turn past its deadline: %v, want ErrInvalid", err)
	}
	tn := newTurn("chan-late", "x")
	tn.TimeoutMs = 1
	sub, err := client.Submit(ctx, tn)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, TurnsStream)
	if err != nil {
		t.Fatal(err)
	}
	stamp := func(seq uint64) time.Time {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		return m.Time
	}
	// Later turns until the stream's clock is past the late turn's time.
	published := stamp(sub.Seq)
	for {
		later, err := client.Submit(ctx, newTurn("chan-other", "y"))
		if err != nil {
			t.Fatal(err)
		}
		if stamp(later.Seq).Sub(published) > time.Millisecond {
			break
		}
	}
	var mu sync.Mutex
	var ran []string
	r.box("a", ExecutorFunc(func(ctx context.Context, in Input) (Output, error) {
		mu.Lock()
		ran = append(ran, in.Turn.ID)
		mu.Unlock()
		return Output{OK: true}, nil
	}))
	rep, err := client.AwaitReply(ctx, tn.ID)
	if err != nil || rep.Error != ErrorDeadline || rep.OK {
		t.Fatalf("late turn: reply %+v, %v; want a %q reply", rep, err, ErrorDeadline)
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(ran, tn.ID) {
		t.Fatalf("the executor ran the late turn %s", tn.ID)
	}
}

// TestReadsComeFromTheLeader: the channels bucket and the workspaces'
// object store have direct get off, so a turn never reads a state or a
// snapshot older than the last commit from a lagging replica.
func TestReadsComeFromTheLeader(t *testing.T) {
	r := newRig(t, 1, 1)
	f, _ := r.fleet("a")
	ctx := r.ctx()
	for _, name := range []string{"KV_" + ChannelsBucket, "OBJ_" + WorkspaceBucket} {
		s, err := f.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Errorf("stream %s allows direct get", name)
		}
	}
}

// TestPartitionsReturnHome: three boxes naming each other own a share of
// the partitions each; the third dies and the others take its share; a
// new process of the third box comes back, stands by, and its share
// returns to it, while every channel's turns run one at a time and in
// order across both moves and the audit stays clean. Each wait runs
// rounds of turns until its condition holds (the test's deadline bounds
// it: nothing is timed).
func TestPartitionsReturnHome(t *testing.T) {
	r := newRig(t, 3, 6)
	peers := []string{"a", "b", "c"}
	rec := newRecorder()
	rec.d = 20 * time.Millisecond
	boxes := map[string]*Box{}
	for _, name := range peers {
		boxes[name], _ = r.boxWith(BoxOptions{Name: name, Executor: rec, Peers: peers})
	}
	client, _ := r.fleet("client")
	ctx := r.ctx()
	// One channel per partition; c's share is partitions 2 and 5.
	chans := make([]string, 6)
	for i, found := 0, 0; found < 6; i++ {
		ch := fmt.Sprintf("chan-%d", i)
		if p := Partition(ch, 6); chans[p] == "" {
			chans[p], found = ch, found+1
		}
	}
	var turns []Turn
	// round submits a turn on every channel and returns who committed each.
	round := func() []string {
		t.Helper()
		var batch []Turn
		for _, ch := range chans {
			tn := newTurn(ch, "x")
			if _, err := client.Submit(ctx, tn); err != nil {
				t.Fatal(err)
			}
			batch = append(batch, tn)
		}
		turns = append(turns, batch...)
		by := make([]string, len(batch))
		for p, tn := range batch {
			rep, err := client.AwaitReply(ctx, tn.ID)
			if err != nil {
				t.Fatalf("turn on partition %d: %v", p, err)
			}
			by[p] = rep.Box
		}
		return by
	}
	until := func(what string, ok func(by []string) bool) {
		t.Helper()
		for {
			if by := round(); ok(by) {
				t.Logf("%s: %v", what, by)
				return
			}
		}
	}
	atHome := func(by []string) bool {
		for p, box := range by {
			if box != peers[p%3] {
				return false
			}
		}
		return true
	}
	until("every partition at home", atHome)
	boxes["c"].Kill()
	until("c's share with the others", func(by []string) bool { return by[2] != "c" && by[5] != "c" })
	r.boxWith(BoxOptions{Name: "c", Executor: rec, Peers: peers})
	until("c's share back home", atHome)

	a, err := client.Audit(ctx, turns)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Clean() || a.Failed != 0 {
		t.Fatalf("audit: %s (lost %v, reordered %v)", a, a.Lost, a.Reordered)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.overlap) > 0 {
		t.Errorf("turns that ran while another turn of their channel ran: %v", rec.overlap)
	}
	for _, ch := range chans {
		var want []string
		for _, tn := range turns {
			if tn.Channel == ch {
				want = append(want, tn.ID)
			}
		}
		// A turn the killed box was running runs again on its successor.
		if got := slices.Compact(slices.Clone(rec.order[ch])); !slices.Equal(got, want) {
			t.Errorf("channel %s ran %v, want %v in order", ch, got, want)
		}
	}
}

// TestDeletedConsumerIsMadeAgain: a partition's consumer deleted under
// the boxes (an operator, a reset replica) ends every box's pull on it for
// good (the server answers the waiting pulls 409 Consumer Deleted, a
// terminal error for the client): the box notices, makes the consumer
// again and pulls; the next turn is answered and the audit stays clean.
func TestDeletedConsumerIsMadeAgain(t *testing.T) {
	r := newRig(t, 1, 1)
	r.box("a", &StubExecutor{Duration: time.Millisecond})
	client, _ := r.fleet("client")
	ctx := r.ctx()
	first := newTurn("chan-deleted", "x")
	if _, _, err := client.Ask(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := client.js.DeleteConsumer(ctx, TurnsStream, TurnsGroup+"-"+memberName(0)); err != nil {
		t.Fatal(err)
	}
	second := newTurn("chan-deleted", "y")
	if _, _, err := client.Ask(ctx, second); err != nil {
		t.Fatalf("turn after the consumer was deleted: %v", err)
	}
	a, err := client.Audit(ctx, []Turn{first, second})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Clean() || a.Failed != 0 {
		t.Fatalf("audit: %s", a)
	}
}
