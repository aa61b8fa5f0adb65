package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
	_ "time/tzdata" // zone names validate the same on every host, tzdata package or not
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Precheck scripts (DESIGN.md section 14). A precheck reuses a turn's
// lifecycle: the turn struct, its directory and policy file, the broker
// units, the container and h.cleanup with its retries, the global
// concurrency cap and the reaper's listing; what differs is the container
// (the worker image with the precheck argument, the workspace read-only
// and empty, smaller limits, a precheck-slot uid), the policy (the granted
// MCP tools and nothing else) and what stdin and stdout carry (a
// precheck.Job in, a precheck.Result out).

// Precheck errors the API maps (precheckStatusOf).
var (
	ErrPrechecksDisabled = errors.New("precheck scripts are disabled on this host (prechecks.enabled)")
	ErrPrecheckFailed    = errors.New("the precheck could not be run; the host log has details")
	ErrPrechecksBusy     = errors.New("too many prechecks running; try again later")
	errPrecheckTimeout   = errors.New("precheck timeout")
)

// maxActivePrechecks bounds prechecks admitted at once (waiting for the
// concurrency cap included).
const maxActivePrechecks = 64

// precheckChannelPrefix names a precheck's queue entry ("precheck-<id>"):
// prechecks of one channel do not wait for each other or for its turns,
// only for the global cap.
const precheckChannelPrefix = "precheck-"

// precheckSlotChannel names the guest-uid record of precheck slot k:
// concurrent prechecks get distinct uids (RLIMIT_NPROC is per uid), never a
// channel's, so a busy turn cannot starve its channel's precheck of
// processes.
func precheckSlotChannel(k int) string { return "sandbox-precheck-slot/" + strconv.Itoa(k) }

// Result labels of sandbox_prechecks_total.
const (
	precheckWake        = "wake"
	precheckNoWake      = "no_wake"
	precheckScriptError = "script_error"
	precheckTimeout     = "timeout"
	precheckFailed      = "failed"
)

// activePrecheck is one precheck as the reaper sees it.
type activePrecheck struct {
	tag      string
	deadline time.Time
}

// precheckSet is the prechecks alive, from admission until after cleanup.
type precheckSet struct {
	mu sync.Mutex
	m  map[string]activePrecheck
}

func (s *precheckSet) add(id string, a activePrecheck) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxActivePrechecks {
		return false
	}
	if s.m == nil {
		s.m = map[string]activePrecheck{}
	}
	s.m[id] = a
	return true
}

func (s *precheckSet) set(id string, a activePrecheck) {
	s.mu.Lock()
	s.m[id] = a
	s.mu.Unlock()
}

func (s *precheckSet) remove(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// list is the reaper's view: a precheck is listed from before anything of
// it exists until after its cleanup.
func (s *precheckSet) list() []ActiveTurn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ActiveTurn, 0, len(s.m))
	for id, a := range s.m {
		out = append(out, ActiveTurn{ID: id, ChannelTag: a.tag, DeadlineUnix: a.deadline.Unix(), DeadlineUnixMs: a.deadline.UnixMilli(), Precheck: true})
	}
	return out
}

// precheckPlan is a checked request: what the run needs.
type precheckPlan struct {
	channel string
	job     precheck.Job
	servers []policy.MCPServer // the granted tools only
}

