// Package reaper removes what crashed or stuck turns left behind: this
// installation's containers, sandbox-broker@ units, turn directories and
// policy files. Guarantee: it removes only what is provably not live. An
// object is removed when its turn's deadline plus a grace has passed, or when
// the running host does not know the turn and the object existed before the
// pass began; anything created during the pass, anything whose name fails
// package ids, and every symlink is left alone. It is idempotent and safe to
// run while the host runs.
//
// Contract with the host: a turn is listed by the host (GET /v1/turns, or the
// active set given to Reap) from before the host writes anything for it until
// after it removed everything of it; the policy file is written before the
// broker socket unit starts and removed after the units stop.
//
// Standbys (turns prepared ahead of their request, container label
// layout.LabelStandby) need no rule of their own: the host lists them like
// turns, their deadline label and placeholder policy carry their expiry (a
// binding turn's policy then carries its deadline, which outranks the
// label), so a running host's standbys are kept, a host that is not running
// leaves none, and an expired one goes. Run standbys (a code run's toolbox
// container started ahead of its run) follow the same rules with no broker
// or turn directory: their deadline record in policyDir (a placeholder
// policy no broker reads) carries the expiry, and the bound run's deadline
// once one binds it.
//
// Rich channel sessions (a long-lived container and broker under a 32-hex
// session id) need none either: the host lists a session like a turn while
// it lives, and its deadline label and policy deadline are the session's
// lifetime (at most 1,200 s, which the host never lets a session outlive).
package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// ErrIncomplete: at least one object could not be removed (see Summary.Failed).
var ErrIncomplete = errors.New("reap incomplete")

// MaxTurnDeadline is the longest turn deadline the host accepts. A turn with
// no readable deadline is known to have ended MaxTurnDeadline after its
// oldest object appeared.
const MaxTurnDeadline = 600 * time.Second

// Defaults for Reaper fields left zero.
const (
	DefaultAttempts = 3
	DefaultBackoff  = 200 * time.Millisecond
)

// Containers lists and removes this installation's containers (*container.Driver).
type Containers interface {
	List(ctx context.Context, installation string) ([]container.Info, error)
	// Remove force-removes; a missing container counts as success.
	Remove(ctx context.Context, id string) error
}

// Units lists and stops broker units (*unitctl.Manager).
type Units interface {
	ListBrokers(ctx context.Context) ([]string, error)
	// StopBroker stops both units; units not loaded count as success.
	StopBroker(ctx context.Context, turnID string) error
}

// ActiveFunc reports the turns the running host has in flight. known=false
// means there is no host knowledge: then only deadline plus grace applies.
type ActiveFunc func(ctx context.Context) (active map[string]bool, known bool, err error)

// Reaper is one installation's reap configuration.
type Reaper struct {
	Installation string
	RunRoot      string // runRoot: <turn>/ directories
	PolicyDir    string // <turn>.json policy files
	Grace        time.Duration
	Containers   Containers
	Units        Units
	// Active may be nil (no host knowledge). The host's own startup reap
	// passes an empty, known set.
	Active ActiveFunc
	// Attempts per removal (default 3) with Backoff doubling between them.
	Attempts int
	Backoff  time.Duration
	Now      func() time.Time
	Log      *slog.Logger
}

// Summary counts one pass. Missing objects count as removed.
type Summary struct {
	Containers int // containers removed
	Units      int // turns whose broker units were stopped
	Dirs       int // turn directories removed
	Policies   int // policy files removed
	Skipped    int // entries left alone: unexpected names, types or labels
	Failed     int // removals or listings that failed after all attempts
	HostKnown  bool
}

// LogValue makes a Summary one structured log attribute.
func (s Summary) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("containers", s.Containers), slog.Int("units", s.Units),
		slog.Int("dirs", s.Dirs), slog.Int("policies", s.Policies),
		slog.Int("skipped", s.Skipped), slog.Int("failed", s.Failed),
		slog.Bool("host_known", s.HostKnown))
}

// evidence is what one pass saw of a turn.
type evidence struct {
	policyDeadline time.Time // from the policy file, when readable
	labelDeadline  time.Time // from a container label
	oldest         time.Time // earliest moment any of its objects is known to have existed
	hasPolicy      bool
}

func (e *evidence) saw(t time.Time) {
	if e.oldest.IsZero() || t.Before(e.oldest) {
		e.oldest = t
	}
}

type pass struct {
	r      *Reaper
	start  time.Time
	active map[string]bool
	known  bool
	turns  map[string]*evidence
	sum    Summary
}

