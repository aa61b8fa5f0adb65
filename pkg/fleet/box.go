package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"

	"github.com/roundtable-sandbox/sandbox/pkg/fleetworkspace"
)

// EventKind names what happened to a delivered turn (Event).
type EventKind string

const (
	// EventTaken: the box claimed the turn and starts executing it.
	EventTaken EventKind = "taken"
	// EventCommitted: the box committed the turn (reply, workspace, state)
	// and sent its acknowledgement (not waiting for the server's
	// confirmation: ackCommitted).
	EventCommitted EventKind = "committed"
	// EventRefused: the fence refused the box's claim or commit (another
	// box claimed the channel since): its work is dropped, not acknowledged.
	EventRefused EventKind = "refused"
	// EventAnswered: the turn was already committed (a redelivery, a
	// resubmission): acknowledged without running.
	EventAnswered EventKind = "answered"
	// EventReturned: the executor handed the turn back (ErrElsewhere) or
	// the commit failed on the cluster: not acknowledged, redelivered.
	EventReturned EventKind = "returned"
	// EventGivenUp: the turn was delivered more often than MaxAttempts and
	// the cluster still refused its way through (a state no box can read,
	// a reply the bucket refuses): answered as failed where a reply can be
	// stored, and terminated, so that its partition goes on.
	EventGivenUp EventKind = "given_up"
)

// Event is one step of a turn on a box, for tests, benchmarks and metrics.
type Event struct {
	Kind       EventKind
	Box        string
	Channel    string
	TurnID     string
	Seq        uint64
	Generation uint64 // after a commit: the generation it made
	Attempt    uint64
	// Runs, on EventTaken, counts the turn's takes the claims recorded,
	// this one included (2 or more: the turn runs again, after a take
	// that never committed).
	Runs uint64
	// Took is, after a commit, the time from the turn's publication (the
	// stream's timestamp) to its commit.
	Took time.Duration
	// Steps is, after a commit, where Took went (the engine's overhead by
	// step: fleetbench's overhead series and BenchmarkTurnSteps).
	Steps Steps
}

// Steps is one committed turn's time by step on its box: Delivered from
// the turn's publication (the stream's timestamp, the engine's clock) to
// its take on this box's clock, so it carries any skew between the two;
// the others on this box's monotonic clock.
type Steps struct {
	Delivered time.Duration // publication to the take: replication of the publish, the pull
	Read      time.Duration // the take's reads (reply, mode, state), at once
	Claim     time.Duration // the claim's compare-and-swap
	Run       time.Duration // the executor, a restore included
	Upload    time.Duration // the workspace snapshot's upload (0: none)
	Commit    time.Duration // the state's compare-and-swap at the claim's revision
	Reply     time.Duration // the reply's create
	Ack       time.Duration // sending the turn's acknowledgement (its confirmation is not waited for)
}

// StepNames are Steps' fields in order, as Named names them.
var StepNames = []string{"delivered", "read", "claim", "run", "upload", "commit", "reply", "ack"}

// Named is s by StepNames.
func (s Steps) Named() map[string]time.Duration {
	return map[string]time.Duration{"delivered": s.Delivered, "read": s.Read, "claim": s.Claim, "run": s.Run,
		"upload": s.Upload, "commit": s.Commit, "reply": s.Reply, "ack": s.Ack}
}

// BoxOptions configure a box.
type BoxOptions struct {
	// Name is the box's name (fleet.box); it is recorded as the owner of
	// the turns it claims.
	Name     string
	Executor Executor
	// AckWait bounds how long a taken turn stays with a box that stopped
	// answering (dead, cut off, paused) before it is redelivered; the pin
	// of the partition moves after the same time. A box heartbeats its
	// running turns every AckWait/3. Default DefaultAckWait.
	AckWait time.Duration
	// MaxAttempts: a turn delivered more often is committed as failed
	// without running (a turn that kills every box it lands on), or, when
	// the cluster refuses even that, given up (EventGivenUp): every path
	// that hands a turn back checks it (returnTurn). Default 10:
	// deliveries the cluster failed count too (their redelivery waits
	// longer each time, giveBack).
	MaxAttempts uint64
	Logger      *slog.Logger
	// OnEvent, when set, receives every Event (called from the partition's
	// goroutine: keep it short).
	OnEvent func(Event)
	// Now is the clock (tests).
	Now func() time.Time
	// Peers names every box of the fleet (fleet.server.boxes). A box
	// joins its share of the partitions (a balanced assignment over the
	// sorted names) at once and stands by for the others after
	// StandbyDelay, so boxes started together own a share each. Empty: all
	// partitions at once, first come first pinned.
	Peers []string
	// StandbyDelay defaults to 2 x AckWait.
	StandbyDelay time.Duration
	// InlineBytes bounds a snapshot committed inside its channel's state
	// (ChannelState.WorkspaceData). Default InlineWorkspaceBytes; negative:
	// every snapshot is an object (tests of the workspace store).
	InlineBytes int
}

// DefaultAckWait is BoxOptions.AckWait's default: failover within about
// twice this.
const DefaultAckWait = 5 * time.Second

