// Package precheckrun is the precheck kind (DESIGN.md section 14): a
// channel's precheck script checked against its bounds and the operator's
// grants, run in the worker image (the precheck argument, an empty
// read-only workspace, smaller limits, a precheck-slot uid) with a broker
// whose policy holds the granted MCP tools and nothing else, a
// precheck.Job in and a precheck.Result out. It drives the lifecycle,
// reaches the host only through its narrow Host interface and imports no
// other kind.
// Guarantee: the answer comes only after the precheck's cleanup; a script
// reaches only the tools granted to its channel; a script's failure is an
// answer with an error, never the system's detail; at most 64 prechecks
// are admitted at once.
package precheckrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	_ "time/tzdata" // zone names validate the same on every host, tzdata package or not
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetjobs"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
)

// Host is what a precheck needs of the host that made the kind.
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
	// GuestUID is the guest uid recorded for key (made on first use).
	GuestUID(key string) (int, error)
}

// Options make a Kind.
type Options struct {
	Config    *config.Config
	Lifecycle *sandbox.Lifecycle
	Host      Host
	Logger    *slog.Logger
	Now       func() time.Time
	NewID     func() string
	// Policy is the host's policy template: the MCP servers a grant may
	// name.
	Policy policy.Policy
	// Registry receives sandbox_prechecks_total.
	Registry prometheus.Registerer
	// Fleet, in fleet mode, is where admitted prechecks run (fleet.go);
	// Box is this box's name (fleet.box).
	Fleet *fleet.Fleet
	Box   string
}

// Kind is the host's prechecks.
type Kind struct {
	cfg     *config.Config
	life    *sandbox.Lifecycle
	host    Host
	log     *slog.Logger
	now     func() time.Time
	newID   func() string
	pol     policy.Policy
	active  precheckSet
	slots   sandbox.Slots
	results *prometheus.CounterVec
	queue   *fleetjobs.Queue
	box     string
}

// New makes the kind.
func New(o Options) *Kind {
	k := &Kind{cfg: o.Config, life: o.Lifecycle, host: o.Host, log: o.Logger, now: o.Now, newID: o.NewID, pol: o.Policy, queue: fleetjobs.New(o.Fleet), box: o.Box,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandbox_prechecks_total", Help: "Precheck scripts run, by result (wake, no_wake, script_error, timeout, failed: the system's failure).",
		}, []string{"result"}),
	}
	o.Registry.MustRegister(k.results)
	return k
}

// Listed are the prechecks for GET /v1/turns: each from before anything of
// it exists until after its cleanup.
func (k *Kind) Listed() []apiwire.Turn { return k.active.list() }

// Refusal is a request refused for the caller's own input: its kind
// (ErrInvalid or ErrForbidden) and a reason that names what was wrong (the
// API's RequestError: the host answers the kind's status with the reason).
type Refusal = api.RequestError

// Refusal kinds.
var (
	ErrInvalid   = errors.New("bad request")
	ErrForbidden = errors.New("forbidden")
)

func invalid(reason string) error   { return &Refusal{Kind: ErrInvalid, Reason: reason} }
func forbidden(reason string) error { return &Refusal{Kind: ErrForbidden, Reason: reason} }

// Errors the host maps to a status.
var (
	ErrDisabled = errors.New("precheck scripts are disabled on this host (prechecks.enabled)")
	ErrFailed   = errors.New("the precheck could not be run; the host log has details")
	ErrBusy     = errors.New("too many prechecks running; try again later")
	errTimeout  = errors.New("precheck timeout")
)

// maxActivePrechecks bounds prechecks admitted at once (waiting for the
// concurrency cap included).
const maxActivePrechecks = 64

// A precheck's queue entry is ids.PrecheckName(id), "precheck-<id>":
// prechecks of one channel do not wait for each other or for its turns,
// only for the global cap. Its guest uid is its slot's (ids.PrecheckSlot):
// concurrent prechecks get distinct uids (RLIMIT_NPROC is per uid), never
// a channel's, so a busy turn cannot starve its channel's precheck of
// processes. No channel key takes either form (ids.ValidChannel).

