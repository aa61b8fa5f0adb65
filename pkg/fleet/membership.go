package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"
)

// Membership: which partitions a box pulls, and how a partition's pin
// comes back to its home box.
//
// Every partition is one durable pull consumer of the turns group (the
// consumer pcgroups' static groups make, member pN, pinned priority
// policy): the pinned puller owns the partition, the other pullers are hot
// standbys, and the server moves the pin when the owner stops pulling for
// PinnedTTL (dead, cut off, paused). A box supervises its pulls itself
// rather than through pcgroups.StaticConsume, whose consume stops for good
// on a terminal pull error (409 Consumer Deleted, 400) without telling its
// member and whose config watcher spins once its watch closes: a box that
// stayed "joined" that way pulled nothing, and a partition could be left to
// no box at all. Here a pull that ended by itself is started again, the
// consumer made again when it is gone.
//
// The pin returns home: a box announces, on presenceSubject, the home
// partitions it is pulling while its cluster answers it (a JetStream
// request to the meta leader). Another box starts pulling a partition that
// is not its home once the home box does not announce it (unheard for
// presenceTimeout: dead, cut off, paused, or its cluster not answering),
// and stops once the home box has announced it for StandbyDelay: it
// finishes the turn it holds (one unacknowledged turn per partition: the
// home box gets nothing before its ack), hands the pin over, and the home
// box is the only puller left. Failover therefore costs the presence
// timeout on top of the pin's TTL; a channel's turns never run on two
// boxes at once by the handover, and the fence refuses any commit of a box
// whose claim was overtaken whatever the pins did.

// presenceSubject carries the boxes' announcements (under sandbox.>,
// within a box's permissions).
const presenceSubject = "sandbox.fleet.presence"

// maxPresenceBytes bounds an announcement (another box wrote it).
const maxPresenceBytes = 8 << 10

// announcement is what a box tells the others every presence interval.
type announcement struct {
	Box string `json:"box"`
	// Inc is the box process's incarnation: a restarted box stands by
	// afresh.
	Inc string `json:"inc"`
	// Parts are the home partitions the box is pulling, its cluster
	// answering.
	Parts []int `json:"parts"`
	// Healthy: the box's probe reaches what turns need (Fleet.Reach). A
	// box that cannot steps back only while another box is healthy: when
	// none is (an election of a leader every box needs), stepping back
	// would only add a hand-over to the wait.
	Healthy bool `json:"healthy,omitempty"`
}

// peerState is what a box knows of another box from its announcements.
type peerState struct {
	inc     string
	last    time.Time
	healthy bool              // its last announcement said so
	since   map[int]time.Time // partition -> announced continuously since
}

// presence is a box's view of the other boxes.
type presence struct {
	mu      sync.Mutex
	peers   map[string]*peerState
	timeout time.Duration
}

func (pr *presence) observe(a announcement, now time.Time, partitions int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	ps := pr.peers[a.Box]
	if ps == nil || ps.inc != a.Inc || now.Sub(ps.last) > pr.timeout {
		ps = &peerState{inc: a.Inc, since: map[int]time.Time{}}
		pr.peers[a.Box] = ps
	}
	ps.last, ps.healthy = now, a.Healthy
	announced := map[int]bool{}
	for _, p := range a.Parts {
		if p < 0 || p >= partitions {
			continue
		}
		announced[p] = true
		if _, ok := ps.since[p]; !ok {
			ps.since[p] = now
		}
	}
	for p := range ps.since {
		if !announced[p] {
			delete(ps.since, p)
		}
	}
}

// anyHealthy: another box, heard within the presence timeout, announced
// itself healthy.
func (pr *presence) anyHealthy(now time.Time) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, ps := range pr.peers {
		if ps.healthy && now.Sub(ps.last) <= pr.timeout {
			return true
		}
	}
	return false
}

// announcedFor is how long box has announced partition p without a gap
// longer than the presence timeout (ok false: it does not announce it).
func (pr *presence) announcedFor(box string, p int, now time.Time) (time.Duration, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	ps := pr.peers[box]
	if ps == nil || now.Sub(ps.last) > pr.timeout {
		return 0, false
	}
	since, ok := ps.since[p]
	return now.Sub(since), ok
}

// standBy: whether a box that is not partition p's home pulls it. It
// starts once the home box does not announce p (away, cut off, paused,
// its cluster not answering it), and stops only once the home box has
// announced p for StandbyDelay (it stood by that long: it is back).
func (b *Box) standBy(m *member, now time.Time) bool {
	d, announced := b.view.announcedFor(b.homeOf(m.p), m.p, now)
	if m.cc != nil {
		return !announced || d < b.opts.StandbyDelay
	}
	return !announced
}

