package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/standby"
)

// Phases of the warm path (label "phase" of sandbox_turn_phase_seconds).
const (
	PhaseStandbyPrepare = "standby_prepare" // a standby made ready, in the background
	PhaseStandbyBind    = "standby_bind"    // the turn's policy and stdin prepared for a standby
)

// standbyBrokerSlack is how long a standby's broker waits for its policy
// past the standby's expiry: the host discards the standby at its expiry,
// so the broker's own exit never races a binding turn.
const standbyBrokerSlack = 30 * time.Second

// warmTurn is one ready standby: a turn's objects (directory, placeholder
// policy, broker units, started container) without a turn yet.
type warmTurn struct {
	h       *Host
	t       *turn
	started StartedContainer
	log     *slog.Logger
	key     string
}

// overwriteFile replaces path's content in place (same inode, never
// following a symlink) and syncs it.
func overwriteFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Alive: the container still runs (Docker restarted, OOM, killed by hand:
// the turn then takes the cold path).
func (w *warmTurn) Alive(ctx context.Context) error {
	running, err := w.h.warm.Running(ctx, w.t.ContainerID)
	if err != nil {
		return err
	}
	if !running {
		return errors.New("standby container is not running")
	}
	return nil
}

// Discard removes the standby as a turn's cleanup removes a turn.
func (w *warmTurn) Discard(reason string) {
	w.started.Close()
	if err := w.h.cleanup(w.t, w.log); err != nil {
		w.log.Warn("standby discard incomplete", "reason", reason, "err", err)
	}
}

// newStandbys makes the pool when standbys are enabled and the driver can
// start a container apart from running it.
func (h *Host) newStandbys() error {
	c := h.cfg
	w, ok := h.opts.Containers.(WarmContainers)
	if !ok || !c.Standby.Enabled || c.Standby.Max <= 0 {
		return nil
	}
	key, err := h.shapeKey()
	if err != nil {
		return fmt.Errorf("host: standby key: %w", err)
	}
	h.warm, h.shape = w, key
	h.standbys = standby.New(standby.Options{
		Max: c.Standby.Max, MaxAge: c.StandbyMaxAge(),
		Prepare: h.prepareStandby, NewTurnID: h.opts.NewTurnID, Now: h.opts.Now,
		Event: h.metrics.standbyEvent, Log: h.log,
	})
	return nil
}

// shapeKey fingerprints everything of this process that shapes a standby
// (the whole configuration: image, limits, runtime, prompt, tools, MCP
// servers, and the specs and policy template derived from them). The host
// reads its configuration once, so a change means a restart, which discards
// every standby anyway; the key makes a standby's fit a checked fact
// rather than an assumption.
func (h *Host) shapeKey() (string, error) {
	data, err := json.Marshal(struct {
		Config any
		Tools  []protocol.ToolSpec
		MCP    []protocol.MCPServerSpec
		Policy policy.Policy
	}{h.cfg, h.tools, h.mcpSpecs, h.pol})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// standbyKey is a standby's key: the process's shape, the channel's guest
// uid and the model credential its turn uses (the standby's broker holds
// only the credentials of its turn's policy, so a turn that selects another
// cannot use it). The credential name comes last: credential names hold
// no ":".
func (h *Host) standbyKey(channel, credential string) (string, error) {
	ws, err := layout.WorkspaceDir(h.cfg.WorkspaceRoot, channel)
	if err != nil {
		return "", err
	}
	uid, err := h.guestFor(channel, ws)
	if err != nil {
		return "", err
	}
	return h.shape + ":" + strconv.Itoa(uid) + ":" + credential, nil
}

// keyCredential is the model credential a key was made for.
func keyCredential(key string) string { return key[strings.LastIndexByte(key, ':')+1:] }

// takeStandby binds t to channel's ready standby, when there is one: t
// takes the standby's turn id (the active entry too, before the pool stops
// listing it). Otherwise t stays on the cold path.
func (h *Host) takeStandby(ctx context.Context, t *turn, active *activeTurn) {
	if h.standbys == nil {
		return
	}
	key, err := h.standbyKey(t.Channel, h.cfg.SelectCredential(t.Channel, t.principal, t.speaker.ID))
	if err != nil {
		return // the cold path reports it
	}
	lease, _ := h.standbys.Take(ctx, t.Channel, key)
	if lease == nil {
		return
	}
	h.mu.Lock()
	t.ID = lease.TurnID
	active.id = lease.TurnID
	h.mu.Unlock()
	lease.Release()
	t.warm = lease.Warm.(*warmTurn)
}

// refillStandby prepares channel's next standby in the background, for a
// turn that selects the credential the last one did (the same speaker, most
// often). Not while the channel has turns waiting: the next one starts now,
// before a standby could be ready, and would only share Docker with its
// preparation (the last of them refills).
func (h *Host) refillStandby(channel, credential string) {
	if h.standbys == nil || !h.accepting() || h.state.Mode(channel) != ModeOn || h.queue.waitingFor(channel) > 0 {
		return
	}
	key, err := h.standbyKey(channel, credential)
	if err != nil {
		return
	}
	h.standbys.Refill(channel, key)
}

// dropStandby discards channel's standby (the channel left sandbox mode).
func (h *Host) dropStandby(channel, reason string) {
	if h.standbys != nil {
		h.standbys.Drop(channel, reason)
	}
}

// prepareStandby is standby.PrepareFunc: the cold path's preparation up to
// a started container, with a placeholder policy (policy.Pending) in place
// of the turn's. Whatever fails is removed as a turn's cleanup removes it.
func (h *Host) prepareStandby(ctx context.Context, channel, key, turnID string, expiry time.Time) (standby.Warm, error) {
	start := time.Now()
	t := &turn{Handle: sandbox.Handle{ID: turnID, Channel: channel, Tag: ids.ChannelTag(channel), Deadline: expiry, Quiet: true}}
	log := h.log.With("turn", turnID, "channel", t.Tag, "standby", true)
	started, err := h.startStandby(ctx, t, keyCredential(key))
	if err != nil {
		if cerr := h.cleanup(t, log); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	h.ObservePhase(PhaseStandbyPrepare, time.Since(start))
	log.Debug("standby ready", "prepare_ms", time.Since(start).Milliseconds(), "expires", expiry.UTC().Format(time.RFC3339))
	return &warmTurn{h: h, t: t, started: started, log: log, key: key}, nil
}

func (h *Host) startStandby(ctx context.Context, t *turn, credential string) (StartedContainer, error) {
	if err := h.turnPaths(t); err != nil {
		return nil, err
	}
	// The names the turn's policy will hold: sandbox-credset gives the
	// standby's broker exactly these.
	shape := h.pol
	shape.Model.Credential = credential
	pending, err := (&policy.Pending{Version: policy.Version, TurnID: t.ID, Pending: true,
		DeadlineUnixMs: t.Deadline.Add(standbyBrokerSlack).UnixMilli(), Credentials: shape.CredentialNames()}).Marshal()
	if err != nil {
		return nil, fmt.Errorf("pending policy: %w", err)
	}
	if err := h.makeTurnDir(t); err != nil {
		return nil, err
	}
	if err := h.writePolicyFile(t, pending); err != nil {
		return nil, err
	}
	t.UnitTried = true
	if err := h.opts.Units.StartBroker(ctx, t.ID); err != nil {
		return nil, fmt.Errorf("broker units: %w", err)
	}
	// Off the reply path, so wait for the broker itself: one that failed to
	// start (a credential set that timed out under load, say) would fail the
	// turn that binds this standby; failing here leaves that turn the cold path.
	if err := h.opts.Units.StartBrokerService(ctx, t.ID); err != nil {
		return nil, fmt.Errorf("broker service: %w", err)
	}
	expiry := strconv.FormatInt(t.Deadline.Unix(), 10)
	spec := h.containerSpec(t, t.Deadline, map[string]string{layout.LabelStandby: expiry})
	t.CreateTried = true
	if t.ContainerID, err = h.opts.Containers.Create(ctx, spec); err != nil {
		return nil, err
	}
	started, err := h.warm.Start(ctx, t.ContainerID)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return started, nil
}

// bindStandby runs t on its standby: the turn's policy replaces the
// placeholder, then the worker gets its stdin. From there it is the
// ordinary turn, cleanup included: t owns the standby's objects. The policy
// is written in place, not by rename: the broker unit binds the file as it
// was when the broker started (it sees only its own policy), and the
// broker reads it at its first connection, which comes only after stdin.
func (h *Host) bindStandby(ctx context.Context, t *turn) (*protocol.Reply, error) {
	w := t.warm
	s := w.t
	t.Container, t.ContainerID, t.Workspace, t.Dir, t.Policy, t.Guest = s.Container, s.ContainerID, s.Workspace, s.Dir, s.Policy, s.Guest
	t.MadeDir, t.MadePolicy, t.UnitTried, t.CreateTried = true, true, true, true
	defer w.started.Close()
	since := time.Now()
	stdin, err := h.turnJSON(t, t.reset)
	if err != nil {
		return nil, fmt.Errorf("turn JSON: %w", err)
	}
	pol, err := h.policyFor(t, t.Deadline).Marshal()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if p := h.policyFor(t, t.Deadline); p.Model.Credential != keyCredential(w.key) {
		// takeStandby's key makes this unreachable; never serve a turn a
		// broker without its credential.
		return nil, fmt.Errorf("standby made for credential %q, turn needs %q", keyCredential(w.key), p.Model.Credential)
	}
	if err := overwriteFile(t.Policy, pol); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	t.phase(h, PhaseStandbyBind, since)
	since = time.Now()
	sink := h.opts.WorkerLogs.Turn(t.Tag, t.ID, t.Container)
	res, err := w.started.Finish(ctx, stdin, protocol.MaxReplyBytes, sink)
	t.phase(h, PhaseRun, since)
	h.life.CloseSink(&t.Handle, sink)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	return readReply(ctx, res)
}
