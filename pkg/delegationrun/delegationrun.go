// Package delegationrun is the delegated-job kind (DESIGN.md section 14):
// admission within the channel's bound, a slot of the host's global cap
// under a pseudo channel of its own (job-<id>), the research turn in a
// scratch workspace of its own (run by the host's sealed turn through the
// Research function it was given), the scratch removal without following a
// link, and the job's result recorded only after cleanup. It holds only the
// jobs' rules and state, reaches the host through its narrow Host
// interface and imports no other kind.
// Guarantee: a job never sees or changes its channel's memory or history
// (its scratch workspace is its own and removed afterwards, never through
// a symlink); a finished job has left nothing behind, or the log names what;
// a client reads only generic reasons.
package delegationrun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Host is what a job needs of the host that made the kind.
type Host interface {
	// Admit runs create under the host's admission lock unless the host
	// is stopping (then sandbox.ErrShuttingDown), and counts the work
	// until done is called, so a shutdown waits for it.
	Admit(create func() error) (done func(), err error)
	// Slot waits for a place under the global concurrency cap, queued
	// under key.
	Slot(ctx context.Context, key string) (release func(), err error)
	// Stopped ends, with cause sandbox.ErrShuttingDown, when the host stops.
	Stopped() context.Context
	// ChannelOn is nil when channel is in sandbox mode, else the host's
	// error for a channel that is not.
	ChannelOn(channel string) error
}

// Research is a research turn's outcome: the reply, the run's error (with
// the worker's exit status and fixed cause when it exited non-zero) and
// the turn's cleanup error.
type Research = kind.ResearchResult

// Options make a Kind.
type Options struct {
	Config    *config.Config
	Lifecycle *sandbox.Lifecycle
	Host      Host
	Logger    *slog.Logger
	Now       func() time.Time
	NewID     func() string
	// UID and GID are the host's own: the scratch workspace is taken back
	// to them before it is removed.
	UID, GID int
	// Research runs j's research turn in scratch and cleans it up.
	Research func(ctx context.Context, j *delegation.Job, scratch string, log *slog.Logger) Research
	// Registry receives sandbox_delegations_total.
	Registry prometheus.Registerer
	// Fleet, in fleet mode, is where admitted jobs run (fleet.go); Box is
	// this box's name (fleet.box).
	Fleet *fleet.Fleet
	Box   string
}

// Kind is the host's delegated jobs.
type Kind struct {
	cfg      *config.Config
	life     *sandbox.Lifecycle
	host     Host
	log      *slog.Logger
	now      func() time.Time
	newID    func() string
	uid, gid int
	research func(ctx context.Context, j *delegation.Job, scratch string, log *slog.Logger) Research
	jobs     *delegation.Registry
	results  *prometheus.CounterVec
	queue    *fleetjobs.Queue
	box      string
	// shadows are the jobs this box runs for the fleet (fleet.go): not in
	// the API's registry, listed for the reaper.
	shadows *delegation.Registry
}

// New makes the kind and its job registry from delegation.*.
func New(o Options) *Kind {
	d := o.Config.Delegation
	lim := delegation.Limits{
		MaxRunning: d.MaxRunning, Timeout: time.Duration(d.TimeoutSeconds) * time.Second,
		MaxTitleChars: d.MaxTitleChars, MaxTaskChars: d.MaxTaskChars,
		MaxReportChars: d.MaxReportChars, DiagnosticChars: d.DiagnosticChars,
	}
	k := &Kind{cfg: o.Config, life: o.Lifecycle, host: o.Host, log: o.Logger, now: o.Now, newID: o.NewID,
		uid: o.UID, gid: o.GID, research: o.Research, queue: fleetjobs.New(o.Fleet), box: o.Box,
		jobs:    delegation.NewRegistry(lim, delegation.DefaultRetention(), o.Now),
		shadows: delegation.NewRegistry(lim, delegation.Retention{Retain: time.Nanosecond, MaxRetained: 1, MaxRetainedBytes: 1}, o.Now),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_delegations_total", Help: "Delegated jobs, by result (ok, failed, timeout, cancelled; refused: not admitted).",
		}, []string{"result"}),
	}
	o.Registry.MustRegister(k.results)
	return k
}

// Registry is the jobs' record (the API reads it).
func (k *Kind) Registry() *delegation.Registry { return k.jobs }

// ResearchText is the research turn's message: the title and the task.
func ResearchText(title, task string) string {
	return "Research task: " + title + "\n\n" + task
}

// Errors the host maps to a status.
var (
	ErrDisabled   = errors.New("delegation is disabled on this host (delegation.enabled)")
	errTimeout    = errors.New("job deadline")
	errChannelOff = errors.New("channel turned off")
)

// Generic reasons a client reads (the host log has the details).
const (
	reasonChannelOff = "the job was cancelled: the channel was turned off"
	reasonHostStop   = "the job was cancelled: the host stopped"
	reasonFailed     = "the research could not be completed"
	reasonCleanup    = "the research turn's cleanup failed; the operator was told"
)