// checkPrecheck validates a request against its bounds and the operator's
// grants; every refusal names what was wrong.
func (h *Host) checkPrecheck(req precheck.Request) (precheckPlan, error) {
	pc := h.cfg.Prechecks
	if err := ids.ValidChannel(req.Channel); err != nil {
		return precheckPlan{}, badRequest("channel: " + err.Error())
	}
	if !utf8.ValidString(req.Target) || utf8.RuneCountInString(req.Target) > precheck.MaxTargetChars {
		return precheckPlan{}, badRequest(fmt.Sprintf("target must be valid UTF-8 of at most %d characters", precheck.MaxTargetChars))
	}
	if req.Script == "" || len(req.Script) > precheck.MaxScriptBytes || !utf8.ValidString(req.Script) {
		return precheckPlan{}, badRequest(fmt.Sprintf("script must be 1 to %d bytes of UTF-8", precheck.MaxScriptBytes))
	}
	if err := checkField("schedule", req.Schedule, precheck.MaxScheduleChars); err != nil {
		return precheckPlan{}, err
	}
	firedAt := h.opts.Now()
	if req.FiredAt != "" {
		t, err := time.Parse(time.RFC3339, req.FiredAt)
		if err != nil {
			return precheckPlan{}, badRequest("firedAt must be an RFC 3339 time, e.g. 2026-11-30T23:05:00Z")
		}
		firedAt = t
	}
	zone := req.TimeZone
	if zone == "" {
		zone = h.cfg.TimeZone
	}
	if len(zone) > precheck.MaxTimeZoneBytes || zone == "Local" {
		return precheckPlan{}, badRequest("timeZone must be an IANA time zone name")
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return precheckPlan{}, badRequest("timeZone must be an IANA time zone name")
	}
	if len(req.Grants) > precheck.MaxGrants {
		return precheckPlan{}, badRequest(fmt.Sprintf("at most %d grants", precheck.MaxGrants))
	}
	byServer := map[string][]string{}
	var order []string
	for _, g := range req.Grants {
		name := g.Server + ":" + g.Tool
		if !protocol.ValidToolName(g.Server) || !protocol.ValidMCPToolName(g.Tool) {
			return precheckPlan{}, badRequest(fmt.Sprintf("grant %q: server must match %s and tool be %s", clip(name, 120), protocol.ToolNameRule, protocol.MCPToolNameRule))
		}
		if slices.Contains(byServer[g.Server], g.Tool) {
			return precheckPlan{}, badRequest(fmt.Sprintf("grant %s is listed twice", name))
		}
		s, ok := h.pol.Server(g.Server)
		if !ok || !slices.Contains(s.Tools, g.Tool) || !pc.PrecheckAllows(req.Channel, g.Server, g.Tool) {
			return precheckPlan{}, &requestError{ErrForbidden, fmt.Sprintf("grant %s is not allowed for this channel (prechecks.grants)", name)}
		}
		if _, seen := byServer[g.Server]; !seen {
			order = append(order, g.Server)
		}
		byServer[g.Server] = append(byServer[g.Server], g.Tool)
	}
	plan := precheckPlan{channel: req.Channel}
	var jobServers []precheck.Server
	for _, name := range order {
		s, _ := h.pol.Server(name)
		s.Tools = append([]string(nil), byServer[name]...)
		plan.servers = append(plan.servers, s)
		jobServers = append(jobServers, precheck.Server{Name: name, Tools: s.Tools})
	}
	timeoutMs := pc.TimeoutSeconds*1000 - 1000 // the VM stops a second before the kill, so its answer is the error
	plan.job = precheck.Job{
		Script: req.Script, FiredAt: firedAt.Format(time.RFC3339), TimeZone: zone, Today: precheck.Today(firedAt, loc),
		Schedule: req.Schedule, Servers: jobServers, TimeoutMs: max(timeoutMs, precheck.MinTimeoutMs),
		MaxCalls: pc.MaxCalls, MaxNoteChars: pc.MaxNoteChars, MaxContextChars: pc.MaxContextChars,
		MaxHeapBytes: int64(pc.MemoryMB) << 20 * 3 / 5,
	}
	if err := plan.job.Validate(); err != nil {
		return precheckPlan{}, badRequest(err.Error())
	}
	return plan, nil
}