// Box takes the turns of the partitions it is pinned on.
type Box struct {
	f    *Fleet
	opts BoxOptions
	log  *slog.Logger

	ctx    context.Context // cancelled by Stop: running turns end
	cancel context.CancelFunc

	peers []string // Peers, sorted, without repeats
	inc   string   // this box process's incarnation (its announcements)
	view  *presence

	mu       sync.Mutex
	group    *pcgroups.StaticConsumerGroupConfig
	members  []*member // by partition; the slice is fixed at Start
	started  time.Time
	detached chan struct{} // closed by Detach: heartbeats stop
	workers  sync.WaitGroup
	queues   []chan item

	probeOK atomic.Int64 // unix ns of the cluster's last answer (probe)
	// engineNow is the newest timestamp of the turns stream this box has
	// seen (unix ns: a delivered turn's, the stream's latest at a probe):
	// the engine's clock, by which turns are aged (Turn.TimeoutMs).
	engineNow atomic.Int64
	// steppedBack: the last membership round found the cluster not
	// answering (b.mu).
	steppedBack bool

	// superseded queues the snapshots commits superseded, deleted by
	// retire off the partitions' paths; deleteSnapshot deletes one (the
	// workspace store's Delete; a test's hook).
	superseded     chan string
	deleteSnapshot func(ctx context.Context, name string) error

	// committed holds, by partition, the state this box's last commit
	// there wrote and its revision (remember), so that the partition's
	// next turn of the same channel claims at once (takeRemembered).
	committedMu sync.Mutex
	committed   map[int]rememberedState

	// delivered, when set, wraps each delivered turn before the worker
	// handles it (a test's hook: TestCommittedTurnDoesNotWaitForItsAck).
	delivered func(jetstream.Msg) jetstream.Msg
}

// rememberedState is a channel's state as a commit of this box wrote it.
type rememberedState struct {
	st  ChannelState
	rev uint64
}

// item is one entry of a partition's worker queue: a delivered turn, or
// a step the worker takes after what was queued before it.
type item struct {
	msg jetstream.Msg
	fn  func()
}

// NewBox returns a box on f; Start joins the partitions.
func NewBox(f *Fleet, o BoxOptions) (*Box, error) {
	if o.Name == "" {
		return nil, fmt.Errorf("fleet.box is required in fleet mode: %w", ErrInvalid)
	}
	if o.Executor == nil {
		return nil, fmt.Errorf("fleet box %s: no executor: %w", o.Name, ErrInvalid)
	}
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.StandbyDelay <= 0 {
		o.StandbyDelay = 2 * o.AckWait
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 10
	}
	if o.InlineBytes == 0 {
		o.InlineBytes = InlineWorkspaceBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	peers := slices.Clone(o.Peers)
	slices.Sort(peers)
	peers = slices.Compact(peers)
	ctx, cancel := context.WithCancel(context.Background())
	b := &Box{f: f, opts: o, log: o.Logger.With("box", o.Name), ctx: ctx, cancel: cancel, detached: make(chan struct{}),
		peers: peers, inc: incarnation()}
	b.view = &presence{peers: map[string]*peerState{}, timeout: b.presenceTimeout()}
	b.superseded = make(chan string, supersededQueue)
	b.committed = map[int]rememberedState{}
	b.deleteSnapshot = f.ws.Delete
	return b, nil
}

// incarnation names this box process in its announcements.
func incarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Start pulls the box's home partitions at once (an error here fails the
// start), then supervises its pulls (membership.go): after StandbyDelay it
// also stands by for every partition whose home box is away.
func (b *Box) Start(ctx context.Context) error {
	group, err := pcgroups.GetStaticConsumerGroupConfig(ctx, b.f.js, TurnsStream, TurnsGroup)
	if err != nil {
		return fmt.Errorf("fleet box %s: the turns group: %w", b.opts.Name, err)
	}
	// The engine's clock before the first delivery: a turn that waited out
	// its TimeoutMs while no box ran is aged right at once.
	if s, err := b.f.js.Stream(ctx, TurnsStream); err == nil {
		b.sawEngineTime(s.CachedInfo().State.LastTime)
	}
	n := b.f.layout.Partitions
	b.mu.Lock()
	defer b.mu.Unlock()
	b.group = group
	b.started = b.opts.Now()
	for p := 0; p < n; p++ {
		b.queues = append(b.queues, make(chan item, 4))
		b.members = append(b.members, &member{p: p, name: TurnsGroup + "-" + memberName(p)})
	}
	for _, q := range b.queues {
		b.workers.Add(1)
		go b.work(q)
	}
	homes := 0
	for _, m := range b.members {
		if !b.home(m.p) {
			continue
		}
		homes++
		if err := b.startPull(ctx, m); err != nil {
			b.stopLocked()
			return err
		}
	}
	// Start's own calls reached the cluster: healthy until a probe says
	// otherwise.
	b.probeOK.Store(b.opts.Now().UnixNano())
	b.workers.Add(1)
	go b.membership()
	// What a crash leaves in the workspace store is swept by every box
	// (pkg/fleetworkspace; docs/fleet.md, *Workspaces*).
	go b.f.ws.Sweeper(b.ctx, fleetworkspace.DefaultSweepInterval, fleetworkspace.DefaultSweepAge, b.f.referenced, b.log)
	b.workers.Add(1)
	go b.retire()
	// A connection that closes for good (not a reconnect) leaves the
	// partitions: a box without a connection is dead anyway.
	closed := b.f.nc.StatusChanged(nats.CLOSED)
	go func() {
		defer b.f.nc.RemoveStatusListener(closed)
		select {
		case <-closed:
			b.log.Error("fleet box lost its NATS connection for good: leaving its partitions; restart the host")
			b.Detach()
		case <-b.ctx.Done():
		}
	}()
	b.log.Info("fleet box joined its partitions", "home", homes, "partitions", n, "ack_wait_ms", b.opts.AckWait.Milliseconds())
	return nil
}

// home: the partition is this box's by the balanced assignment over
// Peers (every partition when Peers does not name this box).
func (b *Box) home(p int) bool {
	if !slices.Contains(b.peers, b.opts.Name) {
		return true
	}
	return b.homeOf(p) == b.opts.Name
}

func (b *Box) isDetached() bool {
	select {
	case <-b.detached:
		return true
	default:
		return false
	}
}

// Stop leaves the partitions, cancels running turns (they are not
// committed: another box runs them) and waits for the workers.
func (b *Box) Stop() {
	b.cancel() // first: a membership round holding b.mu ends at once
	b.mu.Lock()
	b.stopLocked()
	b.mu.Unlock()
	b.workers.Wait()
}

func (b *Box) stopLocked() {
	for _, m := range b.members {
		if m.cc != nil {
			m.cc.Stop()
			m.cc = nil
		}
	}
	b.cancel() // workers end after their current turn
}

// Detach makes the box look paused to the cluster (as under SIGSTOP): it
// stops pulling, heartbeating and announcing itself, so its pins and its
// taken turns move to another box after AckWait, while its running turns
// go on and try to commit when they end. For the fault harness and tests;
// Stop still ends it.
func (b *Box) Detach() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.members {
		if m.cc != nil {
			m.cc.Stop()
			m.cc = nil
		}
	}
	select {
	case <-b.detached:
	default:
		close(b.detached)
	}
}

