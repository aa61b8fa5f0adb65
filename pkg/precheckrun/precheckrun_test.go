package precheckrun_test

import (
	"context"
	"encoding/json"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/precheckrun"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// Moved from pkg/host (prechecks_test.go): the kind is made from its
// Registration over pkg/sandboxtest's kit, and its route is served as the
// host's router serves it once the caller is authorized (the router's own
// refusals of this route stay in pkg/host, TestPrecheckRouteRefusals).

type (
	ContainerSpec = sandbox.ContainerSpec
	RunResult     = sandbox.RunResult
)

const clientUID = 4242

var must = sandboxtest.Must

// rig is a precheck kind made the way the host makes it.
type rig struct {
	*sandboxtest.Kit
	k      *precheckrun.Kind
	routes []api.Route
}

func newRig(t *testing.T, extra string, o sandboxtest.KitOptions) *rig {
	t.Helper()
	kit := sandboxtest.NewKit(t, extra, o)
	made, err := precheckrun.Registration.New(kit.Deps)
	must(t, err)
	k := made.(*precheckrun.Kind)
	t.Cleanup(func() { kit.Host.Stop(); k.Stop() }) // as the host's shutdown
	return &rig{Kit: kit, k: k, routes: k.Routes()}
}

// lockedBuffer is a log sink the kind writes while the test reads.
type lockedBuffer = sandboxtest.LockedBuffer

// precheckExtra gives a precheck the default minute: tests about anything
// but the deadline must not race it (a 2 s bound failed them on a busy
// machine, where the host's setup alone took over 2 s).
const precheckExtra = sandboxtest.PrecheckExtra

// precheckShortExtra is precheckExtra with the least timeout, for the
// deadline's own tests.
var precheckShortExtra = strings.Replace(precheckExtra, "timeoutSeconds: 60", "timeoutSeconds: 2", 1)

func newPrecheckRig(t *testing.T, extra string) (*rig, *sandboxtest.PrecheckMCP) {
	t.Helper()
	r := newRig(t, extra, sandboxtest.KitOptions{})
	m := &sandboxtest.PrecheckMCP{}
	r.Docker.RunFn = sandboxtest.PrecheckRunner(m)
	return r, m
}

func postPrecheck(t *testing.T, r *rig, req any) (int, precheck.Answer, string) {
	t.Helper()
	code, body := r.call(t, req)
	var a precheck.Answer
	json.Unmarshal(body, &a)
	return code, a, string(body)
}

// call posts req to /v1/prechecks as a client.
func (r *rig) call(t *testing.T, req any) (int, []byte) {
	t.Helper()
	return sandboxtest.Call(t, precheckrun.Registration, r.routes, peerauth.RoleClient, clientUID, http.MethodPost, "/v1/prechecks", req)
}

// TestPrecheckTable: the seed's precheck cases through the API, each one
// answered after its cleanup with nothing left behind.
func TestPrecheckTable(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name   string
		req    precheck.Request
		want   precheck.Answer
		result string
		calls  int
	}{
		{"wake", precheck.Request{Channel: "room", Script: `export default async () => ({ wake: true, context: "go" })`},
			precheck.Answer{Wake: &yes, Context: "go"}, precheckrun.ResultWake, 0},
		{"no wake", precheck.Request{Channel: "room", Script: `export default async () => ({ wake: false })`},
			precheck.Answer{Wake: &no}, precheckrun.ResultNoWake, 0},
		{"note", precheck.Request{Channel: "room", Script: `export default async () => ({ wake: false, note: "quiet" })`},
			precheck.Answer{Wake: &no, Note: "quiet"}, precheckrun.ResultNoWake, 0},
		{"async MCP call", precheck.Request{Channel: "room", Grants: []precheck.Grant{{Server: "search", Tool: "find"}},
			Script: `export default async ({ mcp }) => { const r = await mcp.json("search", "find", { q: "x" }); return { wake: r.hits > 3, context: "hits " + r.hits } }`},
			precheck.Answer{Wake: &yes, Context: "hits 4"}, precheckrun.ResultWake, 1},
		{"a tool not granted with the script is refused", precheck.Request{Channel: "room",
			Script: `export default async ({ mcp }) => { await mcp.json("search", "find"); return { wake: false } }`},
			precheck.Answer{Error: "the script threw: mcp.json: search/find is not granted to this precheck"}, precheckrun.ResultScriptError, 0},
		{"throws", precheck.Request{Channel: "room", Script: `export default async () => { throw new Error("feed down") }`},
			precheck.Answer{Error: "the script threw: feed down"}, precheckrun.ResultScriptError, 0},
		{"syntax error", precheck.Request{Channel: "room", Script: "export default async () => {"},
			precheck.Answer{Error: "the script has a syntax error at line 1, column 29"}, precheckrun.ResultScriptError, 0},
		{"wrong shape", precheck.Request{Channel: "room", Script: `export default async () => ({ wake: "yes" })`},
			precheck.Answer{Error: "the script's answer must be {wake: false, note?} or {wake: true, context} with string note and context"}, precheckrun.ResultScriptError, 0},
		{"result over its bound", precheck.Request{Channel: "room", Script: `export default async () => ({ wake: true, context: "x".repeat(16001) })`},
			precheck.Answer{Error: "the script's answer is over its bound (note 1000, context 16000 characters)"}, precheckrun.ResultScriptError, 0},
		{"endless loop", precheck.Request{Channel: "room", Script: `export default async () => { for (;;) {} }`},
			precheck.Answer{Error: "the script ran past its time limit and was stopped"}, precheckrun.ResultTimeout, 0},
		{"time zone edge: just after midnight east of UTC", precheck.Request{Channel: "room", FiredAt: "2026-11-30T23:05:00Z", TimeZone: "Europe/Berlin",
			Schedule: "daily 00:05", Script: `export default async ({ today, timeZone, schedule, firedAt }) => ({ wake: true, context: [today, timeZone, schedule, firedAt.toISOString()].join(" ") })`},
			precheck.Answer{Wake: &yes, Context: "2026-12-01 Europe/Berlin daily 00:05 2026-11-30T23:05:00.000Z"}, precheckrun.ResultWake, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra := precheckExtra
			if tt.result == precheckrun.ResultTimeout {
				extra = precheckShortExtra
			}
			r, m := newPrecheckRig(t, extra)
			code, got, body := postPrecheck(t, r, tt.req)
			if code != http.StatusOK {
				t.Fatalf("status %d %s", code, body)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("answer %s\n  want %s", gotJSON, wantJSON)
			}
			if n := len(m.Calls); n != tt.calls {
				t.Errorf("MCP calls %v, want %d", m.Calls, tt.calls)
			}
			if v := precheckCount(r, tt.result); v != 1 {
				t.Errorf("sandbox_prechecks_total{result=%q} = %v, want 1", tt.result, v)
			}
			r.AssertClean(t)
			if turns := r.k.Listed(); len(turns) != 0 {
				t.Errorf("still listed: %+v", turns)
			}
		})
	}
}

