package fleet

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Reply is one committed reply the driver saw.
type Reply struct {
	At      time.Time
	Box     string
	Channel string
	Turn    string
	Latency time.Duration // submit to reply seen
	Failed  bool
}

// Recorder holds what the driver and the boxes reported; Wait blocks on a
// condition over it, woken by every new line (no polling).
type Recorder struct {
	mu      sync.Mutex
	changed chan struct{}
	replies []Reply
	// last committing box per channel
	owner map[string]string
	// box events by kind, per box
	events map[string]map[string]int
	// engine times of committed turns: publish to commit, and the
	// executor's share
	took, exec []time.Duration
	steps      map[string][]time.Duration // by step (fleet.StepNames)
	// turns each box took (when), and each box's commits in order: the
	// paused owner's check
	taken   map[string]map[string][]time.Time // box -> turn -> each take
	commits map[string][]commit
}

type commit struct {
	turn string
	at   time.Time
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{changed: make(chan struct{}), owner: map[string]string{}, events: map[string]map[string]int{},
		taken: map[string]map[string][]time.Time{}, commits: map[string][]commit{}}
}

func (r *Recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Recorder) driverLine(l Line) {
	if l.Ev != "reply" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replies = append(r.replies, Reply{At: time.Unix(0, l.T), Box: l.Box, Channel: l.Channel, Turn: l.Turn, Latency: time.Duration(l.TookNs), Failed: l.Err != ""})
	r.owner[l.Channel] = l.Box
	r.notify()
}

func (r *Recorder) boxLine(l Line) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.events[l.Box] == nil {
		r.events[l.Box] = map[string]int{}
	}
	r.events[l.Box][l.Ev]++
	switch l.Ev {
	case "taken":
		if r.taken[l.Box] == nil {
			r.taken[l.Box] = map[string][]time.Time{}
		}
		r.taken[l.Box][l.Turn] = append(r.taken[l.Box][l.Turn], time.Unix(0, l.T))
	case "committed":
		r.took = append(r.took, time.Duration(l.TookNs))
		r.exec = append(r.exec, time.Duration(l.ExecNs))
		if r.steps == nil {
			r.steps = map[string][]time.Duration{}
		}
		for name, ns := range l.Steps {
			r.steps[name] = append(r.steps[name], time.Duration(ns))
		}
		r.commits[l.Box] = append(r.commits[l.Box], commit{turn: l.Turn, at: time.Unix(0, l.T)})
	}
	r.notify()
}

// Wait blocks until cond holds or ctx ends. cond uses the recorder's
// methods (they lock it); the change channel is taken before cond runs,
// so a change while it runs wakes the next round.
func (r *Recorder) Wait(ctx context.Context, cond func(*Recorder) bool) error {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond(r) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Replies returns how many replies the driver saw.
func (r *Recorder) Replies() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.replies)
}

// snapshot copies the replies (for the report).
func (r *Recorder) snapshot() []Reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Reply(nil), r.replies...)
}

// Owned returns the channels whose last reply was committed by box, of
// chans (all channels ever answered when chans is nil).
func (r *Recorder) Owned(box string, chans []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for ch, b := range r.owner {
		if b == box && (chans == nil || slices.Contains(chans, ch)) {
			out = append(out, ch)
		}
	}
	return out
}

// Busiest returns the box that owns most of chans now (their last reply
// was its; all channels ever answered when chans is nil).
func (r *Recorder) Busiest(chans []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	count := map[string]int{}
	for ch, b := range r.owner {
		if chans == nil || slices.Contains(chans, ch) {
			count[b]++
		}
	}
	best, bestN := "", 0
	for b, c := range count {
		if c > bestN || (c == bestN && b < best) {
			best, bestN = b, c
		}
	}
	return best
}

// Events returns box's count of events of kind.
func (r *Recorder) Events(box, kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[box][kind]
}

// StaleCommits counts box's commits, seen after after, of turns it took
// before before (and not again since) that another box took after before:
// a paused owner's work from before its pause whose claim was overtaken,
// which the fence must refuse. (A turn of the paused box that nobody took
// meanwhile is still its own claim: committing it is right.)
func (r *Recorder) StaleCommits(box string, before, after time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.commits[box] {
		if !c.at.After(after) {
			continue
		}
		var own time.Time // the box's last take before the commit
		for _, t := range r.taken[box][c.turn] {
			if t.Before(c.at) && t.After(own) {
				own = t
			}
		}
		if own.IsZero() || !own.Before(before) {
			continue
		}
		for other, turns := range r.taken {
			if other == box {
				continue
			}
			overtaken := false
			for _, t := range turns[c.turn] {
				if t.After(own) {
					overtaken = true
				}
			}
			if overtaken {
				n++
				break
			}
		}
	}
	return n
}

// Silent returns the channels of chans without a reply seen after t.
func (r *Recorder) Silent(chans []string, t time.Time) []string {
	answered := r.firstAfter(chans, t, "")
	var out []string
	for _, c := range chans {
		if _, ok := answered[c]; !ok {
			out = append(out, c)
		}
	}
	return out
}

// firstAfter is, per channel of chans, the first reply seen after t by a
// box other than not ("" any); missing channels are absent.
func (r *Recorder) firstAfter(chans []string, t time.Time, not string) map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	want := map[string]bool{}
	for _, c := range chans {
		want[c] = true
	}
	out := map[string]time.Time{}
	for i := len(r.replies) - 1; i >= 0; i-- {
		rep := r.replies[i]
		if !rep.At.After(t) {
			break
		}
		if want[rep.Channel] && rep.Box != not {
			out[rep.Channel] = rep.At
		}
	}
	return out
}

// EngineTimes returns the committed turns' publish-to-commit and
// executor times (box reports).
func (r *Recorder) EngineTimes() (took, exec []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.took...), append([]time.Duration(nil), r.exec...)
}

// EngineSteps returns the committed turns' times by step (fleet.Steps).
func (r *Recorder) EngineSteps() map[string][]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]time.Duration{}
	for name, ds := range r.steps {
		out[name] = append([]time.Duration(nil), ds...)
	}
	return out
}

// ResetEngineTimes forgets the engine times recorded so far.
func (r *Recorder) ResetEngineTimes() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.took, r.exec, r.steps = nil, nil, nil
}