// Kill makes the box look dead to the cluster (as after kill -9): it
// leaves its partitions and closes its connection; a turn it was running
// ends without a way to commit. For the fault harness and tests.
func (b *Box) Kill() {
	b.Detach()
	b.f.nc.Close()
}

func (b *Box) work(q chan item) {
	defer b.workers.Done()
	for {
		select {
		case it := <-q:
			switch {
			case it.fn != nil:
				it.fn()
			case b.delivered != nil:
				b.handle(b.delivered(it.msg))
			default:
				b.handle(it.msg)
			}
		case <-b.ctx.Done():
			return
		}
	}
}

func (b *Box) emit(e Event) {
	e.Box = b.opts.Name
	if b.opts.OnEvent != nil {
		b.opts.OnEvent(e)
	}
}

// handle takes one delivered turn: already committed turns are
// acknowledged; otherwise claim, execute, commit, acknowledge.
func (b *Box) handle(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		b.log.Error("fleet turn without metadata: dropped", "err", err)
		_ = m.Term()
		return
	}
	seq := meta.Sequence.Stream
	b.sawEngineTime(meta.Timestamp)
	var t Turn
	if len(m.Data()) > MaxTurnBytes || json.Unmarshal(m.Data(), &t) != nil || t.Validate() != nil {
		// Only a box or a fleet client with publish rights wrote this: the
		// content is not logged.
		b.log.Error("fleet turn malformed: terminated without a reply", "seq", seq, "bytes", len(m.Data()))
		_ = m.TermWithReason("malformed turn")
		return
	}
	log := b.log.With("turn", t.ID, "seq", seq, "attempt", meta.NumDelivered)
	// Heartbeat from the take to the ack, the commit's writes included: a
	// loaded box's commit may outlast the ack wait, and a redelivery then
	// would run the turn again for nothing.
	done := make(chan struct{})
	defer close(done)
	go b.heartbeat(m, done)
	t0 := time.Now()
	defer func() {
		log.Debug("fleet turn handled", "partition", Partition(t.Channel, b.f.layout.Partitions), "took_ms", time.Since(t0).Milliseconds())
	}()
	ev := Event{Channel: t.Channel, TurnID: t.ID, Seq: seq, Attempt: meta.NumDelivered}
	ev.Steps.Delivered = t0.Sub(meta.Timestamp)
	// lap is the time since the previous lap (the steps of ev.Steps).
	last := t0
	lap := func() time.Duration {
		now := time.Now()
		d := now.Sub(last)
		last = now
		return d
	}
	key := channelKey(t.Channel)
	var (
		replyErr, modeErr error
		mode              ChannelMode
		st                ChannelState
		rev, claimRev     uint64
		claim             ChannelState
		claimed           bool
	)
	if r, ok := b.remembered(t.Channel); ok && r.st.LastTurn != t.ID && r.st.LastSeq < seq {
		claim = claimOf(r.st, t, seq, b.opts.Name)
		replyErr, mode, modeErr, claimRev, claimed = b.takeRemembered(t, key, claim, r.rev)
		st, rev = r.st, r.rev
	}
	if !claimed {
		replyErr, mode, modeErr, st, rev, err = b.readTake(t, true)
	}
	ev.Steps.Read = lap()
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	if errors.Is(modeErr, ErrInvalid) {
		// Only a box could have written it: the channel counts as never
		// set (its turns are answered "mode off") until a box sets it
		// again, rather than returned for ever.
		log.Warn("fleet channel mode invalid: taken as not set", "err", modeErr)
		mode, modeErr = ChannelMode{Channel: t.Channel}, nil
	}
	if err == nil && modeErr != nil {
		err = fmt.Errorf("channel mode: %w", modeErr)
	}
	if replyErr == nil {
		b.ack(ctx, m, log)
		ev.Kind = EventAnswered
		b.emit(ev)
		return
	}
	if errors.Is(err, ErrInvalid) && modeErr == nil {
		// The state is there but does not decode (only a box, or a version
		// of the family, wrote it): no redelivery can read it, so the turn
		// is answered as failed at once, not retried, and the operator
		// repairs the channel (docs/fleet.md, *Repairing a channel*).
		log.Error("fleet channel state does not decode: turn answered as failed; repair the channel: sandbox-host fleet channel show|reset", "channel", t.Channel, "err", err)
		b.giveUp(m, ev, t, log)
		return
	}
	if err != nil {
		log.Warn("fleet channel state unreadable: turn returned", "err", err)
		b.returnTurn(m, ev, t, log, true)
		return
	}
	if !claimed && (st.LastTurn == t.ID || st.LastSeq >= seq) {
		// Committed already (its reply maybe not yet published: the
		// committing box died in between) or overtaken by a later turn.
		if st.LastTurn == t.ID && st.LastReply != nil {
			// Tried again in place like the committing box's (inplace.go):
			// a box that committed and was cut from the replies' leader
			// hands the turn here, often during that leader's election.
			if err := b.publishReplyInPlace(*st.LastReply, log); err != nil {
				log.Warn("fleet reply not published: turn returned", "err", err)
				b.returnTurn(m, ev, t, log, false)
				return
			}
		}
		b.ack(ctx, m, log)
		ev.Kind = EventAnswered
		b.emit(ev)
		return
	}
	if !claimed {
		// The claim: every take writes the channel, so a box that took the
		// turn before us (and may still be running it) can no longer commit.
		claim = claimOf(st, t, seq, b.opts.Name)
		// A write refused for want of a leader, or unanswered, is tried
		// again in place at the same revision (inplace.go).
		claimRev, err = b.putStateInPlace(key, claim, rev, log)
		if err != nil {
			b.refusedOrReturned(m, ev, t, err, log, "claim")
			return
		}
	}
	ev.Steps.Claim = lap()
	ev.Kind, ev.Runs = EventTaken, claim.ClaimRuns
	b.emit(ev)

	out, runErr := b.execute(m, t, seq, meta.Timestamp, st, mode, claimRev, meta.NumDelivered)
	ev.Steps.Run = lap()
	if errors.Is(runErr, errWorkspaceUnread) {
		// The cluster's failure, not the turn's: returned, not failed.
		log.Warn("fleet committed workspace unreadable: turn returned", "err", runErr)
		b.returnTurn(m, ev, t, log, true)
		return
	}
	if errors.Is(runErr, ErrElsewhere) || b.ctx.Err() != nil {
		b.returnTurn(m, ev, t, log, false)
		return
	}
	ctx, cancel = context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	reply := Reply{TurnID: t.ID, OK: out.OK, Text: out.Text, Box: b.opts.Name, Generation: st.Generation + 1, Seq: seq, Runs: claim.ClaimRuns}
	if runErr != nil {
		log.Warn("fleet turn failed: committed as failed", "err", runErr)
		reply = Reply{TurnID: t.ID, Error: errorKind(runErr), Box: b.opts.Name, Generation: st.Generation + 1, Seq: seq, Runs: claim.ClaimRuns}
		out.Workspace = nil
	}
	next := ChannelState{Channel: t.Channel, Generation: st.Generation + 1, Workspace: st.Workspace, WorkspaceData: st.WorkspaceData,
		LastTurn: t.ID, LastSeq: seq, LastReply: &reply}
	if out.Workspace != nil {
		next.Workspace, next.WorkspaceData = workspaceName(t.Channel, next.Generation, claimRev), nil
		if n := len(out.Workspace); n > 0 && n <= b.opts.InlineBytes {
			// Small: committed inside the state, by the commit's own
			// compare-and-swap (no upload, no object to delete later).
			next.WorkspaceData = out.Workspace
			if b.f.storable(next) != nil {
				next.WorkspaceData = nil // with the reply, over the state's bound: an object
			}
		}
	}
	// Measured as the buckets will store them: a reply they would refuse
	// after the commit landed would be refused on every redelivery too.
	if err := b.f.storable(next); err != nil {
		log.Warn("fleet reply cannot be stored: committed as failed", "text_bytes", len(reply.Text), "err", err)
		reply = reply.failed()
		out.Workspace, next.Workspace, next.WorkspaceData, next.LastReply = nil, st.Workspace, st.WorkspaceData, &reply
	}
	if out.Workspace != nil && !next.inline() {
		if len(out.Workspace) > MaxWorkspaceBytes {
			log.Warn("fleet workspace over its bound: turn returned", "bytes", len(out.Workspace), "limit", MaxWorkspaceBytes)
			b.returnTurn(m, ev, t, log, false)
			return
		}
		// The upload's name is this claim's alone: putting it again after
		// an election's refusal, or a stall (fleetworkspace.TransferBound),
		// overwrites only itself (readTake).
		err := b.f.ws.Put(ctx, next.Workspace, out.Workspace)
		for until := time.Now().Add(2 * b.opts.AckWait); err != nil && b.retryInPlace(until, err); {
			err = b.f.ws.Put(ctx, next.Workspace, out.Workspace)
		}
		if err != nil {
			log.Warn("fleet workspace not stored: turn returned", "err", err)
			b.returnTurn(m, ev, t, log, false)
			return
		}
		// The commit and the reply get a deadline of their own: the
		// upload's retries may have used the first.
		cancel()
		ctx, cancel = context.WithTimeout(b.ctx, opTimeout)
		defer cancel()
	}
	ev.Steps.Upload = lap()
	// The commit point: the state at our claim's revision, or nothing.
	// Refused for want of a leader, or unanswered: the same
	// compare-and-swap again, in place (inplace.go).
	commitRev, err := b.putStateInPlace(key, next, claimRev, log)
	if err != nil {
		if fenced(err) && next.Workspace != st.Workspace && !next.inline() {
			// Refused: the upload is ours alone and nobody refers to it. On
			// any other error the commit may have landed: keep it.
			_ = b.f.ws.Delete(ctx, next.Workspace)
		}
		b.refusedOrReturned(m, ev, t, err, log, "commit")
		return
	}
	ev.Steps.Commit = lap()
	b.remember(next, commitRev)
	err = b.publishReplyInPlace(reply, log)
	if err != nil {
		// Committed: whoever takes the redelivery publishes it from the state.
		log.Warn("fleet reply not published after commit: turn returned", "err", err)
		b.returnTurn(m, ev, t, log, false)
		return
	}
	ev.Steps.Reply = lap()
	b.ackCommitted(m, log)
	ev.Steps.Ack = lap()
	ev.Kind, ev.Generation, ev.Took = EventCommitted, next.Generation, b.opts.Now().Sub(meta.Timestamp)
	if st.Workspace != "" && next.Workspace != st.Workspace && !st.inline() {
		// Superseded: deleted off the partition's path (retire), so that
		// neither the answer nor the partition's next turn waits for it.
		b.retireSnapshot(st.Workspace, log)
	}
	b.emit(ev)
}

