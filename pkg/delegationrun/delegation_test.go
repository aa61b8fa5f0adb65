package delegationrun_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/delegation"
	"github.com/roundtable-sandbox/sandbox/pkg/delegationrun"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
)

// Moved from pkg/host (delegations_test.go): the kind is made from its
// Registration over pkg/sandboxtest's kit, after the sealed turn (the
// kind.Researcher that runs a job's research turn, as the host registers
// them), and its routes are served as the host's router serves them once
// the caller is authorized. The router's refusal of a stranger and the
// channel list during a job stay in pkg/host (delegationroutes_test.go).

type (
	ContainerSpec = sandbox.ContainerSpec
	RunResult     = sandbox.RunResult
)

const (
	clientUID = 4242
	otherUID  = 4343
)

var (
	must  = sandboxtest.Must
	okRun = sandboxtest.OKRun
)

// rig is the delegation kind made the way the host makes it.
type rig struct {
	kit    *sandboxtest.Kit
	k      *delegationrun.Kind
	sealed *sealedturn.Kind
	routes []api.Route
	cfg    *config.Config
	docker *sandboxtest.Docker
}

// delegationRig is a rig whose config adds a fetch tool and enables
// delegation (fetch: "fetch", search: the test config's "lookup") unless
// disabled; channel "c" is on.
func delegationRig(t *testing.T, mutate func(*config.Delegation)) *rig {
	t.Helper()
	return newRig(t, true, mutate)
}

func newRig(t *testing.T, enabled bool, mutate func(*config.Delegation)) *rig {
	t.Helper()
	return newRigWith(t, enabled, mutate, sandboxtest.KitOptions{})
}

// newRigWith is newRig over a kit with options o (a fleet, say); o.Config
// runs before the delegation's configuration.
func newRigWith(t *testing.T, enabled bool, mutate func(*config.Delegation), o sandboxtest.KitOptions) *rig {
	t.Helper()
	first := o.Config
	kit := sandboxtest.NewKit(t, "", sandboxtest.KitOptions{Fleet: o.Fleet, Config: func(c *config.Config) {
		if first != nil {
			first(c)
		}
		if !enabled {
			return
		}
		c.Tools = append(c.Tools, config.Tool{Name: "fetch", Description: "Fetch a public page", Kind: "fetch",
			Parameters: `{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`})
		c.Delegation = config.Delegation{Enabled: true, MaxRunning: 2, TimeoutSeconds: 600, MaxTitleChars: 200,
			MaxTaskChars: 4000, MaxReportChars: 80000, DiagnosticChars: 600, FetchTool: "fetch", SearchTool: "lookup", Prompt: "Research."}
		if mutate != nil {
			mutate(&c.Delegation)
		}
	}})
	made, err := sealedturn.Registration.New(kit.Deps)
	must(t, err)
	sealed := made.(*sealedturn.Kind)
	kit.Deps.Made = []kind.Kind{sealed}
	made, err = delegationrun.Registration.New(kit.Deps)
	must(t, err)
	k := made.(*delegationrun.Kind)
	r := &rig{kit: kit, k: k, sealed: sealed, routes: k.Routes(), cfg: kit.Cfg, docker: kit.Docker}
	t.Cleanup(r.shutdown)
	must(t, kit.Host.State.SetMode("c", chanstate.ModeOn))
	return r
}

// shutdown stops as the host does: its work first, then the kinds.
func (r *rig) shutdown() {
	r.kit.Host.Stop()
	r.k.Stop()
	r.sealed.Stop()
}

func (r *rig) assertClean(t *testing.T) { t.Helper(); r.kit.AssertClean(t) }

// call serves one request to the kind's routes for a client of uid.
func (r *rig) call(t *testing.T, uid int, method, path string, body any) (int, []byte) {
	t.Helper()
	return sandboxtest.Call(t, delegationrun.Registration, r.routes, peerauth.RoleClient, uid, method, path, body)
}

