package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

func TestAuthorize(t *testing.T) {
	acc := config.ResolvedAccess{ClientUIDs: []int{1001, 100003}, ClientGIDs: []int{500}, AdminUIDs: []int{0}, AdminGIDs: []int{600},
		Guests: config.Guests{UIDBase: 100000, UIDCount: 10}}
	const hostUID = 990
	tests := []struct {
		name string
		p    Peer
		want Role
	}{
		{"unknown peer", Peer{Known: false, UID: 990}, RoleNone},
		{"host's own uid", Peer{Known: true, UID: 990, GID: 990}, RoleAdmin},
		{"admin uid", Peer{Known: true, UID: 0, GID: 0}, RoleAdmin},
		{"admin by supplementary group", Peer{Known: true, UID: 2000, GID: 2000, Groups: []int{7, 600}}, RoleAdmin},
		{"admin by primary gid", Peer{Known: true, UID: 2000, GID: 600}, RoleAdmin},
		{"client uid", Peer{Known: true, UID: 1001, GID: 1001}, RoleClient},
		{"client by group", Peer{Known: true, UID: 2001, GID: 2001, Groups: []int{500}}, RoleClient},
		{"client by primary gid", Peer{Known: true, UID: 2001, GID: 500}, RoleClient},
		{"stranger", Peer{Known: true, UID: 3000, GID: 3000, Groups: []int{1, 2}}, RoleNone},
		{"guest uid named as a client", Peer{Known: true, UID: 100003, GID: 100003}, RoleNone},
		{"guest uid in an admin group", Peer{Known: true, UID: 100004, GID: 100004, Groups: []int{600}}, RoleNone},
		{"guest gid under the host's uid", Peer{Known: true, UID: 990, GID: 100009}, RoleNone},
		{"first id past the guest range", Peer{Known: true, UID: 100010, GID: 100010}, RoleNone},
		{"last guest id", Peer{Known: true, UID: 1001, GID: 100009}, RoleNone},
	}
	for _, tt := range tests {
		if got := Authorize(acc, hostUID, tt.p); got != tt.want {
			t.Errorf("%s: Authorize = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// serve runs the host on a real Unix socket and returns an HTTP client of it.
func serve(t *testing.T, r *rig) (*http.Client, string) {
	t.Helper()
	sock := filepath.Join(r.cfg.RunRoot+"-api", "host.sock")
	os.MkdirAll(filepath.Dir(sock), 0o700)
	ln, err := net.Listen("unix", sock)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.h.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	return hc, sock
}

func call(t *testing.T, hc *http.Client, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://host/", strings.NewReader(body))
	must(t, err)
	req.URL.Opaque = path // sent exactly as written, bad escapes included
	resp, err := hc.Do(req)
	must(t, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s %s: non-JSON answer %d %q", method, path, resp.StatusCode, data)
	}
	return resp.StatusCode, m
}

func TestAPIBadInputs(t *testing.T) {
	r := newRig(t, "queue:\n  depth: 1\n", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	hc, _ := serve(t, r)
	long := strings.Repeat("é", 32_001)
	tests := []struct {
		name, method, path, body string
		status                   int
		reason                   string
	}{
		{"bad JSON", "POST", "/v1/channels/c/turns", `{"speaker":`, 400, "bad JSON"},
		{"trailing data", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"x"} {}`, 400, "trailing data"},
		{"unknown field", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"x","model":"big"}`, 400, `unknown field "model"`},
		{"unknown speaker field", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s","admin":true},"text":"x"}`, 400, `unknown field "admin"`},
		{"text too long", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"` + long + `"}`, 400, "text is 32001 characters; the limit is 32000"},
		{"id too long", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"` + strings.Repeat("i", 257) + `"},"text":"x"}`, 400, "speaker.id is 257 characters"},
		{"name too long", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s","name":"` + strings.Repeat("n", 257) + `"},"text":"x"}`, 400, "speaker.name is 257"},
		{"principal too long", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s","principalId":"` + strings.Repeat("p", 257) + `"},"text":"x"}`, 400, "speaker.principalId is 257"},
		{"no speaker id", "POST", "/v1/channels/c/turns", `{"speaker":{"name":"x"},"text":"x"}`, 400, "speaker.id is required"},
		{"body too large", "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`, 413, "request body too large"},
		{"bad channel control char", "GET", "/v1/channels/a%0Ab", "", 400, "bad channel"},
		{"bad channel too long", "GET", "/v1/channels/" + strings.Repeat("c", 257), "", 400, "bad channel"},
		// Internal names are no channel keys: a slot's guest uid, a run's
		// queue entry and journal tag stay the host's own.
		{"run slot record as channel", "POST", "/v1/channels/sandbox-run-slot%2F0/turns", `{"speaker":{"id":"s"},"text":"x"}`, 400, "bad channel"},
		{"precheck slot record as channel", "POST", "/v1/channels/sandbox-precheck-slot%2F0/turns", `{"speaker":{"id":"s"},"text":"x"}`, 400, "bad channel"},
		{"run name as channel", "POST", "/v1/channels/run-0123456789abcdef0123456789abcdef/turns", `{"speaker":{"id":"s"},"text":"x"}`, 400, "bad channel"},
		{"run name mode", "PUT", "/v1/channels/run-0123456789abcdef0123456789abcdef/mode", `{"mode":"on"}`, 400, "bad channel"},
		{"escaped slash is part of the key", "GET", "/v1/channels/a%2F..%2Fb/extra/more", "", 404, "not found"},
		{"mode off", "POST", "/v1/channels/offchan/turns", `{"speaker":{"id":"s"},"text":"x"}`, 409, "channel is not in sandbox mode"},
		{"wrong method", "DELETE", "/v1/channels/c/turns", "", 405, "method not allowed"},
		{"wrong method mode", "POST", "/v1/channels/c/mode", `{"mode":"on"}`, 405, "method not allowed"},
		{"bad mode", "PUT", "/v1/channels/c/mode", `{"mode":"maybe"}`, 400, `mode must be "on", "off" or "rich"`},
		{"unknown path", "GET", "/v2/whatever", "", 404, "not found"},
		{"unknown channel action", "POST", "/v1/channels/c/explode", "", 404, "not found"},
	}
	for _, tt := range tests {
		status, body := call(t, hc, tt.method, tt.path, tt.body)
		reason, _ := body["error"].(string)
		if status != tt.status || !strings.Contains(reason, tt.reason) {
			t.Errorf("%s: %d %q, want %d containing %q", tt.name, status, reason, tt.status, tt.reason)
		}
	}
	if len(r.docker.Created) != 0 {
		t.Errorf("bad requests created %d containers", len(r.docker.Created))
	}
}

func TestAPIQueueFull429(t *testing.T) {
	r := newRig(t, "queue:\n  depth: 1\n", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	release := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return okRun(ctx, spec, stdin)
	}
	hc, _ := serve(t, r)
	body := `{"speaker":{"id":"s"},"text":"x"}`
	results := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() { results <- post(hc, "/v1/channels/c/turns", body) }()
		if i == 0 {
			waitFor(t, "first running", func() bool { return r.h.status("c").RunningTurn != "" })
		} else {
			waitFor(t, "second waiting", func() bool { return r.h.queue.WaitingFor("c") == 1 })
		}
	}
	status, resp := call(t, hc, "POST", "/v1/channels/c/turns", body)
	if status != 429 || resp["error"] != "queue full" {
		t.Errorf("third turn: %d %v, want 429 queue full", status, resp)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if s := <-results; s != 200 {
			t.Errorf("queued turn status %d", s)
		}
	}
}

func TestAPIForbiddenForStrangers(t *testing.T) {
	// The test process is the peer; make it neither the host uid nor listed.
	r := newRig(t, "", func(o *Options) { o.UID, o.GID = os.Getuid()+12345, os.Getgid()+12345 })
	hc, _ := serve(t, r)
	for _, p := range []struct{ method, path, body string }{
		{"POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"x"}`},
		{"GET", "/v1/channels", ""},
		{"PUT", "/v1/channels/c/mode", `{"mode":"on"}`},
		{"GET", "/metrics", ""},
	} {
		if status, body := call(t, hc, p.method, p.path, p.body); status != 403 || body["error"] != "forbidden" {
			t.Errorf("%s %s: %d %v, want 403", p.method, p.path, status, body)
		}
	}
	if status, _ := call(t, hc, "GET", "/v1/health", ""); status != 200 {
		t.Errorf("health: %d", status)
	}
	if r.h.state.Mode("c") != ModeOff {
		t.Error("a refused mode switch changed the state")
	}
}

func TestAPIClientIsNotAdmin(t *testing.T) {
	uid := os.Getuid()
	r := newRig(t, "", func(o *Options) {
		o.UID, o.GID = uid+12345, os.Getgid()+12345
		o.Access = config.ResolvedAccess{ClientUIDs: []int{uid}}
	})
	hc, _ := serve(t, r)
	if status, _ := call(t, hc, "GET", "/v1/channels/c", ""); status != 200 {
		t.Errorf("client status read: %d", status)
	}
	for _, p := range []struct{ method, path, body string }{
		{"PUT", "/v1/channels/c/mode", `{"mode":"on"}`},
		{"POST", "/v1/channels/c/fresh", ""},
		{"POST", "/v1/channels/c/cancel", ""},
	} {
		if status, _ := call(t, hc, p.method, p.path, p.body); status != 403 {
			t.Errorf("client %s %s: %d, want 403", p.method, p.path, status)
		}
	}
}

// The health answer names the caller's own role (sandbox-host mcp reads it
// before it serves on a TCP port).
func TestHealthNamesTheCallersRole(t *testing.T) {
	uid := os.Getuid()
	for _, tt := range []struct {
		name string
		opts func(*Options)
		want string
	}{
		{"host uid", func(o *Options) {}, "admin"},
		{"client", func(o *Options) {
			o.UID, o.GID = uid+12345, os.Getgid()+12345
			o.Access = config.ResolvedAccess{ClientUIDs: []int{uid}}
		}, "client"},
		{"stranger", func(o *Options) { o.UID, o.GID = uid+12345, os.Getgid()+12345 }, "none"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "", tt.opts)
			hc, _ := serve(t, r)
			if status, body := call(t, hc, "GET", "/v1/health", ""); status != 200 || body["role"] != tt.want {
				t.Errorf("health: %d %v, want role %q", status, body, tt.want)
			}
		})
	}
}

func TestPeerCredentialsOverSocket(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	must(t, err)
	defer ln.Close()
	got := make(chan Peer, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		got <- PeerOf(c)
		c.Close()
	}()
	c, err := net.Dial("unix", filepath.Join(dir, "s"))
	must(t, err)
	defer c.Close()
	p := <-got
	if !p.Known || p.UID != os.Getuid() || p.GID != os.Getgid() || p.PID != os.Getpid() {
		t.Errorf("peer = %+v, want uid %d gid %d pid %d", p, os.Getuid(), os.Getgid(), os.Getpid())
	}
}

func TestMetricsExposed(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	hc, _ := serve(t, r)
	call(t, hc, "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"x"}`)
	// The reply comes before cleanup; the turn is counted when it ends.
	waitFor(t, "the turn to end", func() bool { return r.h.status("c").RunningTurn == "" })
	resp, err := hc.Get("http://host/metrics")
	must(t, err)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sandbox_turns_total{result="ok"} 1`, "sandbox_turn_duration_seconds_count 1", `sandbox_turn_phase_seconds_count{phase="unit_start"} 1`, "sandbox_queue_waiting 0", "sandbox_cleanup_failures_total"} {
		if !strings.Contains(string(data), want) && want != "sandbox_cleanup_failures_total" {
			t.Errorf("metrics lack %q", want)
		}
	}
	_ = fmt.Sprint
	_ = time.Second
}

// A turn that outlasts the body read deadline still completes.
func TestLongTurnKeepsItsRequest(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		select {
		case <-time.After(300 * time.Millisecond):
			return okRun(ctx, spec, stdin)
		case <-ctx.Done():
			return RunResult{}, ctx.Err()
		}
	}
	// The body deadline must be lifted once the body is read.
	old := api.BodyReadTimeout
	api.BodyReadTimeout = 50 * time.Millisecond
	defer func() { api.BodyReadTimeout = old }()
	hc, _ := serve(t, r)
	if status, body := call(t, hc, "POST", "/v1/channels/c/turns", `{"speaker":{"id":"s"},"text":"x"}`); status != 200 {
		t.Errorf("long turn: %d %v", status, body)
	}
}

func TestAPIWaitingClientThatLeavesFreesItsPlace(t *testing.T) {
	r := newRig(t, "queue:\n  depth: 1\n", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	release := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return okRun(ctx, spec, stdin)
	}
	hc, _ := serve(t, r)
	body := `{"speaker":{"id":"s"},"text":"x"}`
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://host/v1/channels/c/turns", strings.NewReader(body))
		if resp, err := hc.Do(req); err == nil {
			first <- resp.StatusCode
			resp.Body.Close()
		}
	}()
	waitFor(t, "first running", func() bool { return r.h.status("c").RunningTurn != "" })
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://host/v1/channels/c/turns", strings.NewReader(body))
		_, err := hc.Do(req)
		gone <- err
	}()
	waitFor(t, "second waiting", func() bool { return r.h.queue.WaitingFor("c") == 1 })
	cancel()
	<-gone
	waitFor(t, "the waiter to leave", func() bool { return r.h.queue.WaitingFor("c") == 0 })
	// Its place is free again: a new waiter is admitted, not refused with 429.
	third := make(chan int, 1)
	go func() { third <- post(hc, "/v1/channels/c/turns", body) }()
	waitFor(t, "third waiting", func() bool { return r.h.queue.WaitingFor("c") == 1 })
	close(release)
	if s := <-first; s != 200 {
		t.Errorf("first: %d", s)
	}
	if s := <-third; s != 200 {
		t.Errorf("third: %d", s)
	}
	if n := len(r.docker.Created); n != 2 {
		t.Errorf("%d containers created, want 2 (the waiter that left never ran)", n)
	}
}

// post is call for goroutines: no t.Fatal off the test goroutine.
func post(hc *http.Client, path, body string) int {
	resp, err := hc.Post("http://host"+path, "application/json", strings.NewReader(body))
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestChannelListLeavesOutInternalEntries: a run's, a job's and a
// precheck's own queue entry is no channel, whether or not the host still
// knows it (a precheck's entry was listed as a channel before).
func TestChannelListLeavesOutInternalEntries(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef"
	tests := []struct {
		entry string
		want  []string
	}{
		{"precheck-" + id, []string{}},
		{"run-" + id, []string{}},
		{"job-" + id, []string{}},
		{"chan", []string{"chan"}},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			r := newRig(t, "", func(o *Options) {
				o.Access = config.ResolvedAccess{ClientUIDs: []int{clientUID}, Guests: o.Config.Guests}
			})
			release, err := r.h.queue.Acquire(context.Background(), tt.entry)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			_, body := apiAs(t, r.h, clientUID, "GET", "/v1/channels", nil)
			var list apiwire.ChannelList
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, c := range list.Channels {
				got = append(got, c.Channel)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("GET /v1/channels with queue entry %s lists %q, want %q", tt.entry, got, tt.want)
			}
		})
	}
}