// supersededQueue bounds the superseded snapshots waiting for their
// delete (retire); one more is left to the sweep.
const supersededQueue = 64

// retireSnapshot queues a superseded snapshot for its delete, or leaves
// it to the sweep (pkg/fleetworkspace) when the queue is full.
func (b *Box) retireSnapshot(name string, log *slog.Logger) {
	select {
	case b.superseded <- name:
	default:
		log.Warn("fleet superseded workspace snapshot left to the sweep: deletes are behind", "queued", supersededQueue)
	}
}

// retire deletes superseded snapshots, one at a time, until the box
// stops. A snapshot no committed state names is nobody's: no take can
// read it (a take restores what the state it read names, and a state read
// before the commit that superseded it fails that take's claim), so when
// it is deleted does not matter to the fence (docs/fleet.md,
// *Workspaces*); it used to be deleted before the partition's next turn,
// measured as the largest step of the engine's overhead (6.4 ms of
// 18.8 ms at p50, BenchmarkTurnSteps).
func (b *Box) retire() {
	defer b.workers.Done()
	for {
		select {
		case name := <-b.superseded:
			ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
			if err := b.deleteSnapshot(ctx, name); err != nil && b.ctx.Err() == nil {
				// The sweep removes it (unreferenced).
				b.log.Debug("fleet superseded workspace snapshot not deleted: left to the sweep", "snapshot", name, "err", err)
			}
			cancel()
		case <-b.ctx.Done():
			return
		}
	}
}