// member is the box's pull on one partition's consumer.
type member struct {
	p    int
	name string // the durable consumer (pcgroups' name for member pN)
	cons jetstream.Consumer
	// cc is the running pull (nil while the box does not pull the
	// partition); one that ended without the box stopping it is started
	// again, its consumer made again.
	cc  jetstream.ConsumeContext
	pin pinRef
	// failures counts the partition's turns in a row the cluster failed
	// this box on; at maxClusterFailures the box steps back from the
	// partition until backOffUntil (b.mu).
	failures     atomic.Int32
	backOffUntil time.Time
}

// pinRef is the last pin id the server delivered this box a turn under.
type pinRef struct {
	mu sync.Mutex
	id string
}

func (r *pinRef) set(id string) {
	r.mu.Lock()
	r.id = id
	r.mu.Unlock()
}

func (r *pinRef) get() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// pulling: the member's pull is running (not stopped, not ended by itself).
func (m *member) pulling() bool {
	if m.cc == nil {
		return false
	}
	select {
	case <-m.cc.Closed():
		return false
	default:
		return true
	}
}

// consumerConfig is the partition's consumer, exactly as pcgroups makes a
// static member's (so pcgroups' tools, ListStaticActiveMembers and
// StaticMemberStepDown, still apply).
func (b *Box) consumerConfig(p int) jetstream.ConsumerConfig {
	name := memberName(p)
	filters := pcgroups.GeneratePartitionFilters(b.group.Members, b.group.MaxMembers, b.group.MemberMappings, name, ">")
	return jetstream.ConsumerConfig{
		Durable:   TurnsGroup + "-" + name,
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   b.opts.AckWait,
		// One unacknowledged turn per partition: a channel's turns one at
		// a time, in order, whichever box holds the pin.
		MaxAckPending:  1,
		MaxDeliver:     -1,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		FilterSubjects: filters,
		PriorityGroups: []string{pinGroup},
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      max(b.opts.AckWait, time.Second),
	}
}

// pinGroup is pcgroups' priority group name.
const pinGroup = "PCG"

// ensureConsumer makes (or finds) partition p's consumer (b.mu held).
func (b *Box) ensureConsumer(ctx context.Context, m *member) error {
	if m.cons != nil {
		return nil
	}
	cons, err := b.f.js.CreateConsumer(ctx, TurnsStream, b.consumerConfig(m.p))
	if err != nil {
		return fmt.Errorf("fleet box %s: partition %d's consumer: %w", b.opts.Name, m.p, err)
	}
	m.cons = cons
	return nil
}

// startPull starts pulling partition p (b.mu held).
func (b *Box) startPull(ctx context.Context, m *member) error {
	if err := b.ensureConsumer(ctx, m); err != nil {
		return err
	}
	q := b.queues[m.p]
	handler := func(msg jetstream.Msg) {
		if id := msg.Headers().Get("Nats-Pin-Id"); id != "" && id != m.pin.get() {
			m.pin.set(id)
			// Where a failover's time went: when the server pinned this
			// box on the partition (docs/fleet.md, *Failure model*).
			b.log.Info("fleet box pinned on a partition", "partition", m.p, "home", b.homeOf(m.p))
		}
		// The handler only queues: the turn runs in the partition's
		// worker, so the pull goes on (and the pin stays) meanwhile. It
		// never blocks: a redelivery while the queue is full comes again.
		select {
		case q <- item{msg: msg}:
		default:
		}
	}
	expiry := max(b.opts.AckWait/2, time.Second)
	cc, err := m.cons.Consume(handler, jetstream.PullExpiry(expiry), jetstream.PullPriorityGroup(pinGroup),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			b.log.Debug("fleet pull on a partition reported", "partition", m.p, "err", err)
		}))
	if err != nil {
		m.cons = nil // made again on the next try
		return fmt.Errorf("fleet box %s: pull partition %d: %w", b.opts.Name, m.p, err)
	}
	m.cc = cc
	return nil
}