// precheckVMMarginMs is how long before the host's kill the runner's VM
// stops (the job's timeoutMs), so that a script past its time answers with
// its own error.
const precheckVMMarginMs = 1000

// Result labels of sandbox_prechecks_total.
const (
	ResultWake        = "wake"
	ResultNoWake      = "no_wake"
	ResultScriptError = "script_error"
	ResultTimeout     = "timeout"
	ResultFailed      = "failed"
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
func (s *precheckSet) list() []apiwire.Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]apiwire.Turn, 0, len(s.m))
	for id, a := range s.m {
		out = append(out, apiwire.Turn{ID: id, ChannelTag: a.tag, DeadlineUnix: a.deadline.Unix(), DeadlineUnixMs: a.deadline.UnixMilli(), Precheck: true})
	}
	return out
}

// precheckPlan is a checked request: what the run needs.
type precheckPlan struct {
	channel string
	job     precheck.Job
	servers []policy.MCPServer // the granted tools only
}

// check validates a request against its bounds and the operator's
// grants; every refusal names what was wrong.
func (k *Kind) check(req precheck.Request) (precheckPlan, error) {
	pc := k.cfg.Prechecks
	if err := ids.ValidChannel(req.Channel); err != nil {
		return precheckPlan{}, invalid("channel: " + err.Error())
	}
	if !utf8.ValidString(req.Target) || utf8.RuneCountInString(req.Target) > precheck.MaxTargetChars {
		return precheckPlan{}, invalid(fmt.Sprintf("target must be valid UTF-8 of at most %d characters", precheck.MaxTargetChars))
	}
	if req.Script == "" || len(req.Script) > precheck.MaxScriptBytes || !utf8.ValidString(req.Script) {
		return precheckPlan{}, invalid(fmt.Sprintf("script must be 1 to %d bytes of UTF-8", precheck.MaxScriptBytes))
	}
	if !utf8.ValidString(req.Schedule) {
		return precheckPlan{}, invalid("schedule must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(req.Schedule); n > precheck.MaxScheduleChars {
		return precheckPlan{}, invalid(fmt.Sprintf("schedule is %d characters; the limit is %d", n, precheck.MaxScheduleChars))
	}
	firedAt := k.now()
	if req.FiredAt != "" {
		t, err := time.Parse(time.RFC3339, req.FiredAt)
		if err != nil {
			return precheckPlan{}, invalid("firedAt must be an RFC 3339 time, e.g. 2026-11-30T23:05:00Z")
		}
		firedAt = t
	}
	zone := req.TimeZone
	if zone == "" {
		zone = k.cfg.TimeZone
	}
	if len(zone) > precheck.MaxTimeZoneBytes || zone == "Local" {
		return precheckPlan{}, invalid("timeZone must be an IANA time zone name")
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return precheckPlan{}, invalid("timeZone must be an IANA time zone name")
	}
	if len(req.Grants) > precheck.MaxGrants {
		return precheckPlan{}, invalid(fmt.Sprintf("at most %d grants", precheck.MaxGrants))
	}
	byServer := map[string][]string{}
	var order []string
	for _, g := range req.Grants {
		name := g.Server + ":" + g.Tool
		if !protocol.ValidToolName(g.Server) || !protocol.ValidMCPToolName(g.Tool) {
			return precheckPlan{}, invalid(fmt.Sprintf("grant %q: server must match %s and tool be %s", clip(name, 120), protocol.ToolNameRule, protocol.MCPToolNameRule))
		}
		if slices.Contains(byServer[g.Server], g.Tool) {
			return precheckPlan{}, invalid(fmt.Sprintf("grant %s is listed twice", name))
		}
		s, ok := k.pol.Server(g.Server)
		if !ok || !slices.Contains(s.Tools, g.Tool) || !pc.PrecheckAllows(req.Channel, g.Server, g.Tool) {
			return precheckPlan{}, forbidden(fmt.Sprintf("grant %s is not allowed for this channel (prechecks.grants)", name))
		}
		if _, seen := byServer[g.Server]; !seen {
			order = append(order, g.Server)
		}
		byServer[g.Server] = append(byServer[g.Server], g.Tool)
	}
	plan := precheckPlan{channel: req.Channel}
	var jobServers []precheck.Server
	for _, name := range order {
		s, _ := k.pol.Server(name)
		s.Tools = append([]string(nil), byServer[name]...)
		plan.servers = append(plan.servers, s)
		jobServers = append(jobServers, precheck.Server{Name: name, Tools: s.Tools})
	}
	// The VM stops a second before the kill, so its answer is the error;
	// execute lowers this by the time its setup took.
	timeoutMs := pc.TimeoutSeconds*1000 - precheckVMMarginMs
	plan.job = precheck.Job{
		Script: req.Script, FiredAt: firedAt.Format(time.RFC3339), TimeZone: zone, Today: precheck.Today(firedAt, loc),
		Schedule: req.Schedule, Servers: jobServers, TimeoutMs: max(timeoutMs, precheck.MinTimeoutMs),
		MaxCalls: pc.MaxCalls, MaxNoteChars: pc.MaxNoteChars, MaxContextChars: pc.MaxContextChars,
		MaxHeapBytes: int64(pc.MemoryMB) << 20 * 3 / 5,
	}
	if err := plan.job.Validate(); err != nil {
		return precheckPlan{}, invalid(err.Error())
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

// Run runs one precheck to its answer, after its cleanup. A script's
// failure is an answer with an error; err is a refused request or the
// system's failure.
func (k *Kind) Run(ctx context.Context, req precheck.Request) (precheck.Answer, error) {
	return k.RunAnswering(ctx, req, nil)
}

// RunAnswering is Run that, when onAnswer is set, gives it the runner's
// answer as soon as its result line is whole, before the container's exit
// and the cleanup (docs/prechecks.md: the answer leaves before the
// cleanup); it still returns only after the cleanup, holding the
// precheck's slot until then. Once onAnswer ran, a failed cleanup is
// logged and counted but cannot change that answer; every other answer
// comes after the cleanup, as before.
func (k *Kind) RunAnswering(ctx context.Context, req precheck.Request, onAnswer func(precheck.Answer)) (precheck.Answer, error) {
	pc := k.cfg.Prechecks
	if !pc.Enabled {
		return precheck.Answer{}, ErrDisabled
	}
	plan, err := k.check(req)
	if err != nil {
		return precheck.Answer{}, err
	}
	id := k.newID()
	tag := ids.ChannelTag(plan.channel)
	timeout := time.Duration(pc.TimeoutSeconds) * time.Second
	done, err := k.host.Admit(func() error {
		// Listed before anything of it exists; the bound covers a wait for
		// the concurrency cap (at most one turn deadline) and the run.
		bound := k.now().Add(time.Duration(k.cfg.TurnDeadlineSeconds)*time.Second + timeout)
		if !k.active.add(id, activePrecheck{tag: tag, deadline: bound}) {
			return ErrBusy
		}
		return nil
	})
	if err != nil {
		return precheck.Answer{}, err
	}
	defer done() // shutdown waits for the cleanup
	defer k.active.remove(id)

	log := k.log.With("precheck", id, "channel", tag)
	log.Info("precheck admitted", "grants", len(req.Grants), "script_bytes", len(req.Script))
	start := k.now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopWatch := context.AfterFunc(k.host.Stopped(), func() { cancel(sandbox.ErrShuttingDown) })
	defer stopWatch()
	if k.queue != nil {
		return k.runRemote(ctx, id, req, plan, log) // fleet.go
	}

	release, err := k.host.Slot(ctx, ids.PrecheckName(id))
	if err != nil {
		k.results.WithLabelValues(ResultFailed).Inc()
		log.Info("precheck done", "result", ResultFailed, "reason", "not admitted: "+err.Error())
		if errors.Is(context.Cause(ctx), sandbox.ErrShuttingDown) {
			return precheck.Answer{}, sandbox.ErrShuttingDown
		}
		if ctx.Err() == nil { // the host refused: stopping, or the queue is full
			return precheck.Answer{}, err
		}
		return precheck.Answer{}, sandbox.ErrClientGone
	}
	defer release()
	return k.answer(ctx, id, plan, start, log, onAnswer)
}

// answer runs an admitted precheck holding its slot: its result counted
// and logged after its cleanup; onAnswer (nil: none) has the runner's own
// answer before that cleanup.
func (k *Kind) answer(ctx context.Context, id string, plan precheckPlan, start time.Time, log *slog.Logger, onAnswer func(precheck.Answer)) (precheck.Answer, error) {
	var early func(precheck.Result)
	if onAnswer != nil {
		early = func(res precheck.Result) { onAnswer(answerOf(res)) }
	}
	res, label, err := k.execute(ctx, id, plan, log, early)
	k.results.WithLabelValues(label).Inc()
	attrs := []any{"result", label, "duration_ms", k.now().Sub(start).Milliseconds()}
	if res.Kind != "" {
		attrs = append(attrs, "error_kind", res.Kind)
	}
	if err != nil {
		log.Info("precheck done", append(attrs, "reason", err.Error())...)
		if errors.Is(context.Cause(ctx), sandbox.ErrShuttingDown) {
			return precheck.Answer{}, sandbox.ErrShuttingDown
		}
		return precheck.Answer{}, ErrFailed
	}
	log.Info("precheck done", attrs...)
	return answerOf(res), nil
}

// answerOf is the answer of a runner's result.
func answerOf(res precheck.Result) precheck.Answer {
	if res.Error != "" {
		return precheck.Answer{Error: res.Error}
	}
	wake := res.Wake
	return precheck.Answer{Wake: &wake, Note: res.Note, Context: res.Context}
}

// execute runs the container and always cleans up before it
// returns: the result, its metric label, or the system's failure. early
// (nil: none) has the runner's result (a script's error included) as soon
// as its line is whole, before the cleanup; a cleanup that then fails is
// still returned as the system's failure, for the log and the metric.
func (k *Kind) execute(ctx context.Context, id string, plan precheckPlan, log *slog.Logger, early func(precheck.Result)) (res precheck.Result, label string, err error) {
	pc := k.cfg.Prechecks
	c := k.cfg
	deadline := k.now().Add(time.Duration(pc.TimeoutSeconds) * time.Second)
	k.active.set(id, activePrecheck{tag: ids.ChannelTag(plan.channel), deadline: deadline})
	runCtx, cancelDeadline := context.WithDeadlineCause(ctx, deadline, errTimeout)
	defer cancelDeadline()
	t := &sandbox.Handle{ID: id, Channel: plan.channel, Tag: ids.ChannelTag(plan.channel), Deadline: deadline, Quiet: true}
	slot := k.slots.Take()
	defer k.slots.Give(slot)
	defer func() {
		if cerr := k.life.Cleanup(t, log); cerr != nil && err == nil {
			res, label, err = precheck.Result{}, ResultFailed, cerr
		}
	}()
	timedOut := func() (precheck.Result, string, error) {
		return precheck.Result{Error: fmt.Sprintf("the precheck passed its %d s timeout and was killed", pc.TimeoutSeconds), Kind: precheck.KindTimeout}, ResultTimeout, nil
	}
	fail := func(what string, e error) (precheck.Result, string, error) {
		if errors.Is(context.Cause(runCtx), errTimeout) {
			return timedOut()
		}
		return precheck.Result{}, ResultFailed, fmt.Errorf("%s: %w", what, e)
	}

	if t.Container, err = ids.ContainerName(t.Channel, id); err != nil {
		return fail("name", err)
	}
	uid, err := k.host.GuestUID(ids.PrecheckSlot(slot))
	if err != nil {
		return fail("guest uid", err)
	}
	workspace, err := sandbox.EmptyWorkspace(k.cfg.WorkspaceRoot)
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
	if stdin, err := json.Marshal(plan.job); err != nil || len(stdin) > precheck.MaxJobBytes {
		return fail("job", fmt.Errorf("job of %d bytes: %v", len(stdin), err))
	}
	if err := k.life.MakeTurnDir(t); err != nil {
		return fail("turn directory", err)
	}
	if err := k.life.WritePolicyFile(t, data); err != nil {
		return fail("policy file", err)
	}
	t.UnitTried = true
	if err := k.life.Units().StartBroker(runCtx, id); err != nil {
		return fail("broker units", err)
	}
	spec := sandbox.ContainerSpec{
		Name: t.Container, Image: c.Image, UID: uid, GID: uid,
		WorkspaceDir: workspace, TurnDir: t.Dir,
		MemoryMB: pc.MemoryMB, CPUs: pc.CPUs, Pids: pc.Pids, TmpfsMB: pc.TmpfsMB,
		Runtime: c.Runtime, LogTag: ids.LogTag(plan.channel),
		Labels:   sandbox.Labels(c.Installation, id, t.Tag, deadline),
		Precheck: true,
	}
	t.CreateTried = true
	if t.ContainerID, err = k.life.Containers().Create(runCtx, spec); err != nil {
		return fail("container create", err)
	}
	// The VM's deadline counts from the runner's start, the kill from before
	// the setup (units, directories, create): give the VM what is left, less
	// the margin, or a slow setup lets the kill come first and a script that
	// runs too long gets the kill's answer instead of its own.
	plan.job.TimeoutMs = max(int(deadline.Sub(k.now()).Milliseconds())-precheckVMMarginMs, precheck.MinTimeoutMs)
	stdin, err := json.Marshal(plan.job) // no longer than the one checked above
	if err != nil {
		return fail("job", err)
	}
	lim := precheck.Limits{MaxNoteChars: pc.MaxNoteChars, MaxContextChars: pc.MaxContextChars}
	sink := k.life.WorkerLogs().Turn(t.Tag, id, t.Container)
	// The runner's result line is its last act (pkg/precheck/runner): the
	// run returns at it, before the runner's exit and Docker's wait.
	var out sandbox.RunResult
	if fc, ok := k.life.Containers().(sandbox.FramedContainers); ok {
		out, err = fc.RunFramed(runCtx, t.ContainerID, stdin, lim.MaxResultBytes(), nil, sink, func(frame []byte) bool {
			r, derr := precheck.DecodeResult(frame, lim)
			return derr == nil && r.Kind != precheck.KindInternal
		})
	} else {
		out, err = k.life.Containers().Run(runCtx, t.ContainerID, stdin, lim.MaxResultBytes(), nil, sink)
	}
	if out.Tail != nil {
		// The runner's last log lines are owed before the sink closes.
		if terr := out.Tail(); terr != nil {
			log.Warn("precheck runner's streams after its result line", "err", terr)
		}
	}
	k.life.CloseSink(t, sink)
	if err != nil {
		return fail("run", err)
	}
	if runCtx.Err() != nil {
		if errors.Is(context.Cause(runCtx), errTimeout) {
			return timedOut()
		}
		return fail("run", context.Cause(runCtx))
	}
	switch {
	case out.Truncated:
		return fail("result", errors.New("stdout over its bound"))
	case out.StderrRefused:
		return fail("result", errors.New("stderr over its bound"))
	case out.Framed:
		// A whole result line: the runner exits 0 after it.
	case out.ExitCode == 128+9:
		// The container's memory limit (the heap watchdog stops a script
		// below it; a burst can pass it) or a forced stop.
		return precheck.Result{Error: "the precheck was killed: it used more memory than allowed", Kind: precheck.KindMemory}, ResultScriptError, nil
	case out.ExitCode != 0:
		return fail("runner", fmt.Errorf("exited with status %d (%s)", out.ExitCode, sandbox.ExitMeaning(out.ExitCode)))
	}
	res, err = precheck.DecodeResult(out.Stdout, lim)
	if err != nil {
		return fail("result", err)
	}
	if res.Kind == precheck.KindInternal {
		return fail("runner", errors.New("the runner refused its job"))
	}
	if early != nil {
		early(res) // before the deferred cleanup
	}
	switch {
	case res.Kind == precheck.KindTimeout:
		return res, ResultTimeout, nil
	case res.Error != "":
		return res, ResultScriptError, nil
	case res.Wake:
		return res, ResultWake, nil
	}
	return res, ResultNoWake, nil
}