// claimOf is the claim of turn t (sequence seq) by box on a channel whose
// state is st.
func claimOf(st ChannelState, t Turn, seq uint64, box string) ChannelState {
	claim := st
	claim.ClaimRuns = 1
	if st.ClaimTurn == t.ID && st.ClaimSeq == seq {
		// Taken before and never committed: this run is at least the
		// second (counted: the audit, sandbox_fleet_double_runs_total).
		claim.ClaimRuns = max(st.ClaimRuns, 1) + 1
	}
	claim.Channel, claim.Owner, claim.ClaimTurn, claim.ClaimSeq = t.Channel, box, t.ID, seq
	return claim
}

// rememberBytes bounds a state a box remembers (remember): one per
// partition it committed on.
const rememberBytes = 160 << 10

// remember records the state a commit of this box wrote, at its
// revision, as its partition's; one too large to keep is forgotten.
func (b *Box) remember(st ChannelState, rev uint64) {
	p := Partition(st.Channel, b.f.layout.Partitions)
	keep := len(st.WorkspaceData) <= InlineWorkspaceBytes && (st.LastReply == nil || len(st.LastReply.Text) <= rememberBytes-InlineWorkspaceBytes)
	b.committedMu.Lock()
	defer b.committedMu.Unlock()
	if keep && rev != 0 {
		b.committed[p] = rememberedState{st: st, rev: rev}
	} else {
		delete(b.committed, p)
	}
}

