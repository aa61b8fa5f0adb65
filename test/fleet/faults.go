package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	pfleet "github.com/roundtable-sandbox/sandbox/pkg/fleet"
)

// Fault kinds (issue 28).
const (
	KillBox    = "kill -9 box"
	KillServer = "kill -9 nats-server"
	CutLink    = "cut link"
	PauseOwner = "paused owner"
	FullDisk   = "full disk"
	// PartialCut (issue 38): the busiest box and the box whose server leads
	// the channels bucket (else the workspace store's, else another) cut
	// from each other, each still reaching the others; the busiest box's
	// server keeps the meta leader but may lose the leaders its turns
	// need (docs/fleet.md, *Failure model*).
	PartialCut = "partial cut"
)

// Kinds lists every fault kind, in the order a run cycles through them.
var Kinds = []string{KillBox, KillServer, CutLink, PauseOwner, FullDisk, PartialCut}

// SelectKinds returns the kinds named in list (comma-separated; empty:
// every kind), or an error naming an unknown one.
func SelectKinds(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return Kinds, nil
	}
	var out []string
	for _, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(Kinds, k) {
			return nil, fmt.Errorf("unknown fault kind %q (kinds: %s)", k, strings.Join(Kinds, ", "))
		}
		out = append(out, k)
	}
	return out, nil
}

// FaultResult is one fault's outcome.
type FaultResult struct {
	Kind string
	Box  int
	// Affected channels: the box's (their last reply was its) at the fault.
	Affected int
	// Failover per affected channel: fault to its first reply after it
	// (from another box, but for the full disk, where the box may go on).
	Failover []time.Duration
	// Missed: affected channels without a reply within the bound.
	Missed int
	// Unanswered: the running drivers' channels (every partition has
	// some) without a reply after the box was restored, when the fleet
	// stopped answering for twice the bound: a partition left to no box.
	Unanswered []string
	// LateCommits: commits by a paused owner, after SIGCONT, of turns it
	// took before SIGSTOP and another box took since (the fence must
	// refuse them).
	LateCommits int
	// At is the fault's time, Restored the restore's.
	At, Restored time.Time
}

// boxNum parses "boxN".
func boxNum(name string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "box"))
	return n
}

// slowFailover: a failover over the goal (issue 38) is logged with its
// partition.
const slowFailover = 20 * time.Second