// TestPrecheckContainerAndPolicy: a turn's confinement at the precheck's
// limits, an empty read-only workspace, a precheck-slot uid, the channel's
// journal tag; a policy with exactly the granted tools and no model.
func TestPrecheckContainerAndPolicy(t *testing.T) {
	r, m := newPrecheckRig(t, precheckExtra)
	var listed []apiwire.Turn
	inner := sandboxtest.PrecheckRunner(m)
	r.Docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		listed = r.k.Listed()
		return inner(ctx, spec, stdin)
	}
	code, _, body := postPrecheck(t, r, precheck.Request{Channel: "room", Target: "thread-7", Grants: []precheck.Grant{{Server: "search", Tool: "find"}},
		Script: `export default () => ({ wake: false })`})
	if code != http.StatusOK {
		t.Fatalf("status %d %s", code, body)
	}
	if len(r.Docker.Created) != 1 || len(r.Docker.Policies) != 1 {
		t.Fatalf("created %d containers", len(r.Docker.Created))
	}
	s := r.Docker.Created[0]
	tag := ids.ChannelTag("room")
	if !s.Precheck || s.Run != nil || s.Image != r.Cfg.Image || s.MemoryMB != 256 || s.CPUs != 1 || s.Pids != 32 || s.TmpfsMB != 64 ||
		s.LogTag != "sandbox/"+tag || s.Labels[layout.LabelChannel] != tag {
		t.Errorf("spec %+v", s)
	}
	if s.WorkspaceDir != filepath.Join(r.Cfg.WorkspaceRoot, ".run-empty") {
		t.Errorf("workspace %s", s.WorkspaceDir)
	}
	if entries, err := os.ReadDir(s.WorkspaceDir); err != nil || len(entries) != 0 {
		t.Errorf("workspace not empty: %v %v", entries, err)
	}
	slotUID, err := r.Host.State.GuestUID(ids.PrecheckSlot(0), r.Cfg.Guests, -1)
	must(t, err)
	if s.UID != slotUID || s.GID != slotUID {
		t.Errorf("uid %d:%d, want the precheck slot's %d", s.UID, s.GID, slotUID)
	}
	p := r.Docker.Policies[0]
	if p == nil || !p.Precheck || p.Model.URL != "" || p.Model.Credential != "" || len(p.Tools) != 0 || p.Egress != nil ||
		len(p.MCP) != 1 || p.MCP[0].Name != "search" || strings.Join(p.MCP[0].Tools, ",") != "find" || p.MCP[0].Credential != "mcp-key" ||
		p.Limits.MaxCalls != 16 || p.Identity.Channel != "room" {
		t.Errorf("policy %+v", p)
	}
	if len(listed) != 1 || !listed[0].Precheck || listed[0].ChannelTag != tag || listed[0].ID != s.Labels[layout.LabelTurn] {
		t.Errorf("listed while running: %+v", listed)
	}
	var job precheck.Job
	must(t, json.Unmarshal(r.Docker.Stdins[0], &job))
	if job.TimeoutMs > 59_000 || job.TimeoutMs < precheck.MinTimeoutMs || job.MaxCalls != 16 || job.MaxHeapBytes != 256<<20*3/5 || job.TimeZone != "UTC" {
		t.Errorf("job %+v", job)
	}
	if strings.Contains(string(r.Docker.Stdins[0]), "thread-7") {
		t.Error("the target reached the container")
	}
	r.AssertClean(t)
}

