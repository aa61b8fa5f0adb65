package e2e

// Rich channels (DESIGN.md section 13) end to end: the installed host, the
// worker image's `sandbox-worker rich`, the real channel broker (the
// per-turn unit template with a session id) and a fake Anthropic upstream
// (pkg/anthropic/anthropictest, in this process, on loopback). This file
// sorts after scenarios_test.go (see tail_egress_test.go).

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

const richModel = "claude-e2e"

// richUpstream starts the fake Anthropic upstream and installs a config
// with rich channels pointing at it (idle seconds idle).
func richUpstream(t *testing.T, idle int) *anthropictest.Server {
	t.Helper()
	fake := anthropictest.New(t)
	u, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	c := baseConfig()
	c.GraceSeconds = 0
	c.RichPort, c.RichIdle = port, idle
	withConfig(t, c)
	return fake
}

func richOn(t *testing.T, ch string) {
	t.Helper()
	out, err := cli("channel", "on", ch, "--rich", "--profile", "e2e")
	if err != nil || !strings.Contains(out, "profile e2e") {
		t.Fatalf("channel on --rich: %v\n%s", err, out)
	}
}

type richSession struct {
	Session   string `json:"session"`
	Container string `json:"container"`
	State     string `json:"state"`
	Turns     int    `json:"turns"`
}