// Fault injects one fault of kind on the busiest box (its channels are
// the affected ones), waits for every affected channel's first reply after
// it (at most bound), restores the box and waits until the fleet answers
// again (settle more replies). peers are the running boxes.
func (f *Fleet) Fault(ctx context.Context, kind string, peers []int, bound time.Duration, settle int) (FaultResult, error) {
	// Only the running drivers' channels: a stopped driver's never answer
	// again.
	chans := f.driverChannels()
	box := boxNum(f.rec.Busiest(chans))
	if kind == FullDisk && f.o.DiskBox > 0 {
		box = f.o.DiskBox
	}
	if box == 0 {
		return FaultResult{}, errors.New("no box has committed a turn yet")
	}
	name := BoxName(box)
	res := FaultResult{Kind: kind, Box: box}
	affected := f.rec.Owned(name, chans)
	res.Affected = len(affected)
	var filler string
	cutFrom := 0
	if kind == PartialCut {
		for _, l := range f.Leaders(ctx, "KV_"+pfleet.ChannelsBucket, "OBJ_"+pfleet.WorkspaceBucket) {
			if l != 0 && l != box {
				cutFrom = l
				break
			}
		}
		if cutFrom == 0 {
			cutFrom = box%f.o.Servers + 1
		}
	}
	at := time.Now()
	switch kind {
	case KillBox:
		f.Kill(f.Box(box))
	case KillServer:
		f.Kill(f.Server(box))
	case CutLink:
		if err := f.Link(box, false); err != nil {
			return res, err
		}
	case PauseOwner:
		if err := f.Box(box).signal(syscall.SIGSTOP); err != nil {
			return res, err
		}
	case FullDisk:
		var err error
		if filler, err = fill(f.StoreDir(box)); err != nil {
			return res, err
		}
	case PartialCut:
		if err := f.Cut(box, cutFrom, true); err != nil {
			return res, err
		}
	default:
		return res, fmt.Errorf("unknown fault %q", kind)
	}
	f.logf("fault %s on %s at %s: %d channels affected", kind, name, at.Format("15:04:05.000"), len(affected))
	not := name
	if kind == FullDisk || kind == PartialCut {
		// The box may go on (a full disk elsewhere; a cut that left it
		// the leaders it needs): the first reply from any box counts.
		not = ""
	}
	if kind == PartialCut {
		f.logf("partial cut: %s and %s cut from each other", name, BoxName(cutFrom))
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	var first map[string]time.Time
	_ = f.rec.Wait(wctx, func(r *Recorder) bool {
		first = r.firstAfter(affected, at, not)
		return len(first) == len(affected)
	})
	cancel()
	var slow []string
	for _, ch := range affected {
		if t, ok := first[ch]; ok {
			res.Failover = append(res.Failover, t.Sub(at))
			if t.Sub(at) > slowFailover {
				slow = append(slow, fmt.Sprintf("p%d %.1fs", pfleet.Partition(ch, f.o.Partitions), t.Sub(at).Seconds()))
			}
		} else {
			res.Missed++
		}
	}
	if len(slow) > 0 {
		// Where a tail comes from: the partitions to look up in the boxes'
		// and servers' logs.
		sort.Strings(slow)
		f.logf("%s on %s: failovers over %s: %s", kind, name, slowFailover, strings.Join(slow, ", "))
	}
	if res.Missed > 0 && ctx.Err() == nil {
		f.logf("%s on %s: %d of %d affected channels not answered by another box within %s; the partitions:\n%s",
			kind, name, res.Missed, len(affected), bound, f.Inspect(ctx))
	}
	// Restore.
	restoredAt := time.Now()
	res.At, res.Restored = at, restoredAt
	var err error
	switch kind {
	case KillBox:
		err = f.StartBox(ctx, box, peers)
	case KillServer:
		err = f.restartServer(ctx, box)
	case CutLink:
		err = f.Link(box, true)
	case PauseOwner:
		err = f.Box(box).signal(syscall.SIGCONT)
	case PartialCut:
		err = f.Cut(box, cutFrom, false)
	case FullDisk:
		_ = os.Remove(filler)
		// JetStream disables itself on a write error: a restart brings it back.
		f.Kill(f.Server(box))
		err = f.restartServer(ctx, box)
	}
	if err != nil {
		return res, fmt.Errorf("restore after %s on %s: %w", kind, name, err)
	}
	// Every channel answers again (so every partition has an owner) and
	// the fleet goes on: settle more replies.
	base := f.rec.Replies()
	sctx, scancel := context.WithTimeout(ctx, 2*bound)
	err = f.rec.Wait(sctx, func(r *Recorder) bool {
		return r.Replies() >= base+settle && len(r.Silent(chans, restoredAt)) == 0
	})
	scancel()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err != nil {
		res.Unanswered = f.rec.Silent(chans, restoredAt)
		f.logf("after %s on %s was restored: %d channels unanswered, %d of %d replies; the partitions:\n%s",
			kind, name, len(res.Unanswered), f.rec.Replies()-base, settle, f.Inspect(ctx))
	}
	if kind == PauseOwner {
		res.LateCommits = f.rec.StaleCommits(name, at, restoredAt)
	}
	return res, nil
}

func (f *Fleet) restartServer(ctx context.Context, i int) error {
	p, err := f.StartServer(i)
	if err != nil {
		return err
	}
	return f.waitReady(ctx, p)
}

// fill writes a file into dir until the file system is full.
func fill(dir string) (string, error) {
	path := filepath.Join(dir, "filler")
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := fh.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path, nil
			}
			return path, err
		}
	}
}

// Percentile returns the p-th percentile (0..100) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(float64(len(s)-1) * p / 100)
	return s[k]
}