// remembered is the state this box's last commit on the channel's
// partition wrote, when it was of this channel.
func (b *Box) remembered(channel string) (rememberedState, bool) {
	b.committedMu.Lock()
	defer b.committedMu.Unlock()
	r, ok := b.committed[Partition(channel, b.f.layout.Partitions)]
	return r, ok && r.st.Channel == channel
}

// takeRemembered takes turn t on the state this box's own last commit
// wrote (revision rev): the claim is sent at once, beside the reads of
// the turn's reply and the channel's mode, instead of after a read of the
// state. The fence is the same compare-and-swap: the claim lands only if
// rev is still the channel's latest revision, and then the state is the
// one this box wrote there (a revision names one message), so the claim
// is exactly what a read-then-claim would have written. Refused (another
// box, or a repair, wrote since) or failed, the take is done the usual
// way (readTake, then the claim); a claim that timed out may have landed,
// and the usual take then counts the turn's run twice (ClaimRuns).
// Measured: the take's read was a round trip of 0.7 ms (in process) to
// 2.6 ms (fleetbench) at p50 before every claim (docs/fleet.md, *Engine
// overhead*).
func (b *Box) takeRemembered(t Turn, key string, claim ChannelState, rev uint64) (replyErr error, mode ChannelMode, modeErr error, claimRev uint64, claimed bool) {
	ctx, cancel := context.WithTimeout(b.ctx, max(b.opts.AckWait/2, time.Second))
	defer cancel()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		claimRev, err = b.f.putState(ctx, key, claim, rev)
	}()
	replyErr, mode, modeErr, _, _, _ = b.readTake(t, false)
	<-done
	if err != nil {
		b.committedMu.Lock()
		delete(b.committed, Partition(t.Channel, b.f.layout.Partitions))
		b.committedMu.Unlock()
		return replyErr, mode, modeErr, 0, false
	}
	return replyErr, mode, modeErr, claimRev, true
}

// readTake reads what taking turn t needs: whether it has a reply, the
// channel's mode and, with state, its state (independent: one round
// trip). A read the
// cluster answers at once with "no leader" (an election: 503, or no
// responders) is tried again in place every electionRetry for up to
// 2 x AckWait, the turn heartbeated meanwhile, instead of handing the turn
// back: a returned turn waits out its redelivery delay (up to AckWait)
// after the leader is back, spends one of its MaxAttempts, and three in a
// row step the box back from its partition, a hand-over that adds its own
// wait (docs/fleet.md, *Failure model*). A box that should step
// back (its probe fails while another box's succeeds) stops retrying, so
// the turn goes to the box that can run it.
func (b *Box) readTake(t Turn, state bool) (replyErr error, mode ChannelMode, modeErr error, st ChannelState, rev uint64, err error) {
	until := time.Now().Add(2 * b.opts.AckWait)
	for {
		// Each round bounded by half the ack wait, not opTimeout: a read
		// sent to a leader on a server just killed or cut off is never
		// answered, and waiting 10 s for it (measured: the cut link's
		// failovers) is waiting past the election that replaces it.
		ctx, cancel := context.WithTimeout(b.ctx, max(b.opts.AckWait/2, time.Second))
		replied := make(chan struct{}, 2)
		go func() {
			_, replyErr = b.f.replies.Get(ctx, t.ID)
			replied <- struct{}{}
		}()
		go func() {
			mode, _, modeErr = b.f.Mode(ctx, t.Channel)
			replied <- struct{}{}
		}()
		if state {
			st, rev, err = b.f.Channel(ctx, t.Channel)
		}
		<-replied
		<-replied
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut && (err != nil || modeErr != nil) && b.ctx.Err() == nil {
			// Unanswered within the round: tried again like an election's
			// refusal (retryInPlace stops it for a box that should step
			// back, the one cut off).
			err, modeErr = unanswered(err), unanswered(modeErr)
		}
		if !b.retryInPlace(until, err, modeErr) {
			return
		}
	}
}

// errUnanswered: a take's read, or a write tried again in place (inplace.go),
// had no answer within its round.
var errUnanswered = errors.New("no answer within the call's round")

func unanswered(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errUnanswered, err)
}

// electionRetry is how often a box tries a read again in place while the
// cluster has no leader for it (readTake, retryWrite).
const electionRetry = 250 * time.Millisecond

// retryInPlace: one of errs says the cluster has no leader for the call
// right now (and none is another kind of failure), there is time left
// before until, and this box should not step back; it waits electionRetry
// and says whether to try again.
func (b *Box) retryInPlace(until time.Time, errs ...error) bool {
	election := false
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !leaderless(err) {
			return false
		}
		election = true
	}
	if !election || time.Now().Add(electionRetry).After(until) {
		return false
	}
	if now := b.opts.Now(); !b.healthy(now) && b.view.anyHealthy(now) {
		return false
	}
	t := time.NewTimer(electionRetry)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-b.ctx.Done():
	case <-b.detached:
	}
	return false
}