func delegate(title, task string) delegation.Request {
	return delegation.Request{Title: title, Task: task, Author: delegation.Author{ID: "u1", Name: "Ann", PrincipalID: "p-special"}}
}

// startJob posts a job as clientUID and returns its id.
func startJob(t *testing.T, r *rig, channel string, req delegation.Request) string {
	t.Helper()
	code, body := r.call(t, clientUID, "POST", "/v1/channels/"+channel+"/delegations", req)
	if code != http.StatusAccepted {
		t.Fatalf("POST delegations: %d %s", code, body)
	}
	var st delegation.Status
	must(t, json.Unmarshal(body, &st))
	if st.ID == "" || st.Channel != channel || st.Title != req.Title || st.State != delegation.StateQueued {
		t.Fatalf("202 answer %s", body)
	}
	return st.ID
}

func waitJob(t *testing.T, r *rig, id string) delegation.Status {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		j, err := r.k.Registry().Get(id)
		must(t, err)
		if st := j.Status(); st.Finished() && len(r.k.Listed()) == 0 {
			return st
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("job %s did not finish", id)
	return delegation.Status{}
}

// blockJob blocks each run until its context ends; started gets one value
// per run.
func blockJob(started chan<- string) func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
	return func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		// A job delivered again (a fleet job's ack wait expired) runs
		// again: its send must not outlive the job once nobody reads.
		select {
		case started <- spec.Name:
		case <-ctx.Done():
		}
		<-ctx.Done()
		return RunResult{ExitCode: -1}, ctx.Err()
	}
}

func replyRun(reply string, exit int64) func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
	return func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		return RunResult{Stdout: []byte(reply + "\n"), ExitCode: exit}, nil
	}
}

// TestDelegationRefusals: the seed's refusal texts word for word, with
// their statuses, and the host's own refusals (a stranger's 403 is the
// router's: pkg/host, TestDelegationRouteRefusals).
func TestDelegationRefusals(t *testing.T) {
	r := delegationRig(t, func(d *config.Delegation) { d.MaxTaskChars = 100 })
	started := make(chan string, 4)
	r.docker.RunFn = blockJob(started)
	cases := []struct {
		name    string
		channel string
		body    any
		code    int
		want    string
	}{
		{"no title", "c", delegate("", "find"), 400, "title and task are required"},
		{"no task", "c", delegate("T", ""), 400, "title and task are required"},
		{"task over the configured bound", "c", delegate("T", strings.Repeat("x", 101)), 400, "the task is 101 characters; keep it within 100"},
		{"title over", "c", delegate(strings.Repeat("t", 201), "x"), 400, "the title is 201 characters; keep it within 200"},
		{"no author", "c", delegation.Request{Title: "T", Task: "x"}, 400, "author.id is required"},
		{"unknown field", "c", map[string]any{"title": "T", "task": "x", "target": "elsewhere"}, 400, `unknown field "target"`},
		{"channel off", "off", delegate("T", "x"), 409, "channel is not in sandbox mode"},
	}
	for _, tc := range cases {
		code, body := r.call(t, clientUID, "POST", "/v1/channels/"+tc.channel+"/delegations", tc.body)
		var e apiwire.ErrorResponse
		json.Unmarshal(body, &e)
		if code != tc.code || e.Error != tc.want {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, code, e.Error, tc.code, tc.want)
		}
	}
	startJob(t, r, "c", delegate("one", "x"))
	startJob(t, r, "c", delegate("two", "x"))
	code, body := r.call(t, clientUID, "POST", "/v1/channels/c/delegations", delegate("three", "x"))
	var e apiwire.ErrorResponse
	json.Unmarshal(body, &e)
	if code != http.StatusTooManyRequests || e.Error != "this channel already has 2 delegated tasks running; wait for one to report back" {
		t.Errorf("third job: %d %q", code, e.Error)
	}
	if got := r.kit.Counter("sandbox_delegations_total", "result", "refused"); got != 6 {
		t.Errorf("refused counted %v, want 6 (five limits, one bound)", got)
	}

	off := newRig(t, false, nil)
	code, body = off.call(t, os.Getuid(), "POST", "/v1/channels/c/delegations", delegate("T", "x"))
	json.Unmarshal(body, &e)
	if code != http.StatusConflict || e.Error != "delegation is disabled on this host (delegation.enabled)" {
		t.Errorf("disabled: %d %q", code, e.Error)
	}
}