func richStatusOf(t *testing.T, ch string) richSession {
	t.Helper()
	r := api(http.MethodGet, "/v1/channels/"+pathEscape(ch), nil)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("channel status: %s", r)
	}
	var st struct {
		Rich *richSession `json:"rich"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &st); err != nil || st.Rich == nil {
		t.Fatalf("channel status without a rich session: %s", r.Raw)
	}
	return *st.Rich
}

func textReply(texts ...string) anthropictest.Reply {
	return anthropictest.Reply{Events: anthropictest.TextStream(richModel, texts...)}
}

// messagesRequests are the recorded POST /v1/messages bodies.
func messagesRequests(fake *anthropictest.Server) []anthropictest.Recorded {
	var out []anthropictest.Recorded
	for _, r := range fake.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/messages" {
			out = append(out, r)
		}
	}
	return out
}

// TestRichConversation: a rich channel holds a conversation over five
// turns on one container and one broker (each model request carries the
// whole history, the real key and the profile's model), the session is
// listed for the reaper and shown in channel status, and it idles out
// leaving nothing. Measures a warm rich turn against a sealed standby
// turn, and the idle memory of a rich channel.
func TestRichConversation(t *testing.T) {
	diagnose(t)
	fake := richUpstream(t, 10)
	const ch = "e2e-rich-talk"
	richOn(t, ch)
	var took []time.Duration
	var session, contID string
	for i := 1; i <= 5; i++ {
		fake.Push(textReply("reply-", strconv.Itoa(i)))
		start := time.Now()
		r := turn(ch, "alice", "RICH message "+strconv.Itoa(i))
		took = append(took, time.Since(start))
		if r.Err != nil || r.Status != http.StatusOK || replyText(r) != "reply-"+strconv.Itoa(i) {
			t.Fatalf("turn %d: %s", i, r)
		}
		st := richStatusOf(t, ch)
		if i == 1 {
			session = st.Session
			cs := containers(t)
			for _, c := range cs {
				if c.Labels[layout.LabelTurn] == session {
					contID = c.ID
				}
			}
			if contID == "" {
				t.Fatalf("no container for session %s", session)
			}
		}
		if st.Session != session || st.State != "ready" || st.Turns != i {
			t.Errorf("after turn %d: session %+v, want %s ready with %d turns", i, st, session, i)
		}
	}
	info, err := env.docker.ContainerInspect(context.Background(), contID)
	if err != nil || info.State == nil || !info.State.Running {
		t.Fatalf("the session's container is not running after five turns: %v", err)
	}
	if hc := info.HostConfig; hc.Memory != 1536<<20 || hc.MemorySwap != hc.Memory || hc.NanoCPUs != 1e9 || hc.PidsLimit == nil || *hc.PidsLimit != 256 ||
		!hc.ReadonlyRootfs || hc.NetworkMode != "none" || !slices.Equal(info.Config.Cmd, []string{"rich"}) {
		t.Errorf("container: memory %d swap %d cpus %d pids %v ro %v net %s cmd %v", hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit,
			hc.ReadonlyRootfs, hc.NetworkMode, info.Config.Cmd)
	}
	if got := activeTurns(t); !slices.ContainsFunc(got, func(l listedTurn) bool { return l.ID == session }) {
		t.Errorf("the session is not listed in /v1/turns: %+v", got)
	}
	reqs := messagesRequests(fake)
	if len(reqs) != 5 {
		t.Fatalf("the upstream saw %d message requests, want 5", len(reqs))
	}
	last := string(reqs[4].Body)
	for i := 1; i <= 5; i++ {
		if !strings.Contains(last, "RICH message "+strconv.Itoa(i)) {
			t.Errorf("the fifth request lacks user turn %d: the history is not whole", i)
		}
		if i < 5 && !strings.Contains(last, "reply-"+strconv.Itoa(i)) {
			t.Errorf("the fifth request lacks assistant reply %d", i)
		}
	}
	for _, r := range reqs {
		if got := r.Header.Get("X-Api-Key"); got != env.credential {
			t.Errorf("upstream x-api-key %q, want the real credential", got)
		}
		var body struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(r.Body, &body) != nil || body.Model != richModel {
			t.Errorf("upstream model %q, want %s", body.Model, richModel)
		}
		if strings.Contains(string(r.Body), "sandbox-dummy-key") {
			t.Error("the dummy key reached the upstream")
		}
	}
	if out, err := cli("channel", "status", ch); err != nil || !strings.Contains(out, "session ready") || !strings.Contains(out, session) {
		t.Errorf("channel status: %v\n%s", err, out)
	}

	// Idle memory of the channel: the container and its broker.
	if stats, err := env.docker.ContainerStatsOneShot(context.Background(), contID); err == nil {
		var s container.StatsResponse
		if json.NewDecoder(stats.Body).Decode(&s) == nil {
			// As docker stats shows it: usage less the inactive file cache.
			t.Logf("idle rich container memory: %.1f MiB (usage %.1f MiB, inactive file %.1f MiB)",
				float64(s.MemoryStats.Usage-s.MemoryStats.Stats["inactive_file"])/(1<<20),
				float64(s.MemoryStats.Usage)/(1<<20), float64(s.MemoryStats.Stats["inactive_file"])/(1<<20))
		}
		stats.Body.Close()
	}
	if out, err := run("systemctl", "show", "-p", "MemoryCurrent", "sandbox-broker@"+session+".service"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(out), "MemoryCurrent="), 10, 64); err == nil {
			t.Logf("idle rich broker memory: %.1f MiB", float64(v)/(1<<20))
		}
	}

	// The control path answers the host's uid only: root (this process)
	// reaching the same socket gets 404, with the real SO_PEERCRED.
	sock, _ := layout.BrokerSocket(layout.RunRoot, session)
	ctl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for _, route := range []string{"/control/status", "/control/turn"} {
		resp, err := ctl.Post("http://broker"+route, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Errorf("POST %s as root: %v", route, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s as root (not the host's uid): %d, want 404", route, resp.StatusCode)
		}
	}
	ctl.CloseIdleConnections()

	// A warm rich turn against a sealed standby turn.
	warm := append([]time.Duration(nil), took[1:]...)
	sort.Slice(warm, func(i, j int) bool { return warm[i] < warm[j] })
	const sealed = "e2e-rich-sealed"
	channelOn(t, sealed)
	if r := turn(sealed, "alice", "hello"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("sealed turn: %s", r)
	}
	var sealedTook []time.Duration
	for i := 0; i < 3; i++ {
		standbyOf(t, sealed, 30*time.Second)
		start := time.Now()
		if r := turn(sealed, "alice", "hello again"); r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("sealed turn: %s", r)
		}
		sealedTook = append(sealedTook, time.Since(start))
	}
	sort.Slice(sealedTook, func(i, j int) bool { return sealedTook[i] < sealedTook[j] })
	t.Logf("rich turns: cold (session start) %v; warm median %v (of %v); sealed standby turn median %v (of %v)",
		took[0].Round(time.Millisecond), warm[len(warm)/2].Round(time.Millisecond), warm, sealedTook[1].Round(time.Millisecond), sealedTook)
	if out, err := cli("channel", "off", sealed); err != nil {
		t.Errorf("channel off: %v\n%s", err, out)
	}

	// Idle out: 10 s after the last turn the session is gone, whole.
	if msg := eventually(40*time.Second, func() string {
		if st := richStatusOf(t, ch); st.State != "none" {
			return "the session is still " + st.State
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	if _, err := env.docker.ContainerInspect(context.Background(), contID); err == nil {
		t.Error("the idle session's container is still there")
	}
	assertEmpty(t, "after the rich session idled out")
}

// TestRichBrokerStoppedMidTurn: `systemctl stop` of the channel's broker
// while a model stream hangs fails that turn cleanly (an error answer, the
// session removed) and the next turn recovers on a new session.
func TestRichBrokerStoppedMidTurn(t *testing.T) {
	diagnose(t)
	fake := richUpstream(t, 60)
	const ch = "e2e-rich-stop"
	richOn(t, ch)
	fake.Push(textReply("first"))
	if r := turn(ch, "alice", "RICH one"); r.Err != nil || r.Status != http.StatusOK || replyText(r) != "first" {
		t.Fatalf("first turn: %s", r)
	}
	old := richStatusOf(t, ch)
	fake.Push(anthropictest.Reply{Events: []anthropictest.Event{anthropictest.Start(richModel),
		anthropictest.BlockStart(0, `{"type":"text","text":""}`), anthropictest.TextDelta(0, "partial")}, Hang: true})
	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", "RICH hang") }()
	if msg := eventually(30*time.Second, func() string {
		if len(messagesRequests(fake)) < 2 {
			return "the hanging model request never arrived"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	unit := "sandbox-broker@" + old.Session + ".service"
	start := time.Now()
	systemctl(t, "stop", unit)
	var r apiResult
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the turn did not end after its broker stopped")
	}
	t.Logf("turn ended %v after the broker stop: %s", time.Since(start).Round(time.Millisecond), r)
	if r.Err != nil || r.Status == http.StatusOK {
		t.Errorf("turn with its broker stopped: %s, want an error answer", r)
	}
	if msg := eventually(20*time.Second, func() string {
		if _, err := env.docker.ContainerInspect(context.Background(), old.Container); err == nil {
			return "the failed session's container is still there"
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	fake.Push(textReply("recovered"))
	if r := turn(ch, "alice", "RICH after"); r.Err != nil || r.Status != http.StatusOK || replyText(r) != "recovered" {
		t.Fatalf("turn after the broker stop: %s", r)
	}
	st := richStatusOf(t, ch)
	if st.Session == old.Session || st.State != "ready" {
		t.Errorf("session after recovery %+v, old %s", st, old.Session)
	}
	// channel off stops the session at once.
	if out, err := cli("channel", "off", ch); err != nil {
		t.Fatalf("channel off: %v\n%s", err, out)
	}
	if _, err := env.docker.ContainerInspect(context.Background(), st.Container); err == nil {
		t.Error("the session's container outlived channel off")
	}
	assertEmpty(t, "after channel off")
}

// TestRichHostKilledThenReaped: a live rich session, the host SIGKILLed and
// kept down: one reaper run leaves nothing.
func TestRichHostKilledThenReaped(t *testing.T) {
	diagnose(t)
	fake := richUpstream(t, 600)
	const ch = "e2e-rich-kill"
	richOn(t, ch)
	fake.Push(textReply("alive"))
	if r := turn(ch, "alice", "RICH alive"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	st := richStatusOf(t, ch)
	systemctl(t, "kill", "--kill-who=main", "--signal=SIGKILL", layout.HostService)
	systemctl(t, "stop", layout.HostService)
	if _, err := env.docker.ContainerInspect(context.Background(), st.Container); err != nil {
		t.Fatalf("the killed host left no session container: the scenario proves nothing")
	}
	time.Sleep(2 * time.Second)
	systemctl(t, "start", layout.ReaperUnit)
	assertEmpty(t, "after one run of the reaper")
}

// TestRichHostStopAndStartupReap: `systemctl stop` of the host removes a
// live session; after a SIGKILL the next host start's reap removes the
// dead host's session.
func TestRichHostStopAndStartupReap(t *testing.T) {
	diagnose(t)
	fake := richUpstream(t, 600)
	const ch = "e2e-rich-stop-host"
	richOn(t, ch)
	fake.Push(textReply("one"))
	if r := turn(ch, "alice", "RICH one"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	first := richStatusOf(t, ch)
	systemctl(t, "stop", layout.HostService)
	if _, err := env.docker.ContainerInspect(context.Background(), first.Container); err == nil {
		t.Error("the session's container outlived host stop")
	}
	assertEmpty(t, "after host stop")
	restartHost(t)
	fake.Push(textReply("two"))
	if r := turn(ch, "alice", "RICH two"); r.Err != nil || r.Status != http.StatusOK || replyText(r) != "two" {
		t.Fatalf("turn after the restart: %s", r)
	}
	second := richStatusOf(t, ch)
	if second.Session == first.Session {
		t.Errorf("the session %s survived host stop", first.Session)
	}
	systemctl(t, "kill", "--kill-who=main", "--signal=SIGKILL", layout.HostService)
	time.Sleep(2 * time.Second) // the startup reap leaves what is under a second old
	restartHost(t)
	if msg := eventually(20*time.Second, func() string {
		if _, err := env.docker.ContainerInspect(context.Background(), second.Container); err == nil {
			return "the killed host's session container survived the next start"
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	assertEmpty(t, "after the startup reap")
}