// leaderless: the cluster answered at once that it has no leader for the
// call (JetStream's 503 "temporarily unavailable", given while a stream's
// or the meta group's leader is being elected), nobody answered the
// request at all, or a snapshot's read stalled within its bound (its
// consumer made while the store had no leader). A call that waits out its
// deadline is not, unless its caller marks it (unanswered): a read, or a
// write tried again at the same revision (inplace.go); retryInPlace stops
// a box that may be the one cut off, which hands the turn back.
func leaderless(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code == 503 {
		return true
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, errUnanswered) ||
		errors.Is(err, fleetworkspace.ErrStalled)
}

// execute runs the turn while heartbeating it, until the executor returns.
func (b *Box) execute(m jetstream.Msg, t Turn, seq uint64, published time.Time, st ChannelState, mode ChannelMode, claimRev, attempt uint64) (Output, error) {
	late := &TurnError{Kind: ErrorDeadline, Err: errors.New("deadline passed before the turn was taken")}
	var ctx context.Context
	var cancel context.CancelFunc
	if t.TimeoutMs > 0 {
		// Aged on the engine's clock, run on this box's monotonic one: no
		// two boxes' wall clocks are compared.
		left := time.Duration(t.TimeoutMs)*time.Millisecond - max(0, b.engineTime().Sub(published))
		if left <= 0 {
			return Output{}, late
		}
		ctx, cancel = context.WithTimeout(b.ctx, left)
	} else {
		deadline := time.UnixMilli(t.DeadlineUnixMs)
		if !b.opts.Now().Before(deadline) {
			return Output{}, late
		}
		ctx, cancel = context.WithDeadline(b.ctx, deadline)
	}
	defer cancel()
	if attempt > b.opts.MaxAttempts {
		return Output{}, fmt.Errorf("delivered %d times, the limit is %d", attempt, b.opts.MaxAttempts)
	}
	var unread error
	in := Input{Turn: t, Seq: seq, Generation: st.Generation, Attempt: attempt, Mode: mode,
		Snapshot: st.Workspace, NextSnapshot: workspaceName(t.Channel, st.Generation+1, claimRev),
		Restore: func(ctx context.Context) ([]byte, error) {
			// Bounded apart from the turn's deadline: an object read whose
			// chunks stop coming (its server killed mid-read) otherwise
			// waits for the deadline, the turn heartbeated and its
			// partition held all that time.
			rctx, cancel := context.WithTimeout(ctx, restoreTimeout)
			defer cancel()
			// Tried again in place through an election, as the take's
			// reads (readTake).
			if st.inline() {
				// Committed inside the state the take read.
				return slices.Clone(st.WorkspaceData), nil
			}
			until := time.Now().Add(2 * b.opts.AckWait)
			for {
				ws, err := b.f.object(rctx, st.Workspace)
				if err != nil && b.retryInPlace(until, err) {
					continue
				}
				if err != nil {
					unread = err
				}
				return ws, err
			}
		}}
	out, err := b.opts.Executor.Execute(ctx, in)
	if err != nil && unread != nil {
		return out, fmt.Errorf("%w: %w", errWorkspaceUnread, unread)
	}
	return out, err
}