// TestPrecheckRefusals: bad requests are refused before anything exists,
// each naming what was wrong.
func TestPrecheckRefusals(t *testing.T) {
	r, _ := newPrecheckRig(t, precheckExtra)
	ok := `export default () => ({ wake: false })`
	tests := []struct {
		name string
		req  any
		code int
		want string
	}{
		{"grant not allowed for the channel", precheck.Request{Channel: "other-room", Script: ok, Grants: []precheck.Grant{{Server: "search", Tool: "find"}}},
			http.StatusForbidden, "grant search:find is not allowed for this channel"},
		{"tool not declared", precheck.Request{Channel: "room", Script: ok, Grants: []precheck.Grant{{Server: "search", Tool: "delete"}}},
			http.StatusForbidden, "grant search:delete is not allowed"},
		{"server unknown", precheck.Request{Channel: "room", Script: ok, Grants: []precheck.Grant{{Server: "web", Tool: "find"}}},
			http.StatusForbidden, "grant web:find is not allowed"},
		{"grant twice", precheck.Request{Channel: "room", Script: ok, Grants: []precheck.Grant{{Server: "search", Tool: "find"}, {Server: "search", Tool: "find"}}},
			http.StatusBadRequest, "grant search:find is listed twice"},
		{"bad grant name", precheck.Request{Channel: "room", Script: ok, Grants: []precheck.Grant{{Server: "Search!", Tool: "find"}}},
			http.StatusBadRequest, "Search!:find\\\": server must match"},
		{"bad time zone", precheck.Request{Channel: "room", Script: ok, TimeZone: "Mars/Olympus"}, http.StatusBadRequest, "timeZone must be an IANA time zone name"},
		{"Local time zone", precheck.Request{Channel: "room", Script: ok, TimeZone: "Local"}, http.StatusBadRequest, "timeZone must be an IANA time zone name"},
		{"bad firedAt", precheck.Request{Channel: "room", Script: ok, FiredAt: "tomorrow"}, http.StatusBadRequest, "firedAt must be an RFC 3339 time"},
		{"empty script", precheck.Request{Channel: "room"}, http.StatusBadRequest, "script must be 1 to 65536 bytes"},
		{"script over its bound", precheck.Request{Channel: "room", Script: strings.Repeat("x", precheck.MaxScriptBytes+1)}, http.StatusBadRequest, "script must be 1 to 65536 bytes"},
		{"long schedule", precheck.Request{Channel: "room", Script: ok, Schedule: strings.Repeat("s", 513)}, http.StatusBadRequest, "schedule is 513 characters; the limit is 512"},
		{"long target", precheck.Request{Channel: "room", Script: ok, Target: strings.Repeat("t", 257)}, http.StatusBadRequest, "target must be valid UTF-8 of at most 256"},
		{"bad channel", precheck.Request{Channel: "", Script: ok}, http.StatusBadRequest, "channel:"},
		{"unknown field", map[string]any{"channel": "room", "script": ok, "tier": 2}, http.StatusBadRequest, `unknown field \"tier\"`},
		{"body over its bound", map[string]any{"channel": "room", "script": strings.Repeat("\u0001", precheck.MaxRequestBytes/6+1)}, http.StatusRequestEntityTooLarge, "request body too large"},
	}
	for _, tt := range tests {
		code, _ := r.call(t, tt.req)
		_, body := r.call(t, tt.req)
		if code != tt.code || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s: %d %s\n  want %d containing %q", tt.name, code, body, tt.code, tt.want)
		}
	}
	if n := len(r.Docker.Created); n != 0 {
		t.Errorf("%d containers created for refused requests", n)
	}
	r.AssertClean(t)
}