// TestDelegationResearchTurn: a job runs one sealed research turn of its
// channel (the author as speaker, the principal's credential, only the
// fetch and search tools in the worker's turn and the broker's policy, no
// MCP, the research prompt, a scratch workspace) and its report is read
// back; the channel's own turns are not blocked meanwhile.
func TestDelegationResearchTurn(t *testing.T) {
	r := delegationRig(t, nil)
	release := make(chan struct{})
	entered := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		if !strings.Contains(string(stdin), "Research task:") {
			return okRun(ctx, spec, stdin) // the channel's own turn
		}
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
			return RunResult{ExitCode: -1}, ctx.Err()
		}
		return RunResult{Stdout: []byte(`{"ok":true,"text":"the report"}` + "\n")}, nil
	}
	id := startJob(t, r, "c", delegate("Prices", "Find the prices"))
	// While the job runs, the channel's turn runs too. Wait for the research
	// turn's worker to have its stdin (a container merely created could
	// still wait for its broker, and the channel's turn would get the first
	// stdin: the checks below read the first ones).
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the research turn never ran")
	}
	listed := r.k.Listed()
	if len(listed) != 1 || listed[0].ID != id || !listed[0].Job || listed[0].ChannelTag != "c" {
		t.Errorf("GET /v1/turns lists %+v", listed)
	}
	// (GET /v1/channels during a job is the host's: TestDelegationJobNotAChannel.)
	o := r.sealed.RunChannelTurn(context.Background(), &kind.Turn{ID: ids.NewTurnID(), Channel: "c", Speaker: protocol.Speaker{ID: "s"}, Text: "hi",
		Deadline: time.Now().Add(time.Minute), Rebind: func(string) {}})
	if err := errors.Join(o.RunErr, o.CleanupErr); err != nil || !o.Reply.OK {
		t.Fatalf("channel turn during a job: %v %+v", err, o.Reply)
	}
	close(release)
	st := waitJob(t, r, id)
	if st.State != delegation.StateDone || st.Result != delegation.ResultOK || st.Report != "the report" || st.Author == nil || st.Author.ID != "u1" {
		t.Errorf("status %+v", st)
	}
	code, body := r.call(t, clientUID, "GET", "/v1/jobs/"+id, nil)
	var got delegation.Status
	json.Unmarshal(body, &got)
	if code != 200 || got.Report != "the report" || got.State != "done" {
		t.Errorf("GET job: %d %s", code, body)
	}
	if code, _ := r.call(t, otherUID, "GET", "/v1/jobs/"+id, nil); code != http.StatusNotFound {
		t.Errorf("another client's job: %d, want 404", code)
	}

	// The research turn: the first container created.
	spec := r.docker.Created[0]
	var turn protocol.Turn
	must(t, json.Unmarshal(r.docker.Stdins[0], &turn))
	var names []string
	for _, tl := range turn.Tools {
		names = append(names, tl.Name)
	}
	if turn.Prompt != "Research." || len(turn.MCP) != 0 || !turn.NoMemory || strings.Join(names, ",") != "lookup,fetch" || !turn.Reset ||
		turn.Speaker.ID != "u1" || turn.Text != "Research task: Prices\n\nFind the prices" {
		t.Errorf("research turn %+v", turn)
	}
	pol := r.docker.Policies[0]
	var polTools []string
	for _, tl := range pol.Tools {
		polTools = append(polTools, tl.Name)
	}
	if strings.Join(polTools, ",") != "lookup,fetch" || len(pol.MCP) != 0 || pol.Model.Credential != "special-key" ||
		pol.Identity.SpeakerID != "u1" || pol.TurnID != id {
		t.Errorf("research policy %+v", pol)
	}
	if want := filepath.Join(r.cfg.WorkspaceRoot, ".delegations", id); spec.WorkspaceDir != want || spec.LogTag != "sandbox/c" {
		t.Errorf("workspace %s log tag %s, want %s", spec.WorkspaceDir, spec.LogTag, want)
	}
	if _, err := os.Lstat(spec.WorkspaceDir); !os.IsNotExist(err) {
		t.Errorf("scratch workspace left: %v", err)
	}
	if got := r.kit.Counter("sandbox_delegations_total", "result", "ok"); got != 1 {
		t.Errorf("ok counted %v", got)
	}
	r.assertClean(t)
}