// clip cuts s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// RunPrecheck runs one precheck to its answer: after its cleanup, always.
// A script's failure is an answer with an error; err is a refused request
// or the system's failure.
func (h *Host) RunPrecheck(ctx context.Context, req precheck.Request) (precheck.Answer, error) {
	pc := h.cfg.Prechecks
	if !pc.Enabled {
		return precheck.Answer{}, ErrPrechecksDisabled
	}
	plan, err := h.checkPrecheck(req)
	if err != nil {
		return precheck.Answer{}, err
	}
	id := h.opts.NewTurnID()
	tag := ids.ChannelTag(plan.channel)
	timeout := time.Duration(pc.TimeoutSeconds) * time.Second
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return precheck.Answer{}, ErrShuttingDown
	}
	// Listed before anything of it exists; the bound covers a wait for the
	// concurrency cap (at most one turn deadline) and the run.
	bound := h.opts.Now().Add(time.Duration(h.cfg.TurnDeadlineSeconds)*time.Second + timeout)
	if !h.prechecks.add(id, activePrecheck{tag: tag, deadline: bound}) {
		h.mu.Unlock()
		return precheck.Answer{}, ErrPrechecksBusy
	}
	h.turns.Add(1) // shutdown waits for the cleanup
	h.mu.Unlock()
	defer h.turns.Done()
	defer h.prechecks.remove(id)

	log := h.log.With("precheck", id, "channel", tag)
	log.Info("precheck admitted", "grants", len(req.Grants), "script_bytes", len(req.Script))
	start := h.opts.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopWatch := context.AfterFunc(h.stopCtx, func() { cancel(ErrShuttingDown) })
	defer stopWatch()

	release, err := h.queue.acquire(ctx, precheckChannelPrefix+id)
	if err != nil {
		h.metrics.prechecks.WithLabelValues(precheckFailed).Inc()
		log.Info("precheck done", "result", precheckFailed, "reason", "not admitted: "+err.Error())
		if errors.Is(context.Cause(ctx), ErrShuttingDown) {
			return precheck.Answer{}, ErrShuttingDown
		}
		if errors.Is(err, ErrShuttingDown) || errors.Is(err, ErrQueueFull) {
			return precheck.Answer{}, err
		}
		return precheck.Answer{}, ErrClientGone
	}
	defer release()
	res, label, err := h.executePrecheck(ctx, id, plan, log)
	h.metrics.prechecks.WithLabelValues(label).Inc()
	attrs := []any{"result", label, "duration_ms", h.opts.Now().Sub(start).Milliseconds()}
	if res.Kind != "" {
		attrs = append(attrs, "error_kind", res.Kind)
	}
	if err != nil {
		log.Info("precheck done", append(attrs, "reason", err.Error())...)
		if errors.Is(context.Cause(ctx), ErrShuttingDown) {
			return precheck.Answer{}, ErrShuttingDown
		}
		return precheck.Answer{}, ErrPrecheckFailed
	}
	log.Info("precheck done", attrs...)
	if res.Error != "" {
		return precheck.Answer{Error: res.Error}, nil
	}
	wake := res.Wake
	return precheck.Answer{Wake: &wake, Note: res.Note, Context: res.Context}, nil
}

