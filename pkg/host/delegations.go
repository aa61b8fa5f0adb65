package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Scoped delegation (DESIGN.md section 14). A job runs one research turn
// of its channel: the turn's lifecycle (execute, cleanup), container,
// broker, confinement, guest uid and identity binding (the author as the
// speaker), with what differs carried by researchTurn: only the fetch and
// search tools (in the worker's turn and in the broker's policy), no MCP
// server, the research prompt, the job's deadline, and a scratch workspace
// of its own, removed afterwards, so a job never sees or changes the
// channel's memory or history and never races the channel's turns. It does
// not take the channel's one-turn slot; it takes a slot of the host's
// global cap (queue.globalConcurrency) under a pseudo channel of its own.

// Delegation errors the API maps (jobStatusOf).
var (
	ErrDelegationDisabled = errors.New("delegation is disabled on this host (delegation.enabled)")
	errJobTimeout         = errors.New("job deadline")
	errJobChannelOff      = errors.New("channel turned off")
)

// Generic reasons a client reads (the host log has the details).
const (
	reasonChannelOff = "the job was cancelled: the channel was turned off"
	reasonHostStop   = "the job was cancelled: the host stopped"
	reasonFailed     = "the research could not be completed"
	reasonCleanup    = "the research turn's cleanup failed; the operator was told"
)

// jobQueuePrefix names a job's entry in the host queue: its own pseudo
// channel, so it waits for the global cap only, never for its channel.
const jobQueuePrefix = "job-"

// scratchDirName holds the jobs' scratch workspaces under workspaceRoot.
const scratchDirName = ".delegations"

// researchTurn is what makes a turn a research turn.
type researchTurn struct {
	tools   []protocol.ToolSpec
	policy  []policy.Tool
	prompt  string
	scratch string
}

// newDelegation prepares the job registry and the research tool set and
// validates a sample research turn; leftover scratch workspaces of an
// earlier run are removed.
func (h *Host) newDelegation() error {
	d := h.cfg.Delegation
	h.jobs = delegation.NewRegistry(delegation.Limits{
		MaxRunning: d.MaxRunning, Timeout: time.Duration(d.TimeoutSeconds) * time.Second,
		MaxTitleChars: d.MaxTitleChars, MaxTaskChars: d.MaxTaskChars,
		MaxReportChars: d.MaxReportChars, DiagnosticChars: d.DiagnosticChars,
	}, delegation.DefaultRetention(), h.opts.Now)
	if !d.Enabled {
		return nil
	}
	h.research.prompt = d.Prompt
	for i, t := range h.cfg.Tools {
		if t.Name == d.FetchTool || (d.SearchTool != "" && t.Name == d.SearchTool) {
			h.research.tools = append(h.research.tools, h.tools[i])
			h.research.policy = append(h.research.policy, h.pol.Tools[i])
		}
	}
	if len(h.research.tools) == 0 {
		return fmt.Errorf("host: delegation.fetchTool %q is not a configured tool", d.FetchTool)
	}
	r := h.research
	sample := &turn{Handle: sandbox.Handle{ID: ids.NewTurnID(), Channel: "sandbox:preflight"}, speaker: protocol.Speaker{ID: "preflight"}, research: &r}
	if err := h.policyFor(sample, h.opts.Now().Add(time.Duration(d.TimeoutSeconds)*time.Second)).Validate(); err != nil {
		return fmt.Errorf("host: delegation makes an invalid broker policy: %w", err)
	}
	if _, err := h.turnJSON(sample, true); err != nil {
		return fmt.Errorf("host: delegation makes an invalid worker turn: %w", err)
	}
	h.sweepScratch()
	return nil
}