func (p *pass) turn(id string) *evidence {
	e := p.turns[id]
	if e == nil {
		e = &evidence{}
		p.turns[id] = e
	}
	return e
}

// expired: the turn's deadline plus grace has passed. Without any deadline,
// MaxTurnDeadline after its oldest object bounds it.
func (p *pass) expired(id string) bool {
	e := p.turn(id)
	deadline := e.policyDeadline
	if deadline.IsZero() {
		deadline = e.labelDeadline
	}
	if deadline.IsZero() && !e.oldest.IsZero() {
		deadline = e.oldest.Add(MaxTurnDeadline)
	}
	return !deadline.IsZero() && p.start.After(deadline.Add(p.r.Grace))
}

// dead: the host is known to run and does not list the turn.
func (p *pass) dead(id string) bool { return p.known && !p.active[id] }

func (r *Reaper) check() error {
	if err := ids.ValidInstallation(r.Installation); err != nil {
		return fmt.Errorf("reaper: %w", err)
	}
	for _, d := range []string{r.RunRoot, r.PolicyDir} {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
			return fmt.Errorf("reaper: %q must be an absolute clean directory", d)
		}
	}
	if r.Grace < 0 {
		return errors.New("reaper: grace must not be negative")
	}
	if r.Containers == nil || r.Units == nil {
		return errors.New("reaper: containers and units are required")
	}
	return nil
}

// Reap runs one pass. The error is non-nil for a bad configuration, or wraps
// ErrIncomplete when Summary.Failed > 0; the Summary is always filled.
func (r *Reaper) Reap(ctx context.Context) (Summary, error) {
	if err := r.check(); err != nil {
		return Summary{}, err
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	p := &pass{r: r, start: now(), turns: map[string]*evidence{}}
	log := r.logger()

	// Order matters: host knowledge after the pass began, units before the
	// policy files (a listed unit's policy was written before it started).
	if r.Active != nil {
		active, known, err := r.Active(ctx)
		if err != nil {
			log.Warn("reaper: no host knowledge, applying deadlines only", "err", err)
		} else {
			p.active, p.known = active, known
		}
	}
	p.sum.HostKnown = p.known

	units, unitsErr := r.Units.ListBrokers(ctx)
	if unitsErr != nil {
		p.sum.Failed++
		log.Warn("reaper: listing broker units failed", "err", unitsErr)
	}
	containers, contErr := r.Containers.List(ctx, r.Installation)
	if contErr != nil {
		p.sum.Failed++
		log.Warn("reaper: listing containers failed", "err", contErr)
	}
	policies := p.scanPolicies()
	dirs := p.scanDirs()

	type found struct{ id, name, turn string }
	var conts []found
	for _, c := range containers {
		turn := c.Labels[layout.LabelTurn]
		if ids.ValidTurnID(turn) != nil || !strings.HasPrefix(c.Name, ids.ContainerPrefix) {
			p.sum.Skipped++
			log.Warn("reaper: container with an unexpected name or turn label left alone", "container", c.ID)
			continue
		}
		e := p.turn(turn)
		if d, err := strconv.ParseInt(c.Labels[layout.LabelDeadline], 10, 64); err == nil && d > 0 {
			if t := time.Unix(d, 0); t.After(e.labelDeadline) {
				e.labelDeadline = t
			}
		}
		// Created has one-second resolution: the container existed by
		// Created+1s at the latest.
		existed := c.Created.Add(time.Second)
		e.saw(existed)
		if existed.After(p.start) {
			continue // created during the pass: untouched
		}
		conts = append(conts, found{c.ID, c.Name, turn})
	}

	for _, c := range conts {
		if !p.expired(c.turn) && !p.dead(c.turn) {
			continue
		}
		if p.retry(ctx, "container", c.turn, func(ctx context.Context) error { return r.Containers.Remove(ctx, c.id) }) {
			p.sum.Containers++
		}
	}
	for _, turn := range units {
		if !p.unitStale(turn) {
			continue
		}
		if p.retry(ctx, "units", turn, func(ctx context.Context) error { return r.Units.StopBroker(ctx, turn) }) {
			p.sum.Units++
		}
	}
	for _, d := range dirs {
		if d.mtime.Before(p.start) && (p.expired(d.turn) || p.dead(d.turn)) {
			path := filepath.Join(r.RunRoot, d.turn)
			if p.retry(ctx, "turn dir", d.turn, func(context.Context) error { return removeAll(path) }) {
				p.sum.Dirs++
			}
		}
	}
	for _, f := range policies {
		if f.mtime.Before(p.start) && (p.expired(f.turn) || p.dead(f.turn)) {
			path := filepath.Join(r.PolicyDir, f.turn+".json")
			if p.retry(ctx, "policy", f.turn, func(context.Context) error { return removeFile(path) }) {
				p.sum.Policies++
			}
		}
	}
	if p.sum.Failed > 0 {
		return p.sum, fmt.Errorf("reaper: %d failures: %w", p.sum.Failed, ErrIncomplete)
	}
	return p.sum, nil
}

// unitStale decides for broker units, which carry no timestamp or deadline:
// a turn the host lists lives until its deadline; a unit with no policy file
// is an orphan (the host writes the policy before starting the unit and
// removes it after stopping it); otherwise the turn's other objects decide.
func (p *pass) unitStale(turn string) bool {
	e := p.turn(turn)
	switch {
	case p.expired(turn):
		return true
	case p.known && p.active[turn]:
		return false
	case !e.hasPolicy:
		return true
	default:
		return p.known && !e.oldest.IsZero() && e.oldest.Before(p.start)
	}
}

func (r *Reaper) logger() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// retry runs op up to Attempts times; it reports success or counts a failure.
func (p *pass) retry(ctx context.Context, kind, turn string, op func(context.Context) error) bool {
	attempts, backoff := p.r.Attempts, p.r.Backoff
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	if backoff <= 0 {
		backoff = DefaultBackoff
	}
	var err error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			t := time.NewTimer(backoff << (i - 1))
			select {
			case <-ctx.Done():
				t.Stop()
				err = errors.Join(err, ctx.Err())
				i = attempts
				continue
			case <-t.C:
			}
		}
		if err = op(ctx); err == nil {
			return true
		}
	}
	p.sum.Failed++
	p.r.logger().Warn("reaper: removal failed; inspect by hand", "kind", kind, "turn", turn, "attempts", attempts, "err", err)
	return false
}