// TestDelegationTimeout: at its deadline the job's turn is killed and
// cleaned up and the job reads "the worker ran out of time".
func TestDelegationTimeout(t *testing.T) {
	r := delegationRig(t, func(d *config.Delegation) { d.TimeoutSeconds = 1 })
	started := make(chan string, 1)
	r.docker.RunFn = blockJob(started)
	id := startJob(t, r, "c", delegate("T", "x"))
	st := waitJob(t, r, id)
	if st.State != delegation.StateFailed || st.Result != delegation.ResultTimeout || st.Error != "the worker ran out of time" || st.Report != "" {
		t.Errorf("status %+v", st)
	}
	r.assertClean(t)
}

// TestDelegationReportBound: the report is cut to maxReportChars.
func TestDelegationReportBound(t *testing.T) {
	r := delegationRig(t, func(d *config.Delegation) { d.MaxReportChars = 10 })
	r.docker.RunFn = replyRun(`{"ok":true,"text":"`+strings.Repeat("ä", 50)+`"}`, 0)
	st := waitJob(t, r, startJob(t, r, "c", delegate("T", "x")))
	if st.Report != strings.Repeat("ä", 10) || !st.ReportTruncated {
		t.Errorf("report %q truncated %v", st.Report, st.ReportTruncated)
	}
}

// TestDelegationFailureDiagnostic: a failed research turn reports a
// generic, bounded reason: never the worker's text (here a planted
// credential), at most the worker's fixed cause.
func TestDelegationFailureDiagnostic(t *testing.T) {
	const secret = "sk-live-Zx9QmT4vLp2sK8wRabcdef"
	cases := []struct {
		name  string
		reply string
		exit  int64
		diag  int
		want  string
	}{
		{"not ok", `{"ok":false,"text":"Authorization: Bearer ` + secret + `"}`, 0, 600, "the research could not be completed"},
		{"exit with cause", `{"ok":false,"text":"token=` + secret + `","cause":"broker call failed"}`, 1, 600, "the research could not be completed (the worker reports: broker call failed)"},
		{"garbage", secret, 0, 600, "the research could not be completed"},
		{"bounded", `{"ok":false,"text":"x"}`, 0, 12, "the research"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := delegationRig(t, func(d *config.Delegation) { d.DiagnosticChars = tc.diag })
			r.docker.RunFn = replyRun(tc.reply, tc.exit)
			st := waitJob(t, r, startJob(t, r, "c", delegate("T", "x")))
			if st.State != delegation.StateFailed || st.Error != tc.want || strings.Contains(fmt.Sprint(st), "Zx9Q") {
				t.Errorf("status %+v, want error %q", st, tc.want)
			}
			r.assertClean(t)
		})
	}
}