// StartDelegation admits a job for owner (the caller's uid) in channel and
// drives it in the background; the answer is its status at once.
func (h *Host) StartDelegation(channel string, owner int, req delegation.Request) (delegation.Status, error) {
	if !h.cfg.Delegation.Enabled {
		return delegation.Status{}, ErrDelegationDisabled
	}
	if err := h.jobs.Limits().Check(req); err != nil {
		h.metrics.delegations.WithLabelValues("refused").Inc()
		return delegation.Status{}, err
	}
	if h.state.Mode(channel) != ModeOn {
		return delegation.Status{}, ErrModeOff
	}
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return delegation.Status{}, ErrShuttingDown
	}
	j, err := h.jobs.Admit(h.opts.NewTurnID(), channel, owner, req)
	if err != nil {
		h.mu.Unlock()
		h.metrics.delegations.WithLabelValues("refused").Inc()
		return delegation.Status{}, err
	}
	h.turns.Add(1) // shutdown waits for the job's cleanup
	h.mu.Unlock()
	h.log.Info("delegation admitted", "job", j.ID(), "channel", ids.ChannelTag(channel), "owner_uid", owner,
		"title_chars", utf8.RuneCountInString(req.Title), "task_chars", utf8.RuneCountInString(req.Task),
		"deadline_unix", j.Deadline().Unix())
	st := j.Status() // before the job can start
	go h.driveJob(j)
	return delegation.Status{ID: st.ID, Channel: st.Channel, Title: st.Title, State: st.State, DeadlineUnixMs: st.DeadlineUnixMs}, nil
}

// driveJob takes a job from admission to its result: a slot of the global
// cap, the research turn, cleanup, then Finish (only after cleanup, so a
// finished job has left nothing behind, or the log says what).
func (h *Host) driveJob(j *delegation.Job) {
	defer h.turns.Done()
	log := h.log.With("job", j.ID(), "channel", ids.ChannelTag(j.Channel()))
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, j.Deadline(), errJobTimeout)
	defer cancelDeadline()
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer stopWatch()
	j.SetCancel(cancel)
	// A channel turned off between the admission's mode check and the
	// job's registration found nothing to cancel: check again.
	if h.state.Mode(j.Channel()) != ModeOn {
		cancel(errJobChannelOff)
	}
	start := h.opts.Now()

	var fin delegation.Finish
	release, err := h.queue.acquire(ctx, jobQueuePrefix+j.ID())
	if err != nil {
		fin = jobEnded(ctx, delegation.Finish{Result: delegation.ResultCancelled, Reason: reasonHostStop})
	} else {
		if j.Start() == nil {
			fin = h.executeJob(ctx, j, log)
		}
		release()
	}
	j.Finish(fin)
	st := j.Status()
	h.metrics.delegations.WithLabelValues(st.Result).Inc()
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
	case errors.Is(cause, errJobTimeout):
		return delegation.Finish{Result: delegation.ResultTimeout}
	case errors.Is(cause, errJobChannelOff):
		return delegation.Finish{Result: delegation.ResultCancelled, Reason: reasonChannelOff}
	case errors.Is(cause, ErrShuttingDown):
		return delegation.Finish{Result: delegation.ResultCancelled, Reason: reasonHostStop}
	}
	return otherwise
}

