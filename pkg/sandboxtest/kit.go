package sandboxtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/admission"
	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/toolset"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// Machine derives a global concurrency of 512, so a derived cap never
// depends on the test box.
var Machine = config.Machine{CPUs: 64, MemoryMB: 1 << 20}

// A Kit is what a kind's test makes the kind from: the configuration,
// the fakes, the lifecycle over them, the host's side (Host) and the
// kind.Deps the host would hand the kind's constructor.
type Kit struct {
	Cfg    *config.Config
	Docker *Docker
	// Warm is Docker able to start a container apart from running it
	// (KitOptions.Warm), nil otherwise.
	Warm     *WarmDocker
	Units    *Units
	Journal  *Journal
	Host     *Host
	Registry *prometheus.Registry
	Deps     kind.Deps

	cleanupMu sync.Mutex
	cleanups  map[string]int // failed cleanup steps by what failed
}

// KitOptions replace the kit's defaults (nil: a real clock, a quiet log).
type KitOptions struct {
	Now    func() time.Time
	Logger *slog.Logger
	// Config changes the configuration before the kit is made from it.
	Config func(*config.Config)
	// Warm drives the containers through a WarmDocker: the kind
	// prepares standbys.
	Warm bool
	// Containers, when set, wraps the kit's driver (a code run's
	// streaming one, say): the lifecycle drives what it returns.
	Containers func(*Docker) sandbox.Containers
	// RemoveRetryTotal bounds a container's removal retries (0: the
	// lifecycle's default); RemoveRetryDelay is the first pause between
	// them (0: a millisecond).
	RemoveRetryTotal, RemoveRetryDelay time.Duration
	// BrokerGID is the group of policy files (0: as is).
	BrokerGID int
	// Observe hears of each phase's duration, the lifecycle's and the
	// kind's (nil: nothing does).
	Observe func(phase string, took time.Duration)
	// Chown, when set, is the lifecycle's and the kind's chown (the
	// default does nothing: tests need not be root).
	Chown func(path string, uid, gid int) error
	// ChownTree, when set, is the lifecycle's alone (a workspace that
	// cannot be handed over, say); Chown stays the kind's.
	ChownTree func(path string, uid, gid int) error
	// MCPTools are the MCP servers' tools as discovery found them.
	MCPTools map[string][]protocol.ToolSpec
	// Fleet is the kind's fleet (nil: a box alone).
	Fleet *fleet.Fleet
}

// NewKit makes a kit over Config(t, extra).
func NewKit(t testing.TB, extra string, o KitOptions) *Kit {
	t.Helper()
	cfg := Config(t, extra)
	if o.Config != nil {
		o.Config(cfg)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = Logger(t)
	}
	state, _, err := chanstate.LoadState(cfg.StateFile, nil)
	Must(t, err)
	k := &Kit{Cfg: cfg, Docker: NewDocker(cfg), Units: NewUnits(), Journal: &Journal{}, Registry: prometheus.NewRegistry(), cleanups: map[string]int{}}
	k.Host = NewHost(cfg, state)
	set, err := toolset.New(cfg, o.MCPTools)
	Must(t, err)
	noChown := func(string, int, int) error { return nil } // tests need not be root
	if o.Chown != nil {
		noChown = o.Chown
	}
	observe := o.Observe
	if observe == nil {
		observe = func(string, time.Duration) {}
	}
	chownTree := noChown
	if o.ChownTree != nil {
		chownTree = o.ChownTree
	}
	var containers sandbox.Containers = k.Docker
	if o.Warm {
		k.Warm = NewWarmDocker(k.Docker)
		containers = k.Warm
	}
	if o.Containers != nil {
		containers = o.Containers(k.Docker)
	}
	life := sandbox.New(sandbox.Options{
		Containers: containers, Units: k.Units, Logger: o.Logger, ChownTree: chownTree, RemoveRetryDelay: cmp.Or(o.RemoveRetryDelay, time.Millisecond), RemoveRetryTotal: o.RemoveRetryTotal,
		BrokerGID: o.BrokerGID, CleanupFailed: k.cleanupFailed, ObservePhase: observe,
		WorkerLogs: workerlog.New(workerlog.DefaultLimits(), k.Journal.Send, nil),
	})
	k.Deps = kind.Deps{
		Config: cfg, Lifecycle: life, Host: k.Host, Logger: o.Logger, Now: o.Now, NewID: ids.NewTurnID,
		UID: os.Getuid(), GID: os.Getgid(), Lchown: noChown, Tools: set.Tools, MCP: set.MCP, Policy: set.Policy,
		Registry: k.Registry, Observe: observe, Fleet: o.Fleet,
	}
	return k
}