// TestDelegationChannelOffCancels: PUT mode off cancels the channel's
// jobs (queued or running) and leaves nothing behind.
func TestDelegationChannelOffCancels(t *testing.T) {
	r := delegationRig(t, nil)
	started := make(chan string, 2)
	r.docker.RunFn = blockJob(started)
	id := startJob(t, r, "c", delegate("T", "x"))
	<-started
	// As the host's mode route does (PUT mode off), then tells the kinds.
	must(t, r.kit.Host.State.SetMode("c", chanstate.ModeOff))
	r.k.ChannelMode("c", chanstate.ModeOff, "")
	st := waitJob(t, r, id)
	if st.State != delegation.StateCancelled || st.Error != "the job was cancelled: the channel was turned off" {
		t.Errorf("status %+v", st)
	}
	r.assertClean(t)
}

// TestDelegationHostStopCancels: shutdown cancels running jobs and waits
// for their cleanup.
func TestDelegationHostStopCancels(t *testing.T) {
	r := delegationRig(t, nil)
	started := make(chan string, 2)
	r.docker.RunFn = blockJob(started)
	id := startJob(t, r, "c", delegate("T", "x"))
	<-started
	r.shutdown()
	j, err := r.k.Registry().Get(id)
	must(t, err)
	if st := j.Status(); st.State != delegation.StateCancelled || st.Error != "the job was cancelled: the host stopped" {
		t.Errorf("status %+v", st)
	}
	if got := r.kit.Counter("sandbox_delegations_total", "result", "cancelled"); got != 1 {
		t.Errorf("cancelled counted %v", got)
	}
	r.assertClean(t)
}

// TestDelegationStream: the channel's stream delivers a job finished before
// the call first, then one finishing while connected, keepalives in
// between; a new stream of the same uid gets neither again.
func TestDelegationStream(t *testing.T) {
	old := delegationrun.JobKeepalive
	delegationrun.JobKeepalive = 50 * time.Millisecond
	t.Cleanup(func() { delegationrun.JobKeepalive = old })
	r := delegationRig(t, nil)
	r.docker.RunFn = replyRun(`{"ok":true,"text":"first report"}`, 0)
	first := startJob(t, r, "c", delegate("one", "x"))
	waitJob(t, r, first)
	srv := httptest.NewServer(sandboxtest.Handler(delegationrun.Registration, r.routes, peerauth.RoleAdmin, os.Getuid()))
	t.Cleanup(srv.Close)
	hc := srv.Client()

	open := func() (*bufio.Scanner, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/channels/c/jobs/events", nil)
		resp, err := hc.Do(req)
		must(t, err)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return bufio.NewScanner(resp.Body), func() { cancel(); resp.Body.Close() }
	}
	next := func(sc *bufio.Scanner) delegation.Event {
		t.Helper()
		for sc.Scan() {
			var ev delegation.Event
			must(t, json.Unmarshal(sc.Bytes(), &ev))
			if ev.Type == delegation.EventJob {
				return ev
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return delegation.Event{}
	}
	sc, closeStream := open()
	if ev := next(sc); ev.Job.ID != first || ev.Job.Report != "first report" || ev.Job.Title != "one" {
		t.Errorf("backlog event %+v", ev.Job)
	}
	r.docker.RunFn = replyRun(`{"ok":true,"text":"second report"}`, 0)
	second := startJob(t, r, "c", delegate("two", "x"))
	if ev := next(sc); ev.Job.ID != second || ev.Job.Report != "second report" {
		t.Errorf("live event %+v", ev.Job)
	}
	closeStream()
	// The handler records a delivery right after its flush.
	for deadline := time.Now().Add(5 * time.Second); len(r.k.Registry().Pending("c", os.Getuid(), true)) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("deliveries not recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Both were delivered to this uid: a new stream has only keepalives.
	sc, closeStream = open()
	defer closeStream()
	for i := 0; i < 3; i++ {
		if !sc.Scan() {
			t.Fatal("stream ended")
		}
		var ev delegation.Event
		must(t, json.Unmarshal(sc.Bytes(), &ev))
		if ev.Type != delegation.EventKeepalive {
			t.Errorf("line %d: %s, want a keepalive", i, sc.Bytes())
		}
	}
}