// executeJob runs the research turn and always cleans up (container, units,
// files, scratch workspace) before it returns the job's finish.
func (h *Host) executeJob(ctx context.Context, j *delegation.Job, log *slog.Logger) delegation.Finish {
	a := j.Author()
	r := h.research
	parent := filepath.Join(h.cfg.WorkspaceRoot, scratchDirName)
	r.scratch = filepath.Join(parent, j.ID())
	t := &turn{
		Handle:    sandbox.Handle{ID: j.ID(), Channel: j.Channel(), Tag: ids.ChannelTag(j.Channel()), Deadline: j.Deadline(), Quiet: true},
		speaker:   protocol.Speaker{ID: a.ID, Name: a.Name},
		principal: a.PrincipalID, text: researchText(j.Title(), j.Task()),
		reset: true, research: &r,
	}
	var reply *protocol.Reply
	runErr := os.Mkdir(parent, 0o700)
	if runErr == nil || errors.Is(runErr, fs.ErrExist) {
		reply, runErr = h.execute(ctx, t)
	}
	cleanupErr := h.cleanup(t, log)
	if err := h.removeScratch(r.scratch); err != nil {
		log.Error("scratch workspace removal failed; remove it by hand (the host also sweeps it at its next start)", "dir", r.scratch, "err", err)
		h.metrics.cleanupFailures.WithLabelValues("scratch").Inc()
		cleanupErr = errors.Join(cleanupErr, err)
	}
	if cleanupErr != nil {
		return delegation.Finish{Result: delegation.ResultFailed, Reason: reasonCleanup}
	}
	if runErr != nil {
		fin := jobEnded(ctx, delegation.Finish{Result: delegation.ResultFailed, Reason: reasonFailed})
		if fin.Result == delegation.ResultFailed {
			attrs := []any{"err", runErr}
			var exit *workerExitError
			if errors.As(runErr, &exit) {
				attrs = append(attrs, "exit_code", exit.status, "worker_cause", exit.cause)
				if exit.cause != "" { // one of protocol's fixed causes
					fin.Reason += " (the worker reports: " + exit.cause + ")"
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

// researchText is the research turn's message: the title and the task.
func researchText(title, task string) string {
	return "Research task: " + title + "\n\n" + task
}

// cancelJobs cancels the unfinished jobs of a channel turned off.
func (h *Host) cancelJobs(channel string) {
	if n := h.jobs.CancelChannel(channel, errJobChannelOff); n > 0 {
		h.log.Info("delegated jobs cancelled: channel turned off", "channel", ids.ChannelTag(channel), "jobs", n)
	}
}

// activeJobs lists unfinished jobs for GET /v1/turns: the reaper keeps
// their containers and units, from admission until after their cleanup.
func (h *Host) activeJobs() []ActiveTurn {
	var out []ActiveTurn
	for _, j := range h.jobs.Unfinished() {
		d := j.Deadline()
		out = append(out, ActiveTurn{ID: j.ID(), ChannelTag: ids.ChannelTag(j.Channel()), DeadlineUnix: d.Unix(), DeadlineUnixMs: d.UnixMilli(), Job: true})
	}
	return out
}

// sweepScratch removes scratch workspaces an earlier host left (at New,
// before any job exists).
func (h *Host) sweepScratch() {
	parent := filepath.Join(h.cfg.WorkspaceRoot, scratchDirName)
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		if err := h.removeScratch(dir); err != nil {
			h.log.Error("leftover scratch workspace removal failed; remove it by hand", "dir", dir, "err", err)
			continue
		}
		h.log.Info("leftover scratch workspace removed", "dir", dir)
	}
}

// Bounds of one scratch removal (a hostile worker may have built a tree).
const (
	maxScratchDepth   = 64
	maxScratchEntries = 1 << 16
)

// removeScratch removes a job's scratch workspace, which belongs to the
// channel's guest uid (0700, possibly with guest-made subdirectories of any
// mode). The host has CAP_CHOWN only, so it takes each directory back
// first (chown to itself without following links, then chmod 0700) and
// then reads and empties it, top down. The container is gone, and no other
// container mounts the scratch, so nothing changes the tree meanwhile.
// A missing directory is success.
func (h *Host) removeScratch(dir string) error {
	pfd, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	defer unix.Close(pfd)
	n := 0
	return h.reclaimAt(pfd, filepath.Base(dir), 0, &n)
}

func (h *Host) reclaimAt(pfd int, name string, depth int, n *int) error {
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
	if int(st.Uid) != h.opts.UID || int(st.Gid) != h.opts.GID {
		if err := unix.Fchownat(pfd, name, h.opts.UID, h.opts.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
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
				if err := h.reclaimAt(fd, child, depth+1, n); err != nil {
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

// queueOnly reports whether a queue entry is a delegated job's or a code
// run's own (job-<id>, run-<id> of a job or run the host knows), not a
// channel: GET /v1/channels leaves those out.
func (h *Host) queueOnly(name string) bool {
	if id, ok := strings.CutPrefix(name, jobQueuePrefix); ok {
		if _, err := h.jobs.Get(id); err == nil {
			return true
		}
	}
	if id, ok := strings.CutPrefix(name, runChannelPrefix); ok {
		if _, err := h.runs.Get(id); err == nil {
			return true
		}
	}
	return false
}