// A job's entry in the host queue is ids.JobName(id), "job-<id>": its own
// pseudo channel, so it waits for the global cap only, never for its
// channel. No channel key takes that form (ids.ValidChannel).

// scratchDirName holds the jobs' scratch workspaces under workspaceRoot.
const scratchDirName = ".delegations"

// Start admits a job for owner (the caller's uid) in channel and
// drives it in the background; the answer is its status at once.
func (k *Kind) Start(channel string, owner int, req delegation.Request) (delegation.Status, error) {
	if !k.cfg.Delegation.Enabled {
		return delegation.Status{}, ErrDisabled
	}
	if err := k.jobs.Limits().Check(req); err != nil {
		k.results.WithLabelValues("refused").Inc()
		return delegation.Status{}, err
	}
	if err := k.host.ChannelOn(channel); err != nil {
		return delegation.Status{}, err
	}
	var j *delegation.Job
	done, err := k.host.Admit(func() error {
		var err error
		if j, err = k.jobs.Admit(k.newID(), channel, owner, req); err != nil {
			k.results.WithLabelValues("refused").Inc()
		}
		return err
	})
	if err != nil {
		return delegation.Status{}, err
	}
	k.log.Info("delegation admitted", "job", j.ID(), "channel", ids.ChannelTag(channel), "owner_uid", owner,
		"title_chars", utf8.RuneCountInString(req.Title), "task_chars", utf8.RuneCountInString(req.Task),
		"deadline_unix", j.Deadline().Unix())
	st := j.Status() // before the job can start
	go func() {
		defer done() // shutdown waits for the job's cleanup
		k.drive(j)
	}()
	return delegation.Status{ID: st.ID, Channel: st.Channel, Title: st.Title, State: st.State, DeadlineUnixMs: st.DeadlineUnixMs}, nil
}

// drive takes a job from admission to its result: a slot of the global
// cap, the research turn, cleanup, then Finish (only after cleanup, so a
// finished job has left nothing behind, or the log says what).
func (k *Kind) drive(j *delegation.Job) {
	log := k.log.With("job", j.ID(), "channel", ids.ChannelTag(j.Channel()))
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, j.Deadline(), errTimeout)
	defer cancelDeadline()
	stopWatch := context.AfterFunc(k.host.Stopped(), func() { cancel(sandbox.ErrShuttingDown) })
	defer stopWatch()
	j.SetCancel(cancel)
	// A channel turned off between the admission's mode check and the
	// job's registration found nothing to cancel: check again.
	if k.host.ChannelOn(j.Channel()) != nil {
		cancel(errChannelOff)
	}
	start := k.now()

	var fin delegation.Finish
	if k.queue != nil {
		if j.Start() == nil {
			fin = k.runRemote(ctx, j, log) // fleet.go
		}
	} else if release, err := k.host.Slot(ctx, ids.JobName(j.ID())); err != nil {
		fin = jobEnded(ctx, delegation.Finish{Result: delegation.ResultCancelled, Reason: reasonHostStop})
	} else {
		if j.Start() == nil {
			fin = k.execute(ctx, j, log)
		}
		release()
	}
	j.Finish(fin)
	st := j.Status()
	k.results.WithLabelValues(st.Result).Inc()
	attrs := []any{"result", st.Result, "duration_ms", time.Since(start).Milliseconds(), "report_chars", utf8.RuneCountInString(st.Report)}
	if st.Error != "" {
		attrs = append(attrs, "reason", st.Error)
	}
	log.Info("delegation done", attrs...)
}

// jobEnded classifies a job whose context ended; otherwise is the finish
// when it did not.
func jobEnded(ctx context.Context, otherwise delegation.Finish) delegation.Finish {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errTimeout):
		return delegation.Finish{Result: delegation.ResultTimeout}
	case errors.Is(cause, errChannelOff):
		return delegation.Finish{Result: delegation.ResultCancelled, Reason: reasonChannelOff}
	case errors.Is(cause, sandbox.ErrShuttingDown):
		return delegation.Finish{Result: delegation.ResultCancelled, Reason: reasonHostStop}
	}
	return otherwise
}

