package livesession

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

const (
	alice = 5001
	bob   = 5002
)

// clock is a test's time, moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type rig struct {
	kit   *sandboxtest.Kit
	k     *Kind
	d     *fakeDocker
	clock *clock
}

func newRig(t *testing.T, change func(*config.Sessions)) *rig {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)}
	var fd *fakeDocker
	kit := sandboxtest.NewKit(t, "", sandboxtest.KitOptions{Now: c.now,
		Config: func(cfg *config.Config) {
			if change != nil {
				change(&cfg.Sessions)
			}
		},
		Containers: func(d *sandboxtest.Docker) sandbox.Containers {
			fd = newFakeDocker(d)
			return fd
		}})
	k := New(Options{Config: kit.Cfg, Lifecycle: kit.Deps.Lifecycle, Host: kit.Host, Logger: kit.Deps.Logger,
		Now: c.now, Registry: kit.Registry, SweepEvery: -1, ExecGrace: time.Millisecond})
	t.Cleanup(func() {
		k.Stop()
		kit.Host.Stop()
	})
	return &rig{kit: kit, k: k, d: fd, clock: c}
}

func (r *rig) create(t *testing.T, owner int) *Session {
	t.Helper()
	st, err := r.k.Create(context.Background(), apiwire.SessionCreate{}, owner)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.k.Lookup(st.ID, owner, false)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// exec runs command and collects its events.
func (r *rig) exec(t *testing.T, s *Session, command string) (stdout, stderr string, res *apiwire.SessionExecResult, errText string) {
	t.Helper()
	err := r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: command}, func(ev apiwire.SessionExecEvent) error {
		switch ev.Type {
		case apiwire.ExecStdout:
			stdout += string(ev.Data)
		case apiwire.ExecStderr:
			stderr += string(ev.Data)
		case apiwire.ExecResult:
			res = ev.Result
		case apiwire.ExecError:
			errText = ev.Error
		}
		return nil
	})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return
}

func call(t *testing.T, r *rig, role peerauth.Role, uid int, method, path string, body any) (int, string) {
	t.Helper()
	code, b := sandboxtest.Call(t, Registration, r.k.Routes(), role, uid, method, path, body)
	return code, string(b)
}

// TestOwnership: a session is its creator's; another client's answers as
// one that does not exist, byte for byte; an admin reaches all; a list
// holds a client's own.
func TestOwnership(t *testing.T) {
	r := newRig(t, nil)
	s := r.create(t, alice)
	client, admin := peerauth.RoleClient, peerauth.RoleAdmin
	if code, _ := call(t, r, client, alice, "GET", "/v1/sessions/"+s.id, nil); code != http.StatusOK {
		t.Errorf("owner: %d", code)
	}
	code, other := call(t, r, client, bob, "GET", "/v1/sessions/"+s.id, nil)
	_, missing := call(t, r, client, bob, "GET", "/v1/sessions/"+strings.Repeat("0", 32), nil)
	if code != http.StatusNotFound || other != missing {
		t.Errorf("another client: %d %q, want 404 %q", code, other, missing)
	}
	if code, _ := call(t, r, client, bob, "POST", "/v1/sessions/"+s.id+"/exec", apiwire.SessionExec{Command: "echo hi"}); code != http.StatusNotFound {
		t.Errorf("another client's exec: %d, want 404", code)
	}
	if code, _ := call(t, r, admin, 0, "GET", "/v1/sessions/"+s.id, nil); code != http.StatusOK {
		t.Errorf("admin: %d", code)
	}
	for _, tc := range []struct {
		role peerauth.Role
		uid  int
		want int
	}{{client, alice, 1}, {client, bob, 0}, {admin, 0, 1}} {
		_, body := call(t, r, tc.role, tc.uid, "GET", "/v1/sessions", nil)
		var l apiwire.SessionList
		json.Unmarshal([]byte(body), &l)
		if len(l.Sessions) != tc.want {
			t.Errorf("list as %d: %d sessions, want %d", tc.uid, len(l.Sessions), tc.want)
		}
	}
}