func TestPrecheckDisabled(t *testing.T) {
	r, _ := newPrecheckRig(t, "")
	code, _, body := postPrecheck(t, r, precheck.Request{Channel: "room", Script: `export default () => ({ wake: false })`})
	if code != http.StatusConflict || !strings.Contains(body, "prechecks.enabled") {
		t.Errorf("%d %s", code, body)
	}
}

// TestPrecheckVMDeadlineAfterSetup: the job's timeoutMs is what is left of
// the precheck's deadline when its container runs, less the margin: a setup
// that took 10 s of a 60 s precheck leaves the VM 49 s, not 59 (which would
// let the kill come first: a script past its time then got the kill's
// answer instead of its own).
func TestPrecheckVMDeadlineAfterSetup(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newRig(t, precheckExtra, sandboxtest.KitOptions{Now: clock})
	r.Docker.RunFn = sandboxtest.PrecheckRunner(&sandboxtest.PrecheckMCP{})
	r.Units.StartHook = func(context.Context, string) error {
		mu.Lock()
		now = now.Add(10 * time.Second) // a slow unit start
		mu.Unlock()
		return nil
	}
	code, got, body := postPrecheck(t, r, precheck.Request{Channel: "room", Script: `export default () => ({ wake: false })`})
	if code != http.StatusOK || got.Wake == nil || *got.Wake {
		t.Fatalf("%d %s", code, body)
	}
	var job precheck.Job
	must(t, json.Unmarshal(r.Docker.Stdins[0], &job))
	if job.TimeoutMs != 49_000 {
		t.Errorf("job timeoutMs %d, want 49000 (60 s less 10 s of setup, less the 1 s margin)", job.TimeoutMs)
	}
	r.AssertClean(t)
}