type entry struct {
	turn  string
	mtime time.Time
}

// scanDirs lists runRoot's <turn> directories (Lstat: symlinks are never
// followed, and are skipped like every other unexpected entry).
func (p *pass) scanDirs() []entry {
	list, err := os.ReadDir(p.r.RunRoot)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.sum.Failed++
			p.r.logger().Warn("reaper: reading the run root failed", "err", err)
		}
		return nil
	}
	var out []entry
	for _, de := range list {
		name := de.Name()
		fi, err := os.Lstat(filepath.Join(p.r.RunRoot, name))
		if ids.ValidTurnID(name) != nil || err != nil || !fi.IsDir() {
			p.sum.Skipped++
			continue
		}
		p.turn(name).saw(fi.ModTime())
		out = append(out, entry{name, fi.ModTime()})
	}
	return out
}

// scanPolicies lists policyDir's <turn>.json regular files and reads each
// one's deadline (no-follow, bounded). An unreadable deadline leaves the
// mtime-based bound.
func (p *pass) scanPolicies() []entry {
	list, err := os.ReadDir(p.r.PolicyDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			p.sum.Failed++
			p.r.logger().Warn("reaper: reading the policy directory failed", "err", err)
		}
		return nil
	}
	var out []entry
	for _, de := range list {
		name := de.Name()
		turn, ok := strings.CutSuffix(name, ".json")
		path := filepath.Join(p.r.PolicyDir, name)
		fi, err := os.Lstat(path)
		if !ok || ids.ValidTurnID(turn) != nil || err != nil || !fi.Mode().IsRegular() {
			p.sum.Skipped++
			continue
		}
		e := p.turn(turn)
		e.hasPolicy = true
		e.saw(fi.ModTime())
		if d, ok := policyDeadline(path); ok {
			e.policyDeadline = d
		}
		out = append(out, entry{turn, fi.ModTime()})
	}
	return out
}

// policyDeadline reads only the deadline, so a policy from another version
// that no longer validates still gives its deadline.
func policyDeadline(path string) (time.Time, bool) {
	data, err := atomicfile.ReadFile(path, policy.MaxBytes)
	if err != nil {
		return time.Time{}, false
	}
	var v struct {
		DeadlineUnixMs int64 `json:"deadlineUnixMs"`
	}
	if json.Unmarshal(data, &v) != nil || v.DeadlineUnixMs <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(v.DeadlineUnixMs), true
}

// removeAll removes a turn directory; os.RemoveAll unlinks symlinks inside
// rather than following them. A missing directory counts as removed.
func removeAll(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is no longer a directory", filepath.Base(path))
	}
	return os.RemoveAll(path)
}

// removeFile unlinks one file (never its target). Missing counts as removed.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