// TestBoundsRefused: each bound refuses a create at once with 429 naming
// its key, and creates nothing; a closed session gives its room back.
func TestBoundsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config.Sessions)
		owners []int
		key    string
	}{
		{"per client", func(c *config.Sessions) { c.MaxPerClient = 1 }, []int{alice, alice}, "sessions.maxPerClient"},
		{"per box", func(c *config.Sessions) { c.MaxLive, c.MaxPerClient = 2, 2 }, []int{alice, bob, bob}, "sessions.maxLive"},
		{"memory", func(c *config.Sessions) { c.MaxMemoryMB = c.MemoryMB * 2 }, []int{alice, bob, bob}, "sessions.maxMemoryMb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.change)
			var first *Session
			for _, o := range tc.owners[:len(tc.owners)-1] {
				s := r.create(t, o)
				if first == nil {
					first = s
				}
			}
			last := tc.owners[len(tc.owners)-1]
			before := len(r.d.Created)
			code, body := call(t, r, peerauth.RoleClient, last, "POST", "/v1/sessions", apiwire.SessionCreate{})
			if code != http.StatusTooManyRequests || !strings.Contains(body, tc.key) {
				t.Fatalf("create past the bound: %d %s, want 429 naming %s", code, body, tc.key)
			}
			var b *busy
			_, err := r.k.Create(context.Background(), apiwire.SessionCreate{}, last)
			if !errors.As(err, &b) || b.RetryAfter() <= 0 {
				t.Errorf("refusal %v carries no Retry-After", err)
			}
			if len(r.d.Created) != before {
				t.Errorf("a refused create made a container")
			}
			if got := r.kit.CounterWith(t, "sandbox_sessions_refused_total", nil); got < 1 {
				t.Errorf("refusals counted %v", got)
			}
			r.k.Close(first)
			if _, err := r.k.Create(context.Background(), apiwire.SessionCreate{}, last); err != nil {
				t.Errorf("after a close: %v", err)
			}
		})
	}
}

// TestExecsAreMultiplexed: an exec that blocks does not hold another
// back; each gets its own output; a cancel ends the blocked one.
func TestExecsAreMultiplexed(t *testing.T) {
	r := newRig(t, nil)
	s := r.create(t, alice)
	started := make(chan string, 1)
	blocked := make(chan *apiwire.SessionExecResult, 1)
	go func() {
		var res *apiwire.SessionExecResult
		err := r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: "block"}, func(ev apiwire.SessionExecEvent) error {
			switch ev.Type {
			case apiwire.ExecStarted:
				started <- ev.ExecID
			case apiwire.ExecResult:
				res = ev.Result
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		blocked <- res
	}()
	id := <-started
	out, errOut, res, _ := r.exec(t, s, "echo one")
	if out != "one\n" || errOut != "" || res == nil || res.ExitCode != 0 {
		t.Errorf("second exec: %q %q %+v", out, errOut, res)
	}
	if _, errOut, _, _ := r.exec(t, s, "err two"); errOut != "two\n" {
		t.Errorf("stderr: %q", errOut)
	}
	if st := s.Status(); st.Execs != 1 || st.ExecsTotal != 3 {
		t.Errorf("status while one runs: %+v", st)
	}
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/cancel", apiwire.SessionCancel{ExecID: id}); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if res := <-blocked; res == nil || !res.Cancelled || res.ExitCode != 137 {
		t.Errorf("cancelled exec: %+v", res)
	}
	if code, _ := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/cancel", apiwire.SessionCancel{ExecID: id}); code != http.StatusConflict {
		t.Errorf("cancel of an ended exec: %d, want 409", code)
	}
	if got := r.kit.Counter("sandbox_session_execs_total", "result", "cancelled"); got != 1 {
		t.Errorf("cancelled execs counted %v", got)
	}
}

// TestCutOutputIsReported: output past sessions.maxOutputBytes is cut by
// the supervisor; the client gets the bound and the result says so.
func TestCutOutputIsReported(t *testing.T) {
	r := newRig(t, func(c *config.Sessions) { c.MaxOutputBytes = 2048 })
	s := r.create(t, alice)
	out, _, res, _ := r.exec(t, s, "flood 5000")
	if len(out) != 2048 || res == nil || !res.StdoutTruncated || res.StdoutDropped != 5000-2048 {
		t.Errorf("cut output: %d bytes, %+v", len(out), res)
	}
}