// TestPrecheckKilledAtDeadline: a container that never answers is killed
// and removed at the deadline; the answer is the timeout error.
func TestPrecheckKilledAtDeadline(t *testing.T) {
	r, _ := newPrecheckRig(t, precheckShortExtra)
	r.Docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		<-ctx.Done()
		return RunResult{ExitCode: -1}, ctx.Err()
	}
	start := time.Now()
	code, got, body := postPrecheck(t, r, precheck.Request{Channel: "room", Script: `export default () => ({ wake: false })`})
	took := time.Since(start)
	if code != http.StatusOK || got.Error != "the precheck passed its 2 s timeout and was killed" || got.Wake != nil {
		t.Errorf("%d %s", code, body)
	}
	if took < 1900*time.Millisecond || took > 6*time.Second {
		t.Errorf("answered after %v, want about 2 s", took)
	}
	if len(r.Docker.Kills) == 0 || len(r.Docker.Removes) == 0 {
		t.Errorf("kills %v removes %v", r.Docker.Kills, r.Docker.Removes)
	}
	if v := precheckCount(r, precheckrun.ResultTimeout); v != 1 {
		t.Errorf("timeout metric %v", v)
	}
	r.AssertClean(t)
}

// TestPrecheckHostileContainer: whatever the container prints or however
// it ends, the kind answers a generic error and cleans up.
func TestPrecheckHostileContainer(t *testing.T) {
	tests := []struct {
		name string
		res  RunResult
		code int
		want string
	}{
		{"garbage", RunResult{Stdout: []byte("not json")}, http.StatusInternalServerError, precheckrun.ErrFailed.Error()},
		{"unknown field", RunResult{Stdout: []byte(`{"wake":true,"context":"x","extra":1}`)}, http.StatusInternalServerError, precheckrun.ErrFailed.Error()},
		{"two shapes", RunResult{Stdout: []byte(`{"wake":true,"context":"x","error":"e","kind":"throw"}`)}, http.StatusInternalServerError, precheckrun.ErrFailed.Error()},
		{"over its bound", RunResult{Stdout: []byte(`{"wake":true}`), Truncated: true}, http.StatusInternalServerError, precheckrun.ErrFailed.Error()},
		{"context over its bound", RunResult{Stdout: []byte(`{"wake":true,"context":"` + strings.Repeat("x", 16001) + `"}`)}, http.StatusInternalServerError, precheckrun.ErrFailed.Error()},
		{"crashed", RunResult{ExitCode: 2}, http.StatusInternalServerError, precheckrun.ErrFailed.Error()},
		{"memory limit", RunResult{ExitCode: 137}, http.StatusOK, "the precheck was killed: it used more memory than allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newPrecheckRig(t, precheckExtra)
			r.Docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) { return tt.res, nil }
			code, _, body := postPrecheck(t, r, precheck.Request{Channel: "room", Script: `export default () => ({ wake: false })`})
			if code != tt.code || !strings.Contains(body, tt.want) {
				t.Errorf("%d %s, want %d %q", code, body, tt.code, tt.want)
			}
			r.AssertClean(t)
		})
	}
}

// TestPrecheckLogQuotesNothingOfTheContainer: a result that does not
// decode is logged by its category; the key, value or character the
// container chose never reaches the host's log line.
func TestPrecheckLogQuotesNothingOfTheContainer(t *testing.T) {
	for _, tt := range []struct{ name, stdout, want string }{
		{"unknown field", `{"wake":false,"INJECTED\nlevel=ERROR":1}`, "unknown field"},
		{"wrong type", `{"wake":"INJECTED"}`, "not one object of the known fields and types"},
		{"syntax", `{"wake":INJECTED}`, "not one object of the known fields and types"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			r := newRig(t, precheckExtra, sandboxtest.KitOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			r.Docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
				return RunResult{Stdout: []byte(tt.stdout)}, nil
			}
			code, _, body := postPrecheck(t, r, precheck.Request{Channel: "room", Script: `export default () => ({ wake: false })`})
			if code != http.StatusInternalServerError || strings.Contains(body, "INJECTED") {
				t.Fatalf("%d %s, want 500 and a generic error", code, body)
			}
			var line string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, `"msg":"precheck done"`) {
					line = l
				}
			}
			if !strings.Contains(line, tt.want) {
				t.Errorf("precheck done line %q lacks the category %q", line, tt.want)
			}
			if strings.Contains(logs.String(), "INJECTED") {
				t.Errorf("the log quotes the container:\n%s", logs.String())
			}
		})
	}
}

// precheckCount reads sandbox_prechecks_total{result} (0 when absent).
func precheckCount(r *rig, result string) float64 {
	return r.Counter("sandbox_prechecks_total", "result", result)
}
