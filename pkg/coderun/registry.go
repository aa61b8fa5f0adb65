package coderun

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// Defaults of RegistryLimits fields left at zero.
const (
	DefaultApprovalTimeout  = 5 * time.Minute
	DefaultRetain           = 15 * time.Minute
	DefaultMaxRetained      = 64
	DefaultMaxActive        = 64
	DefaultMaxOutputBytes   = 1 << 20
	DefaultMaxHistoryBytes  = 4 << 20
	DefaultMaxRetainedBytes = 512 << 20
	DefaultHold             = time.Minute
)

// RegistryLimits bound a Registry. Zero fields take the Default* values.
type RegistryLimits struct {
	// ApprovalTimeout: a network run not approved within it is denied
	// ("approval timed out").
	ApprovalTimeout time.Duration
	// Retain, MaxRetained and MaxRetainedBytes bound how long, how many and
	// how many bytes (output, artifacts, event history) of finished runs stay
	// readable; the oldest finished go first, except that the newest finished
	// run is never pruned for bytes. Unfinished runs are never pruned.
	Retain           time.Duration
	MaxRetained      int
	MaxRetainedBytes int64
	// Hold is how long a finished run stays readable whatever MaxRetained
	// and MaxRetainedBytes say (negative: not at all, for runs no client
	// reads here); a run being read is pruned only past Retain. Runs held
	// over those bounds take the room of new ones: Create refuses
	// (ErrBusy) while the finished runs' bytes and a reservation of
	// RunBytes per unfinished run would pass MaxRetainedBytes + MaxActive
	// x RunBytes (or their count MaxRetained + MaxActive), so the memory
	// bound of the retained and the active runs together still holds.
	Hold time.Duration
	// RunBytes is the most one finished run holds (0: two outputs at
	// MaxOutputBytes and MaxHistoryBytes of events; the host adds its
	// artifact bound).
	RunBytes int64
	// RetainedKeys names the settings behind the held-results refusal (the
	// host's config keys).
	RetainedKeys string
	// Logger hears of every run forgotten (nil: nobody).
	Logger *slog.Logger
	// MaxActive bounds unfinished runs, MaxActivePerOwner those of one
	// owner uid (0: MaxActive); Create returns ErrBusy beyond them.
	MaxActive         int
	MaxActivePerOwner int
	// ActiveKeys and ActivePerOwnerKeys name the settings behind MaxActive
	// and MaxActivePerOwner in ErrBusy's message (the host's config keys).
	ActiveKeys, ActivePerOwnerKeys string
	// MaxOutputBytes bounds Status.Stdout and Status.Stderr, each.
	MaxOutputBytes int
	// MaxHistoryBytes bounds a run's event history (output bytes plus a
	// fixed cost per event). Beyond it the oldest output events are dropped;
	// state and result events never are.
	MaxHistoryBytes int
}