// TestExecErrors: an exec refused before it starts answers its status; a
// network exec is refused as not available yet.
func TestExecErrors(t *testing.T) {
	r := newRig(t, nil)
	s := r.create(t, alice)
	for _, tc := range []struct {
		name string
		body apiwire.SessionExec
		code int
		want string
	}{
		{"network", apiwire.SessionExec{Command: "echo x", Network: true}, http.StatusBadRequest, "created without network"},
		{"both modes", apiwire.SessionExec{Command: "x", Executable: "y"}, http.StatusBadRequest, "both command and executable"},
		{"denied env", apiwire.SessionExec{Command: "x", Env: map[string]string{"LD_PRELOAD": "/x"}}, http.StatusBadRequest, "env"},
		{"bad cwd", apiwire.SessionExec{Command: "x", Cwd: "../etc"}, http.StatusBadRequest, "cwd"},
	} {
		code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/exec", tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	if calls := r.d.callList(); slices.Contains(calls, "request exec") {
		t.Errorf("a refused exec reached the supervisor: %v", calls)
	}
}

// TestIdlePauseAndTransparentResume: a session idle past
// sessions.idleSeconds is paused; the next request resumes it before it
// reaches the container; one in use is never paused.
func TestIdlePauseAndTransparentResume(t *testing.T) {
	r := newRig(t, func(c *config.Sessions) { c.IdleSeconds = 60 })
	s := r.create(t, alice)
	r.clock.add(59 * time.Second)
	r.k.Sweep()
	if st := s.Status().State; st != apiwire.SessionRunning {
		t.Fatalf("paused before its idle time: %s", st)
	}
	r.clock.add(2 * time.Second)
	r.k.Sweep()
	if st := s.Status().State; st != apiwire.SessionPaused {
		t.Fatalf("idle session: %s, want paused", st)
	}
	out, _, _, _ := r.exec(t, s, "echo back")
	if out != "back\n" {
		t.Errorf("exec after resume: %q", out)
	}
	st := s.Status()
	if st.State != apiwire.SessionRunning || st.Resumes != 1 {
		t.Errorf("after the exec: %+v", st)
	}
	calls := r.d.callList()
	if i, j := slices.Index(calls, "unpause"), slices.Index(calls, "request exec"); i < 0 || j < i {
		t.Errorf("calls %v: want unpause before the exec", calls)
	}
	if len(r.d.bad) > 0 {
		t.Errorf("%v", r.d.bad)
	}
	if got := r.kit.Counter("sandbox_session_resumes_total", "cause", "request"); got != 1 {
		t.Errorf("resumes counted %v", got)
	}
	// An exec in flight keeps it awake however long it runs.
	started := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: "block"}, func(ev apiwire.SessionExecEvent) error {
			if ev.Type == apiwire.ExecStarted {
				started <- ev.ExecID
			}
			return nil
		})
	}()
	id := <-started
	r.clock.add(time.Hour - 2*time.Minute)
	r.k.Sweep()
	if st := s.Status().State; st != apiwire.SessionRunning {
		t.Errorf("a session with an exec running was %s", st)
	}
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/pause", nil); code != http.StatusConflict || !strings.Contains(body, "in flight") {
		t.Errorf("pause with an exec running: %d %s, want 409", code, body)
	}
	if err := r.k.Cancel(context.Background(), s, id); err != nil {
		t.Fatal(err)
	}
	<-done
	// Explicit pause and resume.
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/pause", nil); code != http.StatusOK || !strings.Contains(body, `"paused"`) {
		t.Errorf("pause: %d %s", code, body)
	}
	if code, _ := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/pause", nil); code != http.StatusConflict {
		t.Errorf("pause of a paused session: %d, want 409", code)
	}
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/resume", nil); code != http.StatusOK || !strings.Contains(body, `"running"`) {
		t.Errorf("resume: %d %s", code, body)
	}
}

