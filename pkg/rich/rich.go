// Package rich is the long-lived worker of a rich channel (DESIGN.md
// section 13): it announces itself to its channel broker, long polls for
// turns and answers each with one reply packet (package richproto), one
// turn at a time, re-announcing after the broker or host restarts. A turn
// is an agent loop on streamed Anthropic Messages through the broker's
// model route, with host tools and MCP tools through the broker's /tools
// and /mcp routes and the memory tools of package memory; its conversation
// is the channel's session (JSONL in the workspace), compacted by the
// seed's tiers through the host compactor (/compact) or the worker's own
// summary call.
//
// Guarantees: a turn never asks for thinking above its Turn.Thinking; the
// loop bounds below hold whatever the model answers; a failed turn answers
// ok false with a fixed richproto cause, never error text; a corrupt
// session fails the turn and is left as it was; logs carry routes,
// statuses, latencies, counts and tool names, never message text, memory
// values or tool payloads.
package rich

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// Options wires a worker to its broker and workspace.
type Options struct {
	Pull     Pull
	Model    Model
	Tools    Tools
	Sessions Sessions
	// Compactor is the host compactor (nil: always the worker's summary);
	// Reporter takes compaction reports (nil: none sent).
	Compactor Compactor
	Reporter  Reporter
	// Attachments fetches a turn's attachments (nil: each is noted to the
	// model as unavailable).
	Attachments Attachments
	// Workspace is the channel workspace (/workspace in the container).
	Workspace string
	// SkillsDir is the operator's read-only skills tree (SkillsPath in the
	// container; "" or a missing directory: no read_skill tool).
	SkillsDir string
	// Tiers are the compaction tiers (zero: the seed's 300,000 and 500,000).
	Tiers  Tiers
	Logger *slog.Logger
	Now    func() time.Time
	// MinBackoff and MaxBackoff bound the wait before re-announcing after
	// a failed poll (zero: 200 ms and 5 s).
	MinBackoff, MaxBackoff time.Duration
}

// Worker is one channel's long-lived worker.
type Worker struct {
	pull        Pull
	model       Model
	tools       Tools
	sessions    Sessions
	compactor   Compactor
	reporter    Reporter
	attachments Attachments
	workspace   string
	tiers       Tiers
	log         *slog.Logger
	now         func() time.Time
	minBackoff  time.Duration
	maxBackoff  time.Duration
	skills      *skills // nil: none mounted
	// sess is the open session, kept across turns (opening reads the
	// whole file); reopened for a fresh turn and after a failed write.
	sess Session
}

// session is the channel's session for a turn.
func (w *Worker) session(fresh bool) (Session, error) {
	if w.sess != nil && !fresh {
		return w.sess, nil
	}
	w.dropSession()
	s, err := w.sessions.Open(fresh)
	if err != nil {
		return nil, err
	}
	w.sess = s
	return s, nil
}

func (w *Worker) dropSession() {
	if w.sess != nil {
		w.sess.Close()
		w.sess = nil
	}
}

// New returns a worker; Pull, Model, Tools and Sessions are required.
func New(o Options) (*Worker, error) {
	if o.Pull == nil || o.Model == nil || o.Tools == nil || o.Sessions == nil || o.Workspace == "" {
		return nil, errors.New("rich: Pull, Model, Tools, Sessions and Workspace are required")
	}
	w := &Worker{pull: o.Pull, model: o.Model, tools: o.Tools, sessions: o.Sessions, compactor: o.Compactor,
		reporter: o.Reporter, attachments: o.Attachments, workspace: o.Workspace, tiers: o.Tiers, log: o.Logger, now: o.Now,
		minBackoff: o.MinBackoff, maxBackoff: o.MaxBackoff}
	if o.SkillsDir != "" {
		s, err := openSkills(o.SkillsDir)
		if err != nil {
			return nil, err
		}
		w.skills = s
	}
	if w.tiers.Threshold <= 0 || w.tiers.Ceiling < w.tiers.Threshold {
		w.tiers = Tiers{Threshold: sessions.DefaultThreshold, Ceiling: sessions.DefaultCeiling}
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	if w.minBackoff <= 0 {
		w.minBackoff = 200 * time.Millisecond
	}
	if w.maxBackoff < w.minBackoff {
		w.maxBackoff = max(5*time.Second, w.minBackoff)
	}
	return w, nil
}

// Serve runs the pull loop until ctx ends: announce, long poll, run the
// turn, send its result; a failed announce, poll or result makes it back
// off and announce again (the broker or the host restarted).
func (w *Worker) Serve(ctx context.Context) error {
	defer w.dropSession()
	defer w.skills.close()
	backoff := w.minBackoff
	wait := func() bool {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(backoff*2, w.maxBackoff)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	announced := false
	for ctx.Err() == nil {
		if !announced {
			if err := w.pull.Ready(ctx, w.ready()); err != nil {
				w.logPull("announce failed", err)
				if !wait() {
					break
				}
				continue
			}
			w.log.Info("worker ready")
			announced = true
		}
		turn, err := w.pull.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			w.logPull("poll failed", err)
			announced = false
			if !wait() {
				break
			}
			continue
		}
		backoff = w.minBackoff
		if turn == nil {
			continue
		}
		res := w.runTurn(ctx, turn)
		if err := w.pull.Result(ctx, res); err != nil {
			// A refused packet (the turn was cancelled or the broker
			// restarted) is dropped: the host settles the turn.
			w.logPull("result not accepted", err)
			announced = false
		}
	}
	return ctx.Err()
}

func (w *Worker) logPull(msg string, err error) {
	var status *StatusError
	if errors.As(err, &status) {
		w.log.Warn(msg, "cause", "broker refused", "status", status.Status)
		return
	}
	w.log.Warn(msg, "cause", "transport")
}