// stopPull stops pulling partition p (b.mu held); handOver, when the box
// may hold the pin, hands it to the remaining pullers once the worker has
// settled what it holds.
func (b *Box) stopPull(m *member, handOver bool) {
	if m.cc == nil {
		return
	}
	m.cc.Stop()
	m.cc = nil
	if !handOver || m.pin.get() == "" {
		return
	}
	pin := m.pin.get()
	// Queued behind the turn the worker holds: the pin moves after its
	// ack, so the next owner never runs a turn of ours still running.
	it := item{fn: func() { b.handOver(m, pin) }}
	select {
	case b.queues[m.p] <- it:
	default:
		// A full queue: the pin moves when its TTL runs out instead.
	}
}

// handOver unpins partition m.p when the server still pins this box
// there and the box has not taken it up again (in the partition's
// worker, after what was queued before).
func (b *Box) handOver(m *member, pin string) {
	b.mu.Lock()
	again := m.cc != nil
	cons := m.cons
	b.mu.Unlock()
	if again || cons == nil || b.ctx.Err() != nil || b.isDetached() {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		b.log.Debug("fleet hand-over: consumer info", "partition", m.p, "err", err)
		return
	}
	for _, g := range info.PriorityGroups {
		if g.Group != pinGroup || g.PinnedClientID != pin {
			continue
		}
		s, err := b.f.js.Stream(ctx, TurnsStream)
		if err == nil {
			err = s.UnpinConsumer(ctx, m.name, pinGroup)
		}
		if err != nil {
			b.log.Info("fleet hand-over: unpin refused; the pin moves when its TTL ends", "partition", m.p, "err", err)
			return
		}
		b.log.Info("fleet box handed a partition back to its home box", "partition", m.p, "home", b.homeOf(m.p))
	}
}

// homeOf is partition p's home box by the balanced assignment over Peers
// ("" without peers).
func (b *Box) homeOf(p int) string {
	if len(b.peers) == 0 {
		return ""
	}
	return b.peers[p%len(b.peers)]
}

// presenceInterval is how often a box announces itself and reconciles its
// pulls; presenceTimeout how long an unheard box still counts as there.
func (b *Box) presenceInterval() time.Duration { return max(b.opts.AckWait/3, 100*time.Millisecond) }
func (b *Box) presenceTimeout() time.Duration  { return 3 * b.presenceInterval() }

// maxClusterFailures: a partition's turns handed back in a row because
// the cluster failed this box (state unreadable, claim or commit failing
// on the cluster) before the box stops pulling it for StandbyDelay, so
// that a box pinned where it cannot work lets another box take it. Per
// partition: a leader election fails one turn on each.
const maxClusterFailures = 3

// membership runs the box's pulls until it stops or detaches: every
// presence interval it announces itself, then starts the pulls it should
// have (again, when one ended by itself) and stops the others.
func (b *Box) membership() {
	defer b.workers.Done()
	sub, err := b.f.nc.Subscribe(presenceSubject, func(msg *nats.Msg) {
		if len(msg.Data) > maxPresenceBytes {
			return
		}
		var a announcement
		// Another box wrote it: only a listed peer's well-formed
		// announcement counts, and nothing of it is logged.
		if json.Unmarshal(msg.Data, &a) != nil || a.Box == b.opts.Name || !slices.Contains(b.peers, a.Box) {
			return
		}
		b.view.observe(a, b.opts.Now(), b.f.layout.Partitions)
	})
	if err != nil {
		b.log.Error("fleet box cannot hear the other boxes: it stands by for every partition", "err", err)
	} else {
		defer sub.Unsubscribe()
	}
	go b.probe()
	t := time.NewTicker(b.presenceInterval())
	defer t.Stop()
	for {
		b.reconcile()
		select {
		case <-t.C:
		case <-b.ctx.Done():
			return
		case <-b.detached:
			return
		}
	}
}

// probe asks, every presence interval, what a turn needs of the cluster
// (Fleet.Reach): the meta leader, and the leaders of the channels bucket
// and the workspace store. A box announces its partitions, and pulls
// them, only while its cluster answers it: one that cannot reach those
// leaders (a partial cut: its server still routes to the meta leader but
// not to theirs) steps back within presenceTimeout + 2 x presenceInterval
// (5/3 of the ack wait: 8.3 s by default) instead of failing each turn on
// its timeouts, as long as another box announces itself healthy
// (docs/fleet.md, *Failure model*).
func (b *Box) probe() {
	t := time.NewTicker(b.presenceInterval())
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(b.ctx, b.presenceTimeout())
		latest, err := b.f.Reach(ctx)
		cancel()
		b.sawEngineTime(latest)
		if err == nil {
			b.probeOK.Store(b.opts.Now().UnixNano())
		} else {
			b.log.Debug("fleet probe: the cluster does not answer this box", "err", err)
		}
		select {
		case <-t.C:
		case <-b.ctx.Done():
			return
		case <-b.detached:
			return
		}
	}
}