// TestTTLCloseAndStopRemove: the TTL, a close and the host's stop each
// remove the session's container once and give its room back; the
// reaper's listing holds a session until then, with its TTL as deadline.
func TestTTLCloseAndStopRemove(t *testing.T) {
	r := newRig(t, func(c *config.Sessions) { c.TTLSeconds = 600; c.MaxPerClient = 3; c.IdleSeconds = 10 })
	a, b, c := r.create(t, alice), r.create(t, alice), r.create(t, alice)
	l := r.k.Listed()
	if len(l) != 3 || l[0].DeadlineUnix != r.clock.now().Add(600*time.Second).Unix() || !strings.HasPrefix(l[0].ChannelTag, "session-") {
		t.Fatalf("listed %+v", l)
	}
	if code, _ := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+a.id+"/close", nil); code != http.StatusOK {
		t.Errorf("close: %d", code)
	}
	if code, _ := call(t, r, peerauth.RoleClient, alice, "GET", "/v1/sessions/"+a.id, nil); code != http.StatusNotFound {
		t.Errorf("closed session: %d, want 404", code)
	}
	// b is paused when its TTL passes: removed all the same.
	r.clock.add(30 * time.Second)
	r.k.Sweep()
	if b.Status().State != apiwire.SessionPaused {
		t.Fatalf("b not paused")
	}
	r.clock.add(600 * time.Second)
	r.k.Sweep()
	if got := len(r.k.Listed()); got != 0 {
		t.Errorf("%d sessions listed after the TTL", got)
	}
	if r.d.LiveCount() != 0 {
		t.Errorf("%d containers left", r.d.LiveCount())
	}
	_ = c
	if got := r.kit.Counter("sandbox_sessions_closed_total", "reason", "ttl"); got != 2 {
		t.Errorf("ttl closes counted %v", got)
	}
	// The host's stop ends the rest.
	d := r.create(t, bob)
	r.kit.Host.Stop()
	r.k.Stop()
	if _, err := r.k.Lookup(d.id, bob, false); !errors.Is(err, ErrNotFound) {
		t.Errorf("after the host's stop: %v", err)
	}
	r.kit.AssertClean(t)
}

// TestSupervisorGoneEndsTheSession: a supervisor that exits, or breaks
// the protocol, ends the session; its exec gets an error, nothing is left.
func TestSupervisorGoneEndsTheSession(t *testing.T) {
	for _, cmd := range []string{"die", "garbage"} {
		t.Run(cmd, func(t *testing.T) {
			r := newRig(t, nil)
			s := r.create(t, alice)
			err := r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: cmd}, func(apiwire.SessionExecEvent) error { return nil })
			if !errors.Is(err, ErrEnded) {
				t.Errorf("exec: %v, want ErrEnded", err)
			}
			<-s.removed
			if r.d.LiveCount() != 0 {
				t.Errorf("container left")
			}
			if got := r.kit.Counter("sandbox_sessions_closed_total", "reason", "supervisor gone"); got != 1 {
				t.Errorf("closes counted %v", got)
			}
		})
	}
}

// TestFiles: put, get, list and their refusals.
func TestFiles(t *testing.T) {
	r := newRig(t, func(c *config.Sessions) { c.MaxFileBytes = 4096 })
	s := r.create(t, alice)
	base := "/v1/sessions/" + s.id + "/files/"
	data := []byte{0, 1, 2, 255}
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", base+"put", apiwire.SessionPut{Path: "b.bin", Data: data}); code != http.StatusOK || !strings.Contains(body, `"size":4`) {
		t.Errorf("put: %d %s", code, body)
	}
	code, body := call(t, r, peerauth.RoleClient, alice, "POST", base+"get", apiwire.SessionPath{Path: "b.bin"})
	var f apiwire.SessionFile
	json.Unmarshal([]byte(body), &f)
	if code != http.StatusOK || string(f.Data) != string(data) {
		t.Errorf("get: %d %s", code, body)
	}
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", base+"list", apiwire.SessionPath{Path: "."}); code != http.StatusOK || !strings.Contains(body, `"b.bin"`) {
		t.Errorf("list: %d %s", code, body)
	}
	for _, tc := range []struct {
		name string
		op   string
		body any
		code int
	}{
		{"missing", "get", apiwire.SessionPath{Path: "nope"}, http.StatusNotFound},
		{"dotdot", "get", apiwire.SessionPath{Path: "../etc/passwd"}, http.StatusBadRequest},
		{"absolute", "get", apiwire.SessionPath{Path: "/etc/passwd"}, http.StatusBadRequest},
		{"too large", "put", apiwire.SessionPut{Path: "big", Data: make([]byte, 4097)}, http.StatusRequestEntityTooLarge},
		{"bad mode", "put", apiwire.SessionPut{Path: "m", Mode: 0o4755, Data: data}, http.StatusBadRequest},
	} {
		if code, body := call(t, r, peerauth.RoleClient, alice, "POST", base+tc.op, tc.body); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.code)
		}
	}
	// A file grown past the bound in the session is refused on the way out.
	sup := r.d.sup(s.h.ContainerID)
	sup.mu.Lock()
	sup.files["grown"] = make([]byte, 5000)
	sup.mu.Unlock()
	if code, body := call(t, r, peerauth.RoleClient, alice, "POST", base+"get", apiwire.SessionPath{Path: "grown"}); code != http.StatusRequestEntityTooLarge {
		t.Errorf("get over the bound: %d %s", code, body)
	}
	// The session goes on after that.
	if out, _, _, _ := r.exec(t, s, "echo still"); out != "still\n" {
		t.Errorf("after a refused get: %q", out)
	}
}