// execute runs the research turn and always cleans up (container, units,
// files, scratch workspace) before it returns the job's finish.
func (k *Kind) execute(ctx context.Context, j *delegation.Job, log *slog.Logger) delegation.Finish {
	parent := filepath.Join(k.cfg.WorkspaceRoot, scratchDirName)
	scratch := filepath.Join(parent, j.ID())
	var res Research
	if err := os.Mkdir(parent, 0o700); err == nil || errors.Is(err, fs.ErrExist) {
		res = k.research(ctx, j, scratch, log)
	} else {
		res.RunErr = err
	}
	reply, runErr, cleanupErr := res.Reply, res.RunErr, res.CleanupErr
	if err := k.RemoveScratch(scratch); err != nil {
		log.Error("scratch workspace removal failed; remove it by hand (the host also sweeps it at its next start)", "dir", scratch, "err", err)
		k.life.CountCleanupFailure("scratch")
		cleanupErr = errors.Join(cleanupErr, err)
	}
	if cleanupErr != nil {
		return delegation.Finish{Result: delegation.ResultFailed, Reason: reasonCleanup}
	}
	if runErr != nil {
		fin := jobEnded(ctx, delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed})
		if fin.Result == delegation.ResultFailed {
			attrs := []any{"err", runErr}
			if res.Exited {
				attrs = append(attrs, "exit_code", res.ExitCode, "worker_cause", res.WorkerCause)
				if res.WorkerCause != "" { // one of protocol's fixed causes
					fin.Reason += " (the worker reports: " + res.WorkerCause + ")"
				}
			}
			log.Warn("research turn failed", attrs...)
		}
		return fin
	}
	if !reply.OK {
		// The worker's own failure text stays out: generic reasons only.
		log.Warn("research turn ended without a report")
		return delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed}
	}
	return delegation.Finish{Result: delegation.ResultOK, Report: reply.Text}
}

// CancelChannel cancels the unfinished jobs of a channel turned off.
func (k *Kind) CancelChannel(channel string) {
	if n := k.jobs.CancelChannel(channel, errChannelOff); n > 0 {
		k.log.Info("delegated jobs cancelled: channel turned off", "channel", ids.ChannelTag(channel), "jobs", n)
	}
}

// Listed lists unfinished jobs for GET /v1/turns: the reaper keeps
// their containers and units, from admission until after their cleanup.
func (k *Kind) Listed() []apiwire.Turn {
	var out []apiwire.Turn
	for _, j := range append(k.shadows.Unfinished(), k.jobs.Unfinished()...) {
		d := j.Deadline()
		out = append(out, apiwire.Turn{ID: j.ID(), ChannelTag: ids.ChannelTag(j.Channel()), DeadlineUnix: d.Unix(), DeadlineUnixMs: d.UnixMilli(), Job: true})
	}
	return out
}

// SweepScratch removes scratch workspaces an earlier host left (at New,
// before any job exists).
func (k *Kind) SweepScratch() {
	parent := filepath.Join(k.cfg.WorkspaceRoot, scratchDirName)
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		if err := k.RemoveScratch(dir); err != nil {
			k.log.Error("leftover scratch workspace removal failed; remove it by hand", "dir", dir, "err", err)
			continue
		}
		k.log.Info("leftover scratch workspace removed", "dir", dir)
	}
}

// Bounds of one scratch removal (a hostile worker may have built a tree).
const (
	maxScratchDepth   = 64
	maxScratchEntries = 1 << 16
)

// RemoveScratch removes a job's scratch workspace, which belongs to the
// channel's guest uid (0700, possibly with guest-made subdirectories of any
// mode). The host has CAP_CHOWN only, so it takes each directory back
// first (chown to itself without following links, then chmod 0700) and
// then reads and empties it, top down. The container is gone, and no other
// container mounts the scratch, so nothing changes the tree meanwhile.
// A missing directory is success.
func (k *Kind) RemoveScratch(dir string) error {
	pfd, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	defer unix.Close(pfd)
	n := 0
	return k.reclaimAt(pfd, filepath.Base(dir), 0, &n)
}

func (k *Kind) reclaimAt(pfd int, name string, depth int, n *int) error {
	if *n++; *n > maxScratchEntries {
		return fmt.Errorf("more than %d entries", maxScratchEntries)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ignoreENOENT(unix.Unlinkat(pfd, name, 0))
	}
	if depth > maxScratchDepth {
		return fmt.Errorf("deeper than %d directories", maxScratchDepth)
	}
	if int(st.Uid) != k.uid || int(st.Gid) != k.gid {
		if err := unix.Fchownat(pfd, name, k.uid, k.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("take back %s: %w", name, err)
		}
	}
	if err := unix.Fchmodat(pfd, name, 0o700, 0); err != nil {
		return fmt.Errorf("chmod %s: %w", name, err)
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	// Entries removed while the directory is read may shift what a read
	// returns: read again from the start until the directory is empty.
	for pass := 0; ; pass++ {
		if _, err := f.Seek(0, 0); err != nil {
			return err
		}
		for {
			names, err := f.Readdirnames(256)
			for _, child := range names {
				if err := k.reclaimAt(fd, child, depth+1, n); err != nil {
					return err
				}
			}
			if err != nil || len(names) == 0 {
				break
			}
		}
		err := ignoreENOENT(unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR))
		if !errors.Is(err, unix.ENOTEMPTY) || pass == 3 {
			return err
		}
	}
}

func ignoreENOENT(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