// cleanupFailed counts a failed cleanup step as the host's
// sandbox_cleanup_failures_total does (by stage; one kit is one kind).
func (k *Kit) cleanupFailed(_, stage string) {
	k.cleanupMu.Lock()
	defer k.cleanupMu.Unlock()
	k.cleanups[stage]++
}

// CleanupFailures is how many cleanup steps of what ("container",
// "units", ...) failed, as the lifecycle reported them.
func (k *Kit) CleanupFailures(what string) int {
	k.cleanupMu.Lock()
	defer k.cleanupMu.Unlock()
	return k.cleanups[what]
}

// AssertClean: no container, unit, turn directory or policy file is left.
func (k *Kit) AssertClean(t *testing.T) {
	t.Helper()
	if n := k.Docker.LiveCount(); n != 0 {
		t.Errorf("%d containers left", n)
	}
	if n := k.Units.ActiveCount(); n != 0 {
		t.Errorf("%d broker units left", n)
	}
	for _, d := range []string{k.Cfg.RunRoot, k.Cfg.PolicyDir} {
		entries, _ := os.ReadDir(d)
		if len(entries) != 0 {
			t.Errorf("%s not empty: %v", d, entries)
		}
	}
}

// Counter reads one series of counter name from the kit's registry (0
// when absent).
func (k *Kit) Counter(name, label, value string) float64 {
	return Counter(k.Registry, name, label, value)
}

// CounterWith reads the first series of counter name from the kit's
// registry whose labels hold every pair of labels (0 when absent).
func (k *Kit) CounterWith(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	return CounterWith(t, k.Registry, name, labels)
}

// CounterWith reads the first series of counter name from reg whose
// labels hold every pair of labels (0 when absent).
func CounterWith(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	Must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// Counter reads one series of counter name from reg (0 when absent, -1
// when reg cannot gather).
func Counter(reg *prometheus.Registry, name, label, value string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// errModeOff is the fake host's refusal of a channel not in sandbox mode.
var errModeOff = errors.New("channel is not in sandbox mode")

// Host is the host's side as a kind sees it (kind.Host), as the host
// does it: admission counted until done, the global cap's queue, the
// starts' bound, the host's stop, guest uids from the channel state.
type Host struct {
	State  *chanstate.State
	cfg    *config.Config
	queue  *admission.Queue
	starts *admission.Starts

	mu       sync.Mutex
	stopping bool
	work     sync.WaitGroup
	stopped  context.Context
	stopAll  context.CancelCauseFunc
}

// NewHost makes the fake host over cfg and state.
func NewHost(cfg *config.Config, state *chanstate.State) *Host {
	h := &Host{State: state, cfg: cfg,
		queue:  admission.New(cfg.Queue.Depth, cfg.GlobalConcurrency(Machine).Cap, sandbox.ErrShuttingDown),
		starts: admission.NewStarts(cfg.StartConcurrency(Machine).Cap, sandbox.ErrShuttingDown)}
	h.stopped, h.stopAll = context.WithCancelCause(context.Background())
	return h
}

// Stop stops admitting, ends Stopped and waits for the admitted work.
func (h *Host) Stop() {
	h.mu.Lock()
	h.stopping = true
	h.mu.Unlock()
	h.queue.Close()
	h.starts.Close()
	h.stopAll(sandbox.ErrShuttingDown)
	h.work.Wait()
}

func (h *Host) Admit(create func() error) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return nil, sandbox.ErrShuttingDown
	}
	if err := create(); err != nil {
		return nil, err
	}
	h.work.Add(1)
	return h.work.Done, nil
}

func (h *Host) Slot(ctx context.Context, key string) (func(), error) {
	return h.queue.Acquire(ctx, key)
}
func (h *Host) Stopped() context.Context { return h.stopped }

func (h *Host) ChannelOn(channel string) error {
	if h.State.Mode(channel) != chanstate.ModeOn {
		return errModeOff
	}
	return nil
}