// TestFleetNamesTheBox: in fleet mode a session another box made (or one
// that does not exist) is answered naming this box, the same for both.
func TestFleetNamesTheBox(t *testing.T) {
	r := newRig(t, nil)
	r.kit.Cfg.Fleet.Enabled, r.kit.Cfg.Fleet.Box = true, "box-a"
	s := r.create(t, alice)
	code, other := call(t, r, peerauth.RoleClient, bob, "GET", "/v1/sessions/"+s.id, nil)
	_, missing := call(t, r, peerauth.RoleClient, bob, "GET", "/v1/sessions/"+strings.Repeat("0", 32), nil)
	if code != http.StatusNotFound || other != missing || !strings.Contains(missing, "box box-a") {
		t.Errorf("%d %s / %s, want 404 naming box-a for both", code, other, missing)
	}
}

// TestSilentSupervisorDoesNotHoldAnExec: an exec whose result never comes
// ends after its timeout (and the grace) with an error, its process group
// killed; the session goes on.
func TestSilentSupervisorDoesNotHoldAnExec(t *testing.T) {
	r := newRig(t, nil)
	s := r.create(t, alice)
	var last apiwire.SessionExecEvent
	err := r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: "silent", TimeoutSeconds: 1}, func(ev apiwire.SessionExecEvent) error {
		last = ev
		return nil
	})
	if err != nil || last.Type != apiwire.ExecError || !strings.Contains(last.Error, "no result in time") {
		t.Fatalf("silent exec: %v %+v", err, last)
	}
	// The kill went out before the next exec on the one stream, so once
	// that exec answered the supervisor has read the kill.
	if out, _, _, _ := r.exec(t, s, "echo after"); out != "after\n" {
		t.Errorf("after: %q", out)
	}
	if calls := r.d.callList(); !slices.Contains(calls, "request signal") {
		t.Errorf("the overdue exec was not killed: %v", calls)
	}
}

// TestExecBoundRefused: past 16 execs running in one session the next is
// refused at once with 429; once they ended there is room again.
func TestExecBoundRefused(t *testing.T) {
	r := newRig(t, nil)
	s := r.create(t, alice)
	ids := make(chan string, maxExecs)
	var wg sync.WaitGroup
	for range maxExecs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.k.Exec(context.Background(), s, apiwire.SessionExec{Command: "block"}, func(ev apiwire.SessionExecEvent) error {
				if ev.Type == apiwire.ExecStarted {
					ids <- ev.ExecID
				}
				return nil
			})
		}()
	}
	var running []string
	for range maxExecs {
		running = append(running, <-ids)
	}
	code, body := call(t, r, peerauth.RoleClient, alice, "POST", "/v1/sessions/"+s.id+"/exec", apiwire.SessionExec{Command: "echo x"})
	if code != http.StatusTooManyRequests || !strings.Contains(body, "16 execs") {
		t.Errorf("17th exec: %d %s, want 429", code, body)
	}
	for _, id := range running {
		if err := r.k.Cancel(context.Background(), s, id); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if out, _, _, _ := r.exec(t, s, "echo room"); out != "room\n" {
		t.Errorf("after: %q", out)
	}
}

// TestFramesForOtherRequestsAreDropped: a supervisor that sends output or
// a result for a request the host did not make (or another one) reaches
// no client; each request sees only its own frames.
func TestFramesForOtherRequestsAreDropped(t *testing.T) {
	r := newRig(t, nil)
	s := r.create(t, alice)
	out, _, res, _ := r.exec(t, s, "spoof")
	if out != "mine\n" || res == nil || res.ExitCode != 0 {
		t.Errorf("spoofed frames reached the exec: %q %+v", out, res)
	}
	if out, _, _, _ := r.exec(t, s, "echo next"); out != "next\n" {
		t.Errorf("next exec: %q", out)
	}
}