// sawEngineTime advances the engine's clock as this box knows it.
func (b *Box) sawEngineTime(ts time.Time) {
	if ts.IsZero() {
		return
	}
	n := ts.UnixNano()
	for {
		cur := b.engineNow.Load()
		if n <= cur || b.engineNow.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (b *Box) engineTime() time.Time { return time.Unix(0, b.engineNow.Load()) }

// restoreTimeout bounds reading a committed workspace (at most
// MaxWorkspaceBytes).
const restoreTimeout = 30 * time.Second

// errWorkspaceUnread: the executor failed because the committed workspace
// could not be read from the cluster; the turn is returned, not failed.
var errWorkspaceUnread = errors.New("the committed workspace could not be read")

// heartbeat tells the server the turn is being worked on, so it is not
// redelivered while this box is alive and attached.
func (b *Box) heartbeat(m jetstream.Msg, done chan struct{}) {
	t := time.NewTicker(b.opts.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = m.InProgress()
		case <-done:
			return
		case <-b.detached:
			return
		}
	}
}

// fenced: the write was refused because the channel changed since the
// revision it expected.
func fenced(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

func (b *Box) refusedOrReturned(m jetstream.Msg, ev Event, t Turn, err error, log *slog.Logger, step string) {
	if fenced(err) {
		// Another box took the channel's turn since: it runs it. No ack,
		// no nak (the delivery is no longer ours to settle).
		log.Info("fleet "+step+" refused by the fence: another box took the turn; work dropped", "channel_owner_changed", true)
		ev.Kind = EventRefused
		b.emit(ev)
		return
	}
	log.Warn("fleet "+step+" failed on the cluster: turn returned", "err", err)
	b.returnTurn(m, ev, t, log, true)
}

// returnTurn hands the turn back for its redelivery (cluster: the
// cluster failed this box on it), or ends it once it was delivered more
// often than MaxAttempts. Every path that hands a turn back comes here, so
// a turn the cluster refuses on every delivery cannot hold its partition
// (one turn in flight per partition) for ever.
func (b *Box) returnTurn(m jetstream.Msg, ev Event, t Turn, log *slog.Logger, cluster bool) {
	switch {
	case ev.Attempt > b.opts.MaxAttempts && b.ctx.Err() == nil:
		b.giveUp(m, ev, t, log)
	case cluster:
		b.clusterFailed(m, ev)
	default:
		b.giveBack(m, ev)
	}
}

// giveUp ends a turn delivered more often than MaxAttempts that still
// cannot get through the cluster: a failed reply where one can be stored
// (its frontend gets a failure rather than waiting out its deadline),
// then the delivery terminated so that the partition's next turn comes.
// The reply's Generation 0 says nothing was committed.
func (b *Box) giveUp(m jetstream.Msg, ev Event, t Turn, log *slog.Logger) {
	log.Error("fleet turn given up: delivered more often than the bound and still refused by the cluster; answered as failed", "max_attempts", b.opts.MaxAttempts)
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	if err := b.f.putReply(ctx, Reply{TurnID: t.ID, Error: ErrorFailed, Box: b.opts.Name, Seq: ev.Seq}); err != nil && !errors.Is(err, errReplyDiffers) {
		log.Error("fleet given-up turn's failed reply not stored: its frontend waits out its deadline", "err", err)
	}
	// A lost term is a redelivery, answered from the reply or given up
	// again.
	_ = m.TermWithReason("delivered more often than MaxAttempts")
	ev.Kind = EventGivenUp
	b.emit(ev)
}

// clusterFailed returns a turn the cluster failed this box on; after
// maxClusterFailures in a row on its partition the box steps back from it
// for a while (membership), so that a box pinned where it cannot work does
// not hold it.
func (b *Box) clusterFailed(m jetstream.Msg, ev Event) {
	if mb := b.memberOf(m); mb != nil {
		mb.failures.Add(1)
	}
	b.giveBack(m, ev)
}

// giveBack leaves the turn uncommitted and asks for its redelivery (to
// this box's successor when it stops), after a delay that doubles with
// each delivery (AckWait/4 up to AckWait): a cluster that fails every
// take for a while (a lost quorum) is not hammered, nor the turn's
// attempts spent in a second. At most AckWait, not more: the delay is
// waited out even when the cluster is back a moment after the nak, so it
// adds to the failover (docs/fleet.md, *Failure model*); an election's
// refusals are retried in place instead (readTake).
func (b *Box) giveBack(m jetstream.Msg, ev Event) {
	_ = m.NakWithDelay(nakDelay(b.opts.AckWait, ev.Attempt))
	ev.Kind = EventReturned
	b.emit(ev)
}

func nakDelay(ackWait time.Duration, attempt uint64) time.Duration {
	d := max(ackWait/4, 50*time.Millisecond)
	for i := uint64(1); i < attempt && d < ackWait; i++ {
		d *= 2
	}
	return min(d, ackWait)
}

// publishReply stores a committed reply. One the bucket would refuse (a
// commit made before replies were measured as stored) is published as
// failed: refused on every redelivery, it would hold its partition.
func (b *Box) publishReply(ctx context.Context, r Reply, log *slog.Logger) error {
	err := b.f.putReply(ctx, r)
	if errors.Is(err, ErrInvalid) {
		log.Warn("fleet committed reply cannot be stored: published as failed", "err", err)
		err = b.f.putReply(ctx, r.failed())
	}
	if errors.Is(err, errReplyDiffers) {
		// Create-only: the frontend was (or will be) answered with the
		// first reply stored, which disagrees with this commit's.
		log.Warn("fleet turn already has another reply stored: that reply stands, not the committed one", "generation", r.Generation)
		return nil
	}
	return err
}

// ackCommitted acknowledges a turn whose commit and reply landed: the ack
// is sent, its confirmation not waited for. Nothing waits for it: a lost
// ack is a redelivery, answered from the reply, and the partition's next
// turn is delivered only once the server has the ack (MaxAckPending 1),
// whoever waits. Waiting for the confirmation was 1.5 ms (in process) to
// 2.8 ms (fleetbench) of each committed turn at p50 (docs/fleet.md,
// *Engine overhead*). The order stays: the ack is sent after the reply
// is stored. The cluster took this box's commit and reply, so the
// partition's run of cluster failures ends here (clusterFailed).
func (b *Box) ackCommitted(m jetstream.Msg, log *slog.Logger) {
	if mb := b.memberOf(m); mb != nil {
		mb.failures.Store(0)
	}
	if err := m.Ack(); err != nil {
		// Only a connection closed for good: the turn is redelivered and
		// answered from its reply.
		log.Debug("fleet ack not sent", "err", err)
	}
}

func (b *Box) ack(ctx context.Context, m jetstream.Msg, log *slog.Logger) {
	// A lost ack only means a redelivery, answered from the reply.
	if err := m.DoubleAck(ctx); err != nil {
		log.Debug("fleet ack not confirmed", "err", err)
		return
	}
	if mb := b.memberOf(m); mb != nil {
		mb.failures.Store(0)
	}
}