func (h *Host) GuestFor(channel, workspace string) (int, error) {
	owner := -1
	if st, err := os.Lstat(workspace); err == nil && st.IsDir() {
		if o, ok := sandbox.FileOwner(st); ok {
			owner = o
		}
	}
	return h.State.GuestUID(channel, h.cfg.Guests, owner)
}

func (h *Host) GuestUID(key string) (int, error) { return h.State.GuestUID(key, h.cfg.Guests, -1) }

func (h *Host) Accepting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.stopping
}

func (h *Host) Waiting(channel string) int { return h.queue.WaitingFor(channel) }
func (h *Host) Queued() int                { w, _ := h.queue.Totals(); return w }
func (h *Host) SpareSlot(ctx context.Context) (func(), error) {
	return admission.SpareStart(ctx, h.queue, h.starts)
}

// SpareYielding is the host's slot for a fleet job (fleetjobs.SlotFunc).
func (h *Host) SpareYielding(ctx context.Context) (func(), <-chan struct{}, error) {
	return h.queue.SpareYielding(ctx)
}
func (h *Host) StartSlot(ctx context.Context) (func(), error) { return h.starts.Start(ctx) }

// apiRows are the categories every route may answer with, as the host
// maps them.
var apiRows = []api.Status{
	{Err: api.ErrBadRequest, Code: http.StatusBadRequest, Reason: api.ErrBadRequest.Error()},
	{Err: api.ErrNotFound, Code: http.StatusNotFound, Reason: api.ErrNotFound.Error()},
	{Err: api.ErrTooLarge, Code: http.StatusRequestEntityTooLarge, Reason: api.ErrTooLarge.Error()},
	{Err: sandbox.ErrShuttingDown, Code: http.StatusServiceUnavailable, Reason: sandbox.ErrShuttingDown.Error()},
	// The host's row for its refusal of a channel not in sandbox mode.
	{Err: errModeOff, Code: http.StatusConflict, Reason: errModeOff.Error()},
}

// Call serves one request to routes as the host's router would once it
// matched the route and authorized a caller of uid with role (the router's
// own refusals, 404, 405, 403, are the host's tests): the handler's error
// is answered with the status the registration's rows and the API's
// categories give it, as {"error": reason}.
func Call(t testing.TB, reg kind.Registration, routes []api.Route, role peerauth.Role, uid int, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req := httptest.NewRequest(method, path, rd)
	w := httptest.NewRecorder()
	if !serve(reg, routes, role, uid, w, req) {
		t.Fatalf("no route for %s %s", method, path)
	}
	return w.Code, w.Body.Bytes()
}

// Handler serves routes as Call does, to a live server's requests (a
// stream, say); a request no route matches is answered 404.
func Handler(reg kind.Registration, routes []api.Route, role peerauth.Role, uid int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !serve(reg, routes, role, uid, w, req) {
			http.NotFound(w, req)
		}
	})
}

// serve answers req by the route it matches (false: none matches).
func serve(reg kind.Registration, routes []api.Route, role peerauth.Role, uid int, w http.ResponseWriter, req *http.Request) bool {
	for _, rt := range routes {
		param, ok := matchPattern(rt.Pattern, req.URL.Path)
		if !ok || rt.Method != req.Method {
			continue
		}
		ctx := context.WithValue(req.Context(), peerauth.Key{}, peerauth.Peer{Known: true, UID: uid, GID: uid})
		req = req.WithContext(api.WithRole(ctx, role))
		if err := rt.Fn(w, req, param); err != nil {
			code, reason := api.StatusOf(err, append(append([]api.Status{}, reg.Statuses...), apiRows...))
			api.WriteJSON(w, code, map[string]string{"error": reason})
		}
		return true
	}
	return false
}

// matchPattern matches path against a pattern of literal segments and at
// most one {parameter}, returning the parameter's segment.
func matchPattern(pattern, path string) (string, bool) {
	ps, segs := strings.Split(pattern, "/"), strings.Split(path, "/")
	if len(ps) != len(segs) {
		return "", false
	}
	param := ""
	for i, p := range ps {
		switch {
		case strings.HasPrefix(p, "{"):
			param = segs[i]
		case p != segs[i]:
			return "", false
		}
	}
	return param, true
}