func (l RegistryLimits) withDefaults() RegistryLimits {
	if l.ApprovalTimeout <= 0 {
		l.ApprovalTimeout = DefaultApprovalTimeout
	}
	if l.Retain <= 0 {
		l.Retain = DefaultRetain
	}
	if l.MaxRetained <= 0 {
		l.MaxRetained = DefaultMaxRetained
	}
	if l.MaxRetainedBytes <= 0 {
		l.MaxRetainedBytes = DefaultMaxRetainedBytes
	}
	if l.MaxActive <= 0 {
		l.MaxActive = DefaultMaxActive
	}
	if l.MaxActivePerOwner <= 0 || l.MaxActivePerOwner > l.MaxActive {
		l.MaxActivePerOwner = l.MaxActive
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if l.MaxHistoryBytes <= 0 {
		l.MaxHistoryBytes = DefaultMaxHistoryBytes
	}
	if l.Hold == 0 {
		l.Hold = DefaultHold
	}
	if l.RunBytes <= 0 {
		l.RunBytes = 2*int64(l.MaxOutputBytes) + int64(l.MaxHistoryBytes)
	}
	if l.Logger == nil {
		l.Logger = slog.New(slog.DiscardHandler)
	}
	return l
}

// Registry is the host's in-memory record of runs: it creates them, finds
// them by id, lists them and forgets finished ones past retention. It is safe
// for concurrent use. Nothing survives a restart: a new Registry knows no id
// (the reaper removes the containers of runs the old process left).
type Registry struct {
	lim RegistryLimits
	now func() time.Time

	mu      sync.Mutex
	runs    map[string]*Run
	created uint64 // creation counter: the order of runs created in the same instant
}

// NewRegistry returns an empty registry. now is the clock of every
// timestamp (nil: time.Now); the approval timeout itself runs on a real
// timer of l.ApprovalTimeout, and Approve also refuses once now() passed the
// run's ApprovalDeadline.
func NewRegistry(l RegistryLimits, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{lim: l.withDefaults(), now: now, runs: map[string]*Run{}}
}

// Create records a new run of p (which must have passed Validate) for the
// owner uid. A network run starts in StateAwaitingApproval with its approval
// timer running, any other in StateQueued. It returns ErrBusy when
// MaxActive runs, or MaxActivePerOwner runs of owner, are unfinished (its
// message is for the client), ErrInvalid when p names no mode.
func (g *Registry) Create(p runs.Params, owner int) (*Run, error) {
	if p.Mode() == "" {
		return nil, runs.Invalidf("give either command (shell) or executable with args (argv)")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked()
	active, mine := 0, 0
	for _, r := range g.runs {
		if !r.finished() {
			active++
			if r.owner == owner {
				mine++
			}
		}
	}
	if active >= g.lim.MaxActive {
		return nil, runs.Busyf("too many unfinished runs on this host (at most %d%s); try again when one has finished", g.lim.MaxActive, keys(g.lim.ActiveKeys))
	}
	if mine >= g.lim.MaxActivePerOwner {
		return nil, runs.Busyf("too many unfinished runs of yours (at most %d%s); try again when one has finished", g.lim.MaxActivePerOwner, keys(g.lim.ActivePerOwnerKeys))
	}
	if err := g.roomLocked(active); err != nil {
		return nil, err
	}
	id := ids.NewTurnID()
	for g.runs[id] != nil { // 128 random bits; the loop is for form
		id = ids.NewTurnID()
	}
	g.created++
	r := newRun(id, p.Clone(), owner, g.lim, g.now, g.created)
	g.runs[id] = r
	return r, nil
}

// Get returns the run of that id, or ErrNotFound.
func (g *Registry) Get(id string) (*Run, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked()
	r := g.runs[id]
	if r == nil {
		return nil, runs.ErrNotFound
	}
	return r, nil
}

// List returns every run's Status, newest first, without Stdout, Stderr and
// artifact Data (artifact paths, sizes and errors stay).
func (g *Registry) List() []runs.Status {
	g.mu.Lock()
	g.pruneLocked()
	rs := make([]*Run, 0, len(g.runs))
	for _, r := range g.runs {
		rs = append(rs, r)
	}
	g.mu.Unlock()
	slices.SortFunc(rs, func(a, b *Run) int { return cmp.Compare(b.order, a.order) })
	out := make([]runs.Status, len(rs))
	for i, r := range rs {
		out[i] = r.summary()
	}
	return out
}

func keys(k string) string {
	if k == "" {
		return ""
	}
	return ", " + k
}

// Prune forgets finished runs past the retention bounds now, rather than at
// the next Create, Get or List: the host calls it when a run finishes.
func (g *Registry) Prune() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked()
}

// pruneLocked forgets finished runs older than Retain, then the oldest
// finished beyond MaxRetained, then the oldest finished while all finished
// hold more than MaxRetainedBytes (keeping the newest). Only Retain
// forgets a run being read (its answer ends); none forgets one finished
// less than Hold ago.
func (g *Registry) pruneLocked() {
	now := g.now()
	cutoff, held := now.Add(-g.lim.Retain), now.Add(-max(g.lim.Hold, 0))
	type fin struct {
		id   string
		at   time.Time
		o    uint64
		size int64
	}
	var done []fin // may go, oldest first
	var total int64
	count := 0
	var newest uint64
	for id, r := range g.runs {
		at, size, reading, ok := r.finishedAt()
		if !ok {
			continue
		}
		if at.Before(cutoff) {
			// Even under a reader: one reading slowly enough to meet each
			// event's write deadline would hold the room of new runs for
			// good.
			g.forgetLocked(id, r, "retainSeconds", now.Sub(at), size, true)
			continue
		}
		count++
		total += size
		newest = max(newest, r.order)
		if !reading && !at.After(held) {
			done = append(done, fin{id, at, r.order, size})
		}
	}
	slices.SortFunc(done, func(a, b fin) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.o, b.o)
	})
	for _, f := range done {
		reason := "maxRetained"
		if count <= g.lim.MaxRetained {
			if total <= g.lim.MaxRetainedBytes || f.o == newest {
				break
			}
			reason = "maxRetainedBytes"
		}
		g.forgetLocked(f.id, g.runs[f.id], reason, now.Sub(f.at), f.size, false)
		count--
		total -= f.size
	}
}