// executePrecheck runs the container and always cleans up before it
// returns: the result, its metric label, or the system's failure.
func (h *Host) executePrecheck(ctx context.Context, id string, plan precheckPlan, log *slog.Logger) (res precheck.Result, label string, err error) {
	pc := h.cfg.Prechecks
	c := h.cfg
	deadline := h.opts.Now().Add(time.Duration(pc.TimeoutSeconds) * time.Second)
	h.prechecks.set(id, activePrecheck{tag: ids.ChannelTag(plan.channel), deadline: deadline})
	runCtx, cancelDeadline := context.WithDeadlineCause(ctx, deadline, errPrecheckTimeout)
	defer cancelDeadline()
	t := &turn{Handle: sandbox.Handle{ID: id, Channel: plan.channel, Tag: ids.ChannelTag(plan.channel), Deadline: deadline, Quiet: true}}
	slot := h.precheckSlots.Take()
	defer h.precheckSlots.Give(slot)
	defer func() {
		if cerr := h.cleanup(t, log); cerr != nil && err == nil {
			res, label, err = precheck.Result{}, precheckFailed, cerr
		}
	}()
	timedOut := func() (precheck.Result, string, error) {
		return precheck.Result{Error: fmt.Sprintf("the precheck passed its %d s timeout and was killed", pc.TimeoutSeconds), Kind: precheck.KindTimeout}, precheckTimeout, nil
	}
	fail := func(what string, e error) (precheck.Result, string, error) {
		if errors.Is(context.Cause(runCtx), errPrecheckTimeout) {
			return timedOut()
		}
		return precheck.Result{}, precheckFailed, fmt.Errorf("%s: %w", what, e)
	}

	if t.Container, err = ids.ContainerName(t.Channel, id); err != nil {
		return fail("name", err)
	}
	uid, err := h.state.GuestUID(precheckSlotChannel(slot), h.cfg.Guests, -1)
	if err != nil {
		return fail("guest uid", err)
	}
	workspace, err := sandbox.EmptyWorkspace(h.cfg.WorkspaceRoot)
	if err != nil {
		return fail("workspace", err)
	}
	if t.Dir, err = layout.TurnDir(c.RunRoot, id); err != nil {
		return fail("turn directory", err)
	}
	if t.Policy, err = layout.PolicyFile(c.PolicyDir, id); err != nil {
		return fail("policy file", err)
	}
	limits := c.Broker.PolicyLimits()
	limits.MaxCalls = max(pc.MaxCalls, 1) // the runner's budget (0 refuses every call) is the tighter one
	pol := policy.Policy{
		Version: policy.Version, TurnID: id,
		Identity:       policy.Identity{Channel: plan.channel, ChannelTag: t.Tag},
		DeadlineUnixMs: deadline.UnixMilli(),
		MCP:            plan.servers,
		Limits:         limits,
		Precheck:       true,
	}
	data, err := pol.Marshal()
	if err != nil {
		return fail("policy", err)
	}
	stdin, err := json.Marshal(plan.job)
	if err != nil || len(stdin) > precheck.MaxJobBytes {
		return fail("job", fmt.Errorf("job of %d bytes: %v", len(stdin), err))
	}
	if err := h.makeTurnDir(t); err != nil {
		return fail("turn directory", err)
	}
	if err := h.writePolicyFile(t, data); err != nil {
		return fail("policy file", err)
	}
	t.UnitTried = true
	if err := h.opts.Units.StartBroker(runCtx, id); err != nil {
		return fail("broker units", err)
	}
	spec := ContainerSpec{
		Name: t.Container, Image: c.Image, UID: uid, GID: uid,
		WorkspaceDir: workspace, TurnDir: t.Dir,
		MemoryMB: pc.MemoryMB, CPUs: pc.CPUs, Pids: pc.Pids, TmpfsMB: pc.TmpfsMB,
		Runtime: c.Runtime, LogTag: ids.LogTag(plan.channel),
		Labels: map[string]string{
			layout.LabelInstallation: c.Installation,
			layout.LabelTurn:         id,
			layout.LabelChannel:      t.Tag,
			layout.LabelDeadline:     strconv.FormatInt(deadline.Unix(), 10),
		},
		Precheck: true,
	}
	t.CreateTried = true
	if t.ContainerID, err = h.opts.Containers.Create(runCtx, spec); err != nil {
		return fail("container create", err)
	}
	lim := precheck.Limits{MaxNoteChars: pc.MaxNoteChars, MaxContextChars: pc.MaxContextChars}
	sink := h.opts.WorkerLogs.Turn(t.Tag, id, t.Container)
	out, err := h.opts.Containers.Run(runCtx, t.ContainerID, stdin, lim.MaxResultBytes(), nil, sink)
	h.life.CloseSink(&t.Handle, sink)
	if err != nil {
		return fail("run", err)
	}
	if runCtx.Err() != nil {
		if errors.Is(context.Cause(runCtx), errPrecheckTimeout) {
			return timedOut()
		}
		return fail("run", context.Cause(runCtx))
	}
	switch {
	case out.Truncated:
		return fail("result", errors.New("stdout over its bound"))
	case out.StderrRefused:
		return fail("result", errors.New("stderr over its bound"))
	case out.ExitCode == 128+9:
		// The container's memory limit (the heap watchdog stops a script
		// below it; a burst can pass it) or a forced stop.
		return precheck.Result{Error: "the precheck was killed: it used more memory than allowed", Kind: precheck.KindMemory}, precheckScriptError, nil
	case out.ExitCode != 0:
		return fail("runner", fmt.Errorf("exited with status %d (%s)", out.ExitCode, exitMeaning(out.ExitCode)))
	}
	res, err = precheck.DecodeResult(out.Stdout, lim)
	if err != nil {
		return fail("result", err)
	}
	switch {
	case res.Kind == precheck.KindTimeout:
		return res, precheckTimeout, nil
	case res.Kind == precheck.KindInternal:
		return fail("runner", errors.New("the runner refused its job"))
	case res.Error != "":
		return res, precheckScriptError, nil
	case res.Wake:
		return res, precheckWake, nil
	}
	return res, precheckNoWake, nil
}

// handlePrecheck is POST /v1/prechecks: the answer after the run's cleanup.
func (h *Host) handlePrecheck(w http.ResponseWriter, r *http.Request, _ string) error {
	if !h.accepting() {
		return ErrShuttingDown
	}
	var req precheck.Request
	if err := decodeBodyN(w, r, &req, precheck.MaxRequestBytes); err != nil {
		return err
	}
	ans, err := h.RunPrecheck(r.Context(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}

// precheckStatusOf maps the precheck errors (statusOf calls it).
func precheckStatusOf(err error) (int, string, bool) {
	switch {
	case errors.Is(err, ErrPrechecksDisabled):
		return http.StatusConflict, ErrPrechecksDisabled.Error(), true
	case errors.Is(err, ErrPrechecksBusy):
		return http.StatusTooManyRequests, ErrPrechecksBusy.Error(), true
	case errors.Is(err, ErrPrecheckFailed):
		return http.StatusInternalServerError, ErrPrecheckFailed.Error(), true
	}
	return 0, "", false
}