func (b *Box) healthy(now time.Time) bool {
	ok := b.probeOK.Load()
	return ok != 0 && now.Sub(time.Unix(0, ok)) <= b.presenceTimeout()+b.presenceInterval()
}

// reconcile is one round of membership.
func (b *Box) reconcile() {
	now := b.opts.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx.Err() != nil || b.isDetached() {
		return
	}
	standby := now.Sub(b.started) >= b.opts.StandbyDelay
	healthy := b.healthy(now)
	// Step back only for a box that can take over: when no other box
	// reaches the leaders either, every box waits for them where it is.
	stepBack := !healthy && b.view.anyHealthy(now)
	if stepBack != b.steppedBack {
		b.steppedBack = stepBack
		if stepBack {
			b.log.Warn("fleet box cannot reach the leaders its turns need (the meta leader, the channels bucket's, the workspace store's) while another box can: stepping back from every partition", "bound_ms", (b.presenceTimeout() + 2*b.presenceInterval()).Milliseconds())
		} else {
			b.log.Info("fleet box takes its partitions up again (it reaches the leaders its turns need, or no other box does)")
		}
	}
	var announce []int
	// One failed creation per round: the cluster is likely away, and
	// each attempt holds the round for up to its timeout.
	createFailed := false
	for _, m := range b.members {
		// A partition the cluster keeps failing this box on: step back,
		// but only while another box announces that it reaches the
		// cluster. When none does (an election every box waits for), the
		// hand-over would only add the standby's wait (presence timeout,
		// pin TTL) and the step back's own (StandbyDelay) to the
		// election's (docs/fleet.md, *Failure model*).
		if m.failures.Load() >= maxClusterFailures {
			m.failures.Store(0)
			if b.view.anyHealthy(now) {
				m.backOffUntil = now.Add(b.opts.StandbyDelay)
				b.log.Warn("fleet box stepping back from a partition: its turns keep failing on the cluster", "partition", m.p, "for_ms", b.opts.StandbyDelay.Milliseconds())
			}
		}
		home := b.home(m.p)
		want := !stepBack && !now.Before(m.backOffUntil) && (home || (standby && b.standBy(m, now)))
		if !want {
			// Handing over: a partition whose home box stands by, or one
			// this box steps back from.
			b.stopPull(m, true)
			if standby && m.cons == nil && !createFailed {
				// Ready to stand by at once when the home box goes away,
				// even while the cluster's meta leader is being elected.
				ctx, cancel := context.WithTimeout(b.ctx, b.presenceTimeout())
				if err := b.ensureConsumer(ctx, m); err != nil {
					createFailed = true
				}
				cancel()
			}
			continue
		}
		if m.cc != nil && !m.pulling() {
			// Ended by itself (a terminal pull error, the consumer
			// deleted): made again below.
			b.log.Warn("fleet pull on a partition ended by itself; starting it again", "partition", m.p)
			m.cc, m.cons = nil, nil
		}
		if m.cc == nil {
			if createFailed && m.cons == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(b.ctx, b.presenceTimeout())
			err := b.startPull(ctx, m)
			cancel()
			if err != nil {
				createFailed = true
				b.log.Warn("fleet box cannot pull a partition yet; retrying", "partition", m.p, "err", err)
				continue
			}
			if !home {
				b.log.Info("fleet box stands by for a partition whose home box is away", "partition", m.p, "home", b.homeOf(m.p))
			}
		}
		if home {
			announce = append(announce, m.p)
		}
	}
	if !healthy || !b.f.nc.IsConnected() {
		announce = nil
	}
	if len(b.peers) > 0 {
		data, _ := json.Marshal(announcement{Box: b.opts.Name, Inc: b.inc, Parts: announce, Healthy: healthy && b.f.nc.IsConnected()})
		_ = b.f.nc.Publish(presenceSubject, data)
	}
}

// memberOf is the member a delivered turn came from (by its subject, the
// stream's "<p>.sandbox.turns.<p>"), nil when it cannot tell.
func (b *Box) memberOf(msg jetstream.Msg) *member {
	subj := msg.Subject()
	p, err := strconv.Atoi(subj[strings.LastIndexByte(subj, '.')+1:])
	if err != nil || p < 0 || p >= len(b.members) {
		return nil
	}
	return b.members[p]
}