// forgetLocked drops a finished run and says so: its client can no longer
// read it (reason: the bound that forgot it).
func (g *Registry) forgetLocked(id string, r *Run, reason string, age time.Duration, size int64, force bool) {
	if !r.release(force) {
		return
	}
	delete(g.runs, id)
	g.lim.Logger.Info("run forgotten", "run", id, "reason", reason, "age_s", int64(age.Seconds()), "bytes", size)
}

// roomLocked refuses a new run (ErrBusy) while the finished runs still
// held and a reservation of RunBytes for each unfinished run, the new one
// too, would pass what the retained and the active bounds allow together;
// Retry-After is when the first held run may go.
func (g *Registry) roomLocked(active int) error {
	now := g.now()
	var total int64
	count := 0
	var next time.Time
	for _, r := range g.runs {
		at, size, _, ok := r.finishedAt()
		if !ok {
			continue
		}
		count++
		total += size
		if end := at.Add(max(g.lim.Hold, 0)); end.After(now) && (next.IsZero() || end.Before(next)) {
			next = end
		}
	}
	bytesOver := total+int64(active+1)*g.lim.RunBytes > g.lim.MaxRetainedBytes+int64(g.lim.MaxActive)*g.lim.RunBytes
	countOver := count+active+1 > g.lim.MaxRetained+g.lim.MaxActive
	if !bytesOver && !countOver {
		return nil
	}
	retry := BusyRetryHeld
	if !next.IsZero() {
		retry = max(next.Sub(now), time.Second)
	}
	what := fmt.Sprintf("%d MiB", total>>20)
	if !bytesOver {
		what = fmt.Sprintf("%d runs", count)
	}
	return runs.BusyRetryf(retry, "finished runs not yet forgotten hold %s, the room of new runs (%s); try again in %d s",
		what, g.lim.RetainedKeys, int64((retry+time.Second-1)/time.Second))
}

// BusyRetryHeld is the Retry-After of the held-results refusal when no run
// is within Hold (all are being read: a read ends within the API's write
// timeout).
const BusyRetryHeld = 5 * time.Second

// Unfinished returns the runs not yet finished, oldest first: what the host
// must finish (ResultCancelled, "host stopped") when it stops.
// Live are the runs unfinished or whose sandbox still exists (Sandboxed
// and not yet End: a result recorded before its cleanup), oldest first.
func (g *Registry) Live() []*Run {
	g.mu.Lock()
	rs := make([]*Run, 0, len(g.runs))
	for _, r := range g.runs {
		if !r.finished() || r.sandboxed.Load() {
			rs = append(rs, r)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(rs, func(a, b *Run) int { return cmp.Compare(a.order, b.order) })
	return rs
}

func (g *Registry) Unfinished() []*Run {
	g.mu.Lock()
	rs := make([]*Run, 0, len(g.runs))
	for _, r := range g.runs {
		if !r.finished() {
			rs = append(rs, r)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(rs, func(a, b *Run) int { return cmp.Compare(a.order, b.order) })
	return rs
}
