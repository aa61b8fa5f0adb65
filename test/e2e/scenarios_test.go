package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// The scenarios run in this order (Go runs a file's tests in source order):
// socket activation needs a host that has not started yet.

func TestSocketActivationStartsHost(t *testing.T) {
	diagnose(t)
	// The package may have started the service; the scenario is about the
	// socket, so begin from a listening socket and a stopped service.
	if unitActive(layout.HostService) != "inactive" {
		systemctl(t, "stop", layout.HostService)
	}
	if got := unitActive("sandbox-host.socket"); got != "active" {
		t.Fatalf("sandbox-host.socket is %q, want active", got)
	}
	if got := unitActive(layout.HostService); got != "inactive" {
		t.Fatalf("before the first connection sandbox-host.service is %q, want inactive", got)
	}
	r := api(http.MethodGet, "/v1/channels/e2e-activation", nil)
	if r.Err != nil || r.Status >= 500 {
		t.Fatalf("first API request: %s", r)
	}
	if got := unitActive(layout.HostService); got != "active" {
		t.Fatalf("after the first connection sandbox-host.service is %q, want active", got)
	}
}

func TestTurnHoldsOnlyDummyKey(t *testing.T) {
	diagnose(t)
	const ch = "e2e-cred"
	channelOn(t, ch)
	marker := "CRED-CHECK-" + randHex(4)
	release := heldTurn(t, marker)
	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", marker) }()

	// While the fake model delays its answer, inspect the live container.
	c := waitContainer(t, ch, 20*time.Second)
	ins, err := env.docker.ContainerInspect(context.Background(), c.ID)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	wantEnv := []string{protocol.EnvBrokerSocket + "=" + protocol.BrokerSocketPath, protocol.EnvAPIKey + "=" + protocol.DummyAPIKey}
	var gotEnv []string
	for _, kv := range ins.Config.Env {
		if strings.HasPrefix(kv, "PATH=") { // Docker's default, not from the host
			continue
		}
		gotEnv = append(gotEnv, kv)
	}
	slices.Sort(gotEnv)
	slices.Sort(wantEnv)
	if !slices.Equal(gotEnv, wantEnv) {
		t.Errorf("container Config.Env = %q, want exactly %q", ins.Config.Env, wantEnv)
	}
	raw, _ := json.Marshal(ins)
	if strings.Contains(string(raw), env.credential) {
		t.Errorf("the real credential appears in the container's inspect data")
	}
	hc := ins.HostConfig
	checks := []struct {
		name      string
		got, want any
	}{
		{"NetworkMode", string(hc.NetworkMode), "none"},
		{"ReadonlyRootfs", hc.ReadonlyRootfs, true},
		{"CapDrop", fmt.Sprint(hc.CapDrop), "[ALL]"},
		{"no-new-privileges", slices.ContainsFunc(hc.SecurityOpt, func(s string) bool { return strings.HasPrefix(s, "no-new-privileges") }), true},
		{"Memory==MemorySwap", hc.Memory == hc.MemorySwap && hc.Memory == 256<<20, true},
		{"PidsLimit", hc.PidsLimit != nil && *hc.PidsLimit == 64, true},
		{"NanoCPUs", hc.NanoCPUs, int64(1e9)},
		{"LogConfig.Type", hc.LogConfig.Type, "none"}, // the host forwards stderr (pkg/workerlog)
		{"IpcMode", string(hc.IpcMode), "none"},
		{"Init", hc.Init != nil && !*hc.Init, true},
		{"Ulimits", fmt.Sprint(hc.Ulimits), "[nofile=1024:1024 nproc=64:64]"},
		{"mount count", len(ins.Mounts), 2},
		{"user is not root", ins.Config.User != "" && !strings.HasPrefix(ins.Config.User, "0"), true},
		{"label installation", ins.Config.Labels[layout.LabelInstallation], installation},
		{"label channel", ins.Config.Labels[layout.LabelChannel], ids.ChannelTag(ch)},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("container %s = %v, want %v", c.name, c.got, c.want)
		}
	}
	for _, m := range ins.Mounts {
		switch m.Destination {
		case protocol.WorkspacePath:
			if !m.RW {
				t.Errorf("workspace mount is read-only")
			}
		case protocol.BrokerDir:
			if m.RW {
				t.Errorf("broker directory mount is writable")
			}
			if got := dirEntries(m.Source); !slices.Equal(got, []string{layout.BrokerSocketName}) {
				t.Errorf("turn directory %s holds %v, want only %s", m.Source, got, layout.BrokerSocketName)
			}
		default:
			t.Errorf("unexpected mount %s -> %s", m.Source, m.Destination)
		}
	}
	// The container's files: export its filesystem and search it.
	if rc, err := env.docker.ContainerExport(context.Background(), c.ID); err != nil {
		t.Errorf("export: %v", err)
	} else {
		data, _ := readAllLimit(rc, 512<<20)
		rc.Close()
		if strings.Contains(string(data), env.credential) {
			t.Errorf("the real credential is in the container's filesystem")
		}
	}
	release()
	r := <-done
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	if got := replyText(r); got != "sealed answer" {
		t.Errorf("reply text = %q, want %q (body %s)", got, "sealed answer", r.Raw)
	}
	// The workspace after the turn holds no credential either.
	wsDir, _ := layout.WorkspaceDir(layout.WorkspaceRoot, ch)
	_ = filepath.Walk(wsDir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			if data, _ := os.ReadFile(p); strings.Contains(string(data), env.credential) {
				t.Errorf("workspace file %s holds the real credential", p)
			}
		}
		return nil
	})
	recs := recordsWith(env.modelRec, marker)
	if len(recs) == 0 {
		t.Fatalf("the fake model received no request for %s", marker)
	}
	for i, rec := range recs {
		if got := rec.Header["Authorization"]; !slices.Equal(got, []string{"Bearer " + env.credential}) {
			t.Errorf("request %d Authorization = %q, want the test credential", i, got)
		}
		without := strings.Replace(rec.Raw, "Bearer "+env.credential, "", 1)
		if strings.Contains(without, env.credential) {
			t.Errorf("request %d carries the credential outside Authorization: %s", i, rec.Raw)
		}
		if strings.Contains(rec.Raw, protocol.DummyAPIKey) {
			t.Errorf("request %d carries the dummy key upstream: %s", i, rec.Raw)
		}
		var body map[string]any
		_ = json.Unmarshal(rec.Body, &body)
		if body["model"] != "e2e-model" || body["stream"] != false {
			t.Errorf("request %d model=%v stream=%v, want e2e-model and false", i, body["model"], body["stream"])
		}
	}
	assertNothingLeft(t, "after a normal turn")
}

func TestMCPCallCarriesBrokerCredential(t *testing.T) {
	diagnose(t)
	const ch = "e2e-mcp"
	channelOn(t, ch)
	marker := "MCP-CALL-" + randHex(4)
	r := turn(ch, "alice", marker)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	if got := replyText(r); !strings.Contains(got, "result for "+marker) {
		t.Errorf("reply = %q, want the MCP tool's answer %q", got, "result for "+marker)
	}
	var seen int
	for _, rec := range readRecords(env.mcpRec) {
		if !strings.Contains(rec.Raw, marker) {
			continue
		}
		seen++
		if got := rec.Header["Authorization"]; !slices.Equal(got, []string{"Bearer " + env.mcpCred}) {
			t.Errorf("MCP request Authorization = %q, want the MCP credential", got)
		}
		if strings.Contains(rec.Raw, protocol.DummyAPIKey) || strings.Contains(rec.Raw, env.credential) {
			t.Errorf("MCP request carries the dummy key or the model credential: %s", rec.Raw)
		}
	}
	if seen != 1 {
		t.Errorf("the MCP server saw %d tools/call requests for the turn, want 1", seen)
	}
}

func TestMemoryPersistsAcrossTurns(t *testing.T) {
	diagnose(t)
	const ch = "e2e-memory"
	channelOn(t, ch)
	// The first turn goes through the real CLI.
	out, err := cli("turn", ch, "--speaker-id", "alice", "--speaker-name", "Alice", "--text", "MEM-SET please remember the code")
	if err != nil {
		t.Fatalf("sandbox-host turn (store): %v\n%s", err, out)
	}
	if eventually(15*time.Second, func() string {
		// The channel's standby (a fresh container waiting for the next
		// turn) is expected; the first turn's own container is not.
		if conts, _, _, _ := leftovers(t); len(conts) != 0 {
			return "left"
		}
		return ""
	}) != "" {
		t.Fatalf("a container outlived the first turn")
	}
	r := turn(ch, "bob", "MEM-GET what is the code?")
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn (recall): %s", r)
	}
	if got := replyText(r); !strings.Contains(got, env.memValue) {
		t.Errorf("recall reply = %q, want it to contain %q stored by the previous turn", got, env.memValue)
	}
}

// TestJournalHoldsWorkerLines runs several turns in one channel and finds
// each turn's own worker lines by its turn id (the host forwards the
// worker's stderr with SANDBOX_TURN and CONTAINER_NAME; the turn id comes
// from the API's reply): every turn has its lines, closing with exactly one
// "turn finished", all under the channel's tag, from sandbox-host.service,
// naming the turn's container, none carrying a guest's text. journald runs
// with its default rate limits (the harness does not switch them off). The
// lines reach the journal asynchronously, so each turn's are awaited with a
// deadline.
func TestJournalHoldsWorkerLines(t *testing.T) {
	diagnose(t)
	const ch = "e2e-journal"
	const turns = 3
	channelOn(t, ch)
	tag := ids.LogTag(ch)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	type done struct{ id, secret, container string }
	var ran []done
	for i := range turns {
		secret := fmt.Sprintf("JOURNAL-PAYLOAD-%d-%s", i, randHex(4))
		r := turn(ch, "alice", secret)
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("turn %d: %s", i, r)
		}
		id, _ := r.Body["turnId"].(string)
		name, err := ids.ContainerName(ch, id)
		if err != nil {
			t.Fatalf("turn %d: reply's turnId %q: %v", i, id, err)
		}
		ran = append(ran, done{id, secret, name})
	}

	// journalEntry is the part of `journalctl -o json` the scenario reads.
	type journalEntry struct {
		Message    string `json:"MESSAGE"`
		Identifier string `json:"SYSLOG_IDENTIFIER"`
		Container  string `json:"CONTAINER_NAME"`
		Turn       string `json:"SANDBOX_TURN"`
		Unit       string `json:"_SYSTEMD_UNIT"`
	}
	entries := func(args ...string) []journalEntry {
		var out []journalEntry
		for _, line := range strings.Split(strings.TrimSpace(journal(append(args, "-o", "json")...)), "\n") {
			var e journalEntry
			if json.Unmarshal([]byte(line), &e) == nil && e.Message != "" {
				out = append(out, e)
			}
		}
		return out
	}
	for i, d := range ran {
		var got []journalEntry
		msg := eventually(15*time.Second, func() string {
			got = entries("SANDBOX_TURN=" + d.id)
			finished := 0
			for _, e := range got {
				if strings.Contains(e.Message, `"msg":"turn finished"`) {
					finished++
				}
			}
			if finished != 1 {
				return fmt.Sprintf("turn %d (%s): the journal has %d \"turn finished\" lines of it, want 1 (%d lines in all)", i, d.id, finished, len(got))
			}
			return ""
		})
		if msg != "" {
			t.Errorf("%s; the channel's lines since the scenario began:\n%s", msg, journal("-t", tag, "--since", since, "-o", "short-iso"))
			continue
		}
		for _, e := range got {
			if e.Identifier != tag || e.Container != d.container || e.Unit != layout.HostService {
				t.Errorf("turn %d: a line is tagged %q, container %q, from %q; want %q, %q, %q (the host forwarding it)",
					i, e.Identifier, e.Container, e.Unit, tag, d.container, layout.HostService)
			}
			// Only the worker's stderr reaches the journal (the container has
			// no log driver), so not even its reply, which echoes the guest.
			for _, other := range ran {
				if strings.Contains(e.Message, other.secret) {
					t.Errorf("turn %d: a journal line carries a guest's message text: %v", i, e.Message)
				}
			}
		}
	}
	// Every line under the tag belongs to one of these turns.
	mine := map[string]bool{}
	for _, d := range ran {
		mine[d.id] = true
	}
	for _, e := range entries("-t", tag, "--since", since) {
		if !mine[e.Turn] {
			t.Errorf("a line under %s comes from turn %q (container %q), not one of this scenario's", tag, e.Turn, e.Container)
		}
	}
	if all := journal("--since", since, "-o", "cat"); strings.Contains(all, env.credential) {
		t.Errorf("the real credential reached the journal")
	}
}

func TestDeadlineKillsStubbornWorker(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.Image, c.DeadlineSeconds = stubbornImage, 4
	withConfig(t, c)
	const ch = "e2e-stubborn"
	channelOn(t, ch)
	start := time.Now()
	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", "never answered") }()
	waitContainer(t, ch, 10*time.Second)
	if msg := eventually(5*time.Second, func() string {
		for _, u := range brokerUnits() {
			if strings.Contains(u, ".service") && strings.Contains(u, " active ") {
				return ""
			}
		}
		return fmt.Sprintf("the stubborn worker's connection did not activate its broker service: %v", brokerUnits())
	}); msg != "" {
		t.Error(msg)
	}
	var r apiResult
	select {
	case r = <-done:
	case <-time.After(40 * time.Second):
		t.Fatalf("the turn did not end 40 s after a 4 s deadline")
	}
	took := time.Since(start)
	if r.Err == nil && r.Status == http.StatusOK && fmt.Sprint(r.Body["ok"]) != "false" {
		t.Errorf("a worker that never answers produced a successful turn: %s", r)
	}
	if strings.Contains(r.Raw, "stubborn") || strings.Contains(r.Raw, "/run/") {
		t.Errorf("the error is not generic: %s", r.Raw)
	}
	if took > 25*time.Second {
		t.Errorf("the turn took %s with a 4 s deadline", took)
	}
	t.Logf("turn ended after %s: %s", took.Round(time.Millisecond), r)
	assertNothingLeft(t, "after the deadline")
}

func TestHostKilledMidTurnIsReaped(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.DeadlineSeconds, c.GraceSeconds = 3, 0
	withConfig(t, c)
	const ch = "e2e-crash"
	channelOn(t, ch)
	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", "SLOW crash me") }()
	waitContainer(t, ch, 10*time.Second)
	systemctl(t, "kill", "--kill-who=main", "--signal=SIGKILL", layout.HostService)
	// Keep the host down (no automatic restart) so only the reaper cleans.
	systemctl(t, "stop", layout.HostService)
	if r := <-done; r.Err == nil && r.Status == http.StatusOK {
		t.Errorf("a turn whose host was killed answered: %s", r)
	}
	if len(containers(t)) == 0 {
		t.Fatalf("nothing was left behind by the killed host: the scenario proves nothing")
	}
	time.Sleep(4 * time.Second) // past the turn deadline (3 s) plus grace (0)
	if unitActive(layout.HostService) == "active" {
		t.Fatalf("the host is running again before the reaper ran")
	}
	systemctl(t, "start", layout.ReaperUnit)
	if unitActive(layout.HostService) == "active" {
		t.Errorf("the reaper socket-activated the host")
	}
	assertNothingLeft(t, "after one run of the reaper")
	// The host serves again.
	if r := turn(ch, "alice", "hello again"); r.Err != nil || r.Status != http.StatusOK {
		t.Errorf("turn after restart: %s", r)
	}
}

func TestChannelModeSurvivesRestart(t *testing.T) {
	diagnose(t)
	const ch = "e2e-mode"
	if out, err := cli("channel", "off", ch); err != nil {
		t.Fatalf("channel off: %v\n%s", err, out)
	}
	if r := turn(ch, "alice", "refused?"); r.Err != nil || r.Status < 400 || r.Status >= 500 {
		t.Errorf("turn on a channel switched off: %s, want a 4xx refusal", r)
	}
	channelOn(t, ch)
	if r := turn(ch, "alice", "served?"); r.Err != nil || r.Status != http.StatusOK {
		t.Errorf("turn on a channel switched on: %s", r)
	}
	restartHost(t)
	if r := turn(ch, "alice", "still served?"); r.Err != nil || r.Status != http.StatusOK {
		t.Errorf("turn on a channel switched on, after a host restart: %s", r)
	}
	if out, err := cli("channel", "off", ch); err != nil {
		t.Fatalf("channel off: %v\n%s", err, out)
	}
	restartHost(t)
	if r := turn(ch, "alice", "refused again?"); r.Err != nil || r.Status < 400 || r.Status >= 500 {
		t.Errorf("turn on a channel switched off, after a host restart: %s, want a 4xx refusal", r)
	}
}

func TestTurnsSerialPerChannelParallelAcross(t *testing.T) {
	diagnose(t)
	run := randHex(3)
	chA, chB := "e2e-a", "e2e-b"
	channelOn(t, chA)
	channelOn(t, chB)
	jobs := map[string]string{"A1": chA, "A2": chA, "B1": chB}
	var wg sync.WaitGroup
	results := map[string]apiResult{}
	var mu sync.Mutex
	for name, ch := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := turn(ch, "alice", "OVERLAP-"+run+"-"+name)
			mu.Lock()
			results[name] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	span := map[string][2]time.Time{}
	for name := range jobs {
		if r := results[name]; r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("turn %s: %s", name, r)
		}
		recs := recordsForUser(env.modelRec, "OVERLAP-"+run+"-"+name)
		if len(recs) != 1 {
			t.Fatalf("turn %s: fake model saw %d requests, want 1", name, len(recs))
		}
		span[name] = [2]time.Time{recs[0].Start, recs[0].End}
	}
	overlap := func(a, b [2]time.Time) bool { return a[0].Before(b[1]) && b[0].Before(a[1]) }
	if overlap(span["A1"], span["A2"]) {
		t.Errorf("two turns of one channel overlapped: A1 %v, A2 %v", span["A1"], span["A2"])
	}
	if !overlap(span["B1"], span["A1"]) && !overlap(span["B1"], span["A2"]) {
		t.Errorf("turns of two channels did not run at the same time: A1 %v, A2 %v, B1 %v", span["A1"], span["A2"], span["B1"])
	}
}

func TestHostileWorkerIsRefused(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.Image = hostileImage
	withConfig(t, c)
	hostileWorkerScenario(t, "e2e-hostile", "")
}

// hostileWorkerScenario runs the hostile worker's probes on a host already
// configured with the hostile image, and checks every refusal. Each caller
// has its own channel: the fake servers' records hold every scenario's calls.
func hostileWorkerScenario(t *testing.T, ch, runtime string) {
	t.Helper()
	channelOn(t, ch)
	type probeResult struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
		Body   string `json:"body"`
	}
	var report struct {
		Probes   map[string]probeResult `json:"probes"`
		Observed map[string]any         `json:"observed"`
	}
	report.Probes = map[string]probeResult{}
	// A few probes a turn, under the broker's refusal budget (16), so each
	// is refused for its own reason (TestRefusalBudgetEndsTheTurn sends all
	// in one turn).
	const chunk = 12
	for from, total := 1, 2; from < total; from += chunk {
		r := turn(ch, "alice", fmt.Sprintf("PROBES %d %d", from, from+chunk))
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("turn: %s", r)
		}
		var part struct {
			Probes   map[string]probeResult `json:"probes"`
			Observed map[string]any         `json:"observed"`
			Total    int                    `json:"total"`
		}
		if err := json.Unmarshal([]byte(replyText(r)), &part); err != nil || len(part.Probes) == 0 {
			t.Fatalf("hostile reply is not its report: %v: %s", err, r.Raw)
		}
		for name, p := range part.Probes {
			if name == "control" && report.Probes[name].Status != 0 && p.Status == http.StatusOK {
				continue // one control per turn; keep a failed one
			}
			report.Probes[name] = p
		}
		report.Observed, total = part.Observed, part.Total
	}
	for name, p := range report.Probes {
		if strings.Contains(p.Body, "refusal limit reached") {
			t.Errorf("probe %s met the refusal budget, not its own refusal: the chunks are too large", name)
		}
	}
	for name, p := range report.Probes {
		switch {
		case name == "control":
			if p.Status != http.StatusOK {
				t.Errorf("the well-formed control call got %d %s %s: refusals prove nothing", p.Status, p.Error, p.Body)
			}
		case name == "forged_identity_host_tool":
			// Accepted or refused, the identity must be the policy's (checked below).
			t.Logf("probe %-26s HTTP %d %s", name, p.Status, p.Body)
		case p.Status == http.StatusOK || (p.Status > 0 && p.Status < 400):
			t.Errorf("probe %s was accepted (HTTP %d)", name, p.Status)
		default:
			t.Logf("probe %-26s refused: HTTP %d %s%s", name, p.Status, p.Error, p.Body)
		}
	}
	for _, rec := range readRecords(env.modelRec) {
		if strings.Contains(rec.Raw, "HOSTILE-") && !strings.Contains(rec.Raw, "HOSTILE-control") {
			t.Errorf("the fake model saw a refused call: %s", rec.Raw)
		}
	}
	// The forged identity reached the http host tool only as argument data;
	// the identity headers are the policy's.
	var whoami []modelRecord
	for _, rec := range readRecords(env.mcpRec) {
		switch {
		case rec.Path == "/whoami":
			if strings.Join(rec.Header["X-Sandbox-Channel"], ",") == ch {
				whoami = append(whoami, rec)
			}
		case strings.Contains(rec.Raw, "HOSTILE-"):
			t.Errorf("the fake MCP server saw a refused call: %s", rec.Raw)
		}
	}
	if p := report.Probes["forged_identity_host_tool"]; p.Status == http.StatusOK {
		if len(whoami) != 1 {
			t.Errorf("the http host tool saw %d calls, want 1", len(whoami))
		}
		for _, rec := range whoami {
			for h, want := range map[string]string{"X-Sandbox-Channel": ch, "X-Sandbox-Speaker-Id": "alice", "X-Sandbox-Principal-Id": "principal-alice"} {
				if got := strings.Join(rec.Header[h], ","); got != want {
					t.Errorf("host tool header %s = %q, want the policy's %q", h, got, want)
				}
			}
			if rec.Header["Authorization"] != nil {
				t.Errorf("the host tool (no credential configured) got an Authorization header")
			}
		}
	}
	o := report.Observed
	for _, kv := range o["env"].([]any) {
		s := fmt.Sprint(kv)
		// PATH, HOSTNAME and HOME=/ are Docker's runtime defaults, not the host's.
		docker := strings.HasPrefix(s, "PATH=") || strings.HasPrefix(s, "HOSTNAME=") || s == "HOME=/"
		if strings.Contains(s, env.credential) || !docker && s != protocol.EnvAPIKey+"="+protocol.DummyAPIKey &&
			s != protocol.EnvBrokerSocket+"="+protocol.BrokerSocketPath {
			t.Errorf("container environment holds %q", s)
		}
	}
	wantObserved := map[string]any{"CapEff": "0000000000000000", "NoNewPrivs": "1", "NoNewPrivsPrctl": "1", "rootWritable": false, "outboundTCP": false,
		"rlimitNofile": "1024:1024", "rlimitNproc": "64:64", "devShmWritable": false}
	if runtime == "runsc" {
		delete(wantObserved, "NoNewPrivs") // gVisor's /proc/self/status has no such line; prctl answers
	}
	for k, want := range wantObserved {
		if fmt.Sprint(o[k]) != fmt.Sprint(want) {
			t.Errorf("inside the container %s = %v, want %v", k, o[k], want)
		}
	}
	if fmt.Sprint(o["uid"]) == "0" {
		t.Errorf("the worker runs as root")
	}
	if ifs := fmt.Sprint(o["interfaces"]); ifs != "[lo]" {
		t.Errorf("network interfaces in the container: %s, want [lo]", ifs)
	}
	assertNothingLeft(t, "after the hostile turn")
}

func TestStopDuringTurnCleansUp(t *testing.T) {
	diagnose(t)
	const ch = "e2e-stop"
	channelOn(t, ch)
	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", "SLOW stop me") }()
	waitContainer(t, ch, 10*time.Second)
	start := time.Now()
	systemctl(t, "stop", layout.HostService)
	t.Logf("systemctl stop took %s", time.Since(start).Round(time.Millisecond))
	// Checked at once: the cleanup must happen before the service stops.
	assertNothingLeft(t, "right after systemctl stop")
	select {
	case r := <-done:
		if r.Err == nil && r.Status == http.StatusOK {
			t.Errorf("a turn cancelled by stop answered: %s", r)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the client of a cancelled turn got no answer")
	}
}

func readAllLimit(r interface{ Read([]byte) (int, error) }, max int64) ([]byte, error) {
	var b strings.Builder
	buf := make([]byte, 64<<10)
	for int64(b.Len()) < max {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(b.String()), nil
}

// inotifyAs creates (and closes) one inotify instance on a thread whose real
// and effective uid are uid: inotify instances are counted per user.
func inotifyAs(uid int) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, with its changed ids, ends with this
		// goroutine instead of going back to the scheduler.
		runtime.LockOSThread()
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), ^uintptr(0)); e != 0 {
			errc <- fmt.Errorf("setresuid %d: %w", uid, e)
			return
		}
		fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
		if err == nil {
			syscall.Close(fd)
		}
		errc <- err
	}()
	return <-errc
}

func TestGuestsHaveTheirOwnUIDs(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.Image = hostileImage
	withConfig(t, c)
	const chX, chY = "e2e-budget", "e2e-budget-other"
	channelOn(t, chX)
	channelOn(t, chY)
	u, err := user.Lookup(layout.HostUser)
	if err != nil {
		t.Fatalf("lookup %s: %v", layout.HostUser, err)
	}
	hostUID, _ := strconv.Atoi(u.Uid)
	if err := inotifyAs(hostUID); err != nil {
		t.Fatalf("before the attack the host's uid cannot make an inotify instance: %v", err)
	}
	wsX, _ := layout.WorkspaceDir(layout.WorkspaceRoot, chX)
	_ = os.Remove(filepath.Join(wsX, "exhausted"))
	_ = os.Remove(filepath.Join(wsX, "release"))

	done := make(chan apiResult, 1)
	go func() { done <- turn(chX, "alice", "EXHAUST inotify") }()
	cX := waitContainer(t, chX, 20*time.Second)
	var held struct {
		Instances int    `json:"instances"`
		UID       int    `json:"uid"`
		Error     string `json:"error"`
	}
	if msg := eventually(30*time.Second, func() string {
		data, err := os.ReadFile(filepath.Join(wsX, "exhausted"))
		if err != nil || json.Unmarshal(data, &held) != nil {
			return "the exhausting worker reported nothing in its workspace"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	release := func() { _ = os.WriteFile(filepath.Join(wsX, "release"), nil, 0o644) }
	defer release()
	t.Logf("guest uid %d holds %d inotify instances (stopped by: %s)", held.UID, held.Instances, held.Error)
	limitReached := held.Error != ""
	if !limitReached {
		raw, _ := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
		if n, _ := strconv.Atoi(strings.TrimSpace(string(raw))); n > 4096 {
			t.Logf("NOTE: fs.inotify.max_user_instances is %d, above the hostile worker's 4096: the budget part proves nothing here", n)
		} else {
			t.Errorf("the guest never reached its uid's inotify limit (%d instances): the scenario proves nothing", held.Instances)
		}
	}

	// Its uid is neither the host's nor root, and lies in the guest range.
	ins, err := env.docker.ContainerInspect(context.Background(), cX.ID)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	want := fmt.Sprintf("%d:%d", held.UID, held.UID)
	if ins.Config.User != want {
		t.Errorf("container user %q, the worker saw %s", ins.Config.User, want)
	}
	if held.UID == hostUID || held.UID == 0 || held.UID < 2147000000 || held.UID >= 2147000000+65536 {
		t.Errorf("guest uid %d: want one of the default guest range, not the host's %d", held.UID, hostUID)
	}
	if st, err := os.Stat(wsX); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(held.UID) || st.Mode().Perm() != 0o700 {
		t.Errorf("workspace %s: %v, want 0700 and owned by the guest uid %d", wsX, st, held.UID)
	}

	// With the guest's budget used up: the host's uid still has its own, the
	// host answers, and another channel's turn runs on another uid.
	if err := inotifyAs(hostUID); err != nil {
		t.Errorf("the guest used up the host uid's inotify instances: %v", err)
	}
	if r := api(http.MethodGet, "/v1/health", nil); r.Err != nil || r.Status != http.StatusOK {
		t.Errorf("health while a guest holds its budget: %s", r)
	}
	r := turn(chY, "bob", "another channel's turn")
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("another channel's turn while a guest holds its budget: %s", r)
	}
	var report struct {
		Observed map[string]any `json:"observed"`
	}
	if err := json.Unmarshal([]byte(replyText(r)), &report); err != nil {
		t.Fatalf("the other channel's reply is not the hostile report: %v: %s", err, r.Raw)
	}
	uidY := fmt.Sprint(report.Observed["uid"])
	if uidY == fmt.Sprint(held.UID) || uidY == strconv.Itoa(hostUID) || uidY == "0" {
		t.Errorf("the other channel's guest runs as uid %s (guest X %d, host %d)", uidY, held.UID, hostUID)
	}

	release()
	select {
	case r := <-done:
		if r.Err != nil || r.Status != http.StatusOK {
			t.Errorf("the exhausting turn: %s", r)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("the exhausting turn did not end after its release")
	}
	assertNothingLeft(t, "after the budget turn")
}

// TestBrokenConfigFailsFastAndVisibly: a host whose configuration has an
// unknown key does not restart-loop behind a socket that keeps accepting.
// It exits 78 naming the key as written; connections to the socket start it
// again only up to the start limit, after which the socket fails and closes;
// a client gets an error within seconds instead of waiting; systemctl, the
// journal and doctor all say what is wrong; and after the fix the documented
// reset brings it back.
func TestBrokenConfigFailsFastAndVisibly(t *testing.T) {
	diagnose(t)
	const key = "turnDeadlineSecs" // as written: mixed case, which viper would lowercase
	good, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	install := func(data []byte) {
		t.Helper()
		tmp := configPath + ".e2e-tmp"
		if err := os.WriteFile(tmp, data, 0o640); err != nil {
			t.Fatal(err)
		}
		if out, err := run("chown", "root:_sandbox", tmp); err != nil {
			t.Fatalf("chown: %v %s", err, out)
		}
		if err := os.Rename(tmp, configPath); err != nil {
			t.Fatal(err)
		}
	}
	recoverHost := func() {
		_, _ = run("systemctl", "reset-failed", "sandbox-host.socket", layout.HostService)
		if out, err := run("systemctl", "start", "sandbox-host.socket", layout.HostService); err != nil {
			t.Errorf("start after the fix: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		install(good)
		recoverHost()
	})
	install(append(append([]byte{}, good...), []byte("\n"+key+": 30\n")...))
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	_, _ = run("systemctl", "reset-failed", "sandbox-host.socket", layout.HostService)
	if out, err := run("systemctl", "restart", layout.HostService); err == nil {
		t.Fatalf("the host started with an unknown key:\n%s", out)
	}
	show := func(unit string) string {
		out, _ := run("systemctl", "show", "--property=ActiveState,Result,ExecMainStatus,NRestarts", unit)
		return strings.Join(strings.Fields(out), " ")
	}
	if got := show(layout.HostService); !strings.Contains(got, "ExecMainStatus=78") || !strings.Contains(got, "NRestarts=0") {
		t.Errorf("after a start with a bad config the service shows %q, want exit status 78 and no restart", got)
	}

	// A client arriving now triggers starts up to the limit, then the socket
	// fails: the client gets an error in seconds, not after its deadline.
	start := time.Now()
	out, err := cli("--timeout", "60s", "channel", "status", "e2e-broken")
	took := time.Since(start)
	t.Logf("a status call to the broken host failed after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
	if err == nil {
		t.Errorf("a status call to a host that cannot start succeeded: %s", out)
	}
	if took > 15*time.Second {
		t.Errorf("the client waited %s for a host that cannot start", took)
	}
	got := eventually(10*time.Second, func() string {
		if s := show("sandbox-host.socket"); strings.Contains(s, "ActiveState=failed") {
			return ""
		}
		return show("sandbox-host.socket")
	})
	if got != "" {
		t.Errorf("sandbox-host.socket: %s, want failed (service-start-limit-hit)", got)
	}
	if s := show("sandbox-host.socket"); !strings.Contains(s, "Result=service-start-limit-hit") {
		t.Errorf("sandbox-host.socket: %s, want Result=service-start-limit-hit", s)
	}
	start = time.Now()
	if out, err := cli("--timeout", "60s", "channel", "status", "e2e-broken"); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("a call to the failed socket: err %v after %s: %s", err, time.Since(start), out)
	}

	// Visible: status, journal and doctor name the key as written.
	want := key + ": unknown key (line "
	if out, _ := run("systemctl", "status", "--no-pager", "--lines=20", layout.HostService); !strings.Contains(out, want) || !strings.Contains(out, "status=78") {
		t.Errorf("systemctl status does not show %q and status=78:\n%s", want, out)
	}
	if out := journal("-u", layout.HostService, "--since", since); !strings.Contains(out, want) {
		t.Errorf("the journal does not name the key as written (%q):\n%s", want, out)
	}
	out, err = cli("doctor")
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "sandbox-host.socket is failed") || !strings.Contains(out, "reset-failed") {
		t.Errorf("doctor (err %v) does not report the key, the failed socket and the remedy:\n%s", err, out)
	}

	// Fixed file, documented reset: the host serves again.
	install(good)
	recoverHost()
	if r := api(http.MethodGet, "/v1/health", nil); r.Err != nil || r.Status != http.StatusOK {
		t.Errorf("health after the fix and reset: %s", r)
	}
}

// countLines counts journal lines under identifier since since that contain marker.
func countLines(identifier, since, marker string) int {
	n := 0
	for _, l := range strings.Split(journal("-t", identifier, "--since", since, "-o", "cat"), "\n") {
		if strings.Contains(l, marker) {
			n++
		}
	}
	return n
}

// One channel's guest floods stderr far past journald's default rate limit
// (10,000 messages per 30 s per unit): another channel's turn right after it
// still has every line in the journal, and nothing is suppressed.
func TestLogFloodLeavesOtherChannels(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.Image = hostileImage
	withConfig(t, c)
	const chA, chB = "e2e-flood", "e2e-quiet"
	channelOn(t, chA)
	channelOn(t, chB)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	flood, quiet := "FLOOD-"+randHex(4), "QUIET-"+randHex(4)
	// 200,000 lines: past journald's burst even as scaled up for free space.
	const floodLines, quietLines = 200000, 300
	if r := turn(chA, "alice", fmt.Sprintf("FLOOD %d %s", floodLines, flood)); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("flooding turn: %s", r)
	}
	if r := turn(chB, "bob", fmt.Sprintf("LOG %d %s", quietLines, quiet)); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("the other channel's turn: %s", r)
	}
	tagA, tagB := ids.LogTag(chA), ids.LogTag(chB)
	if msg := eventually(15*time.Second, func() string {
		if n := countLines(tagB, since, quiet); n != quietLines {
			return fmt.Sprintf("journalctl -t %s holds %d of the other channel's %d lines", tagB, n, quietLines)
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	// What the host used, for its unit's bounds (MemoryMax=1G, TasksMax=512).
	t.Logf("host unit after the flood: %s", strings.Join(strings.Fields(systemctl(t, "show", "-p", "MemoryCurrent", "-p", "TasksCurrent", "-p", "CPUUsageNSec", layout.HostService)), " "))
	nA := countLines(tagA, since, flood)
	t.Logf("the flooding turn wrote %d lines; %d reached the journal", floodLines, nA)
	if nA == 0 || nA > 1000 {
		t.Errorf("the flooding channel has %d lines in the journal, want 1..1000 (its turn's bound)", nA)
	}
	if n := countLines(tagA, since, "over this turn's bound were dropped"); n != 1 {
		t.Errorf("the flooding turn has %d closing lines saying what was dropped, want 1", n)
	}
	if s := journal("--since", since, "-o", "cat", "--grep", "Suppressed"); strings.Contains(s, "Suppressed") {
		t.Errorf("journald suppressed messages during the flood:\n%s", s)
	}
	assertNothingLeft(t, "after the flood")
}

// A running broker, seen from inside its own mount namespace
// (/proc/<pid>/root): its credentials directory holds exactly the names its
// policy uses, no other turn's policy exists for it, and it runs as a uid of
// its own.
func TestBrokerHoldsOnlyItsOwnCredentialsAndPolicy(t *testing.T) {
	diagnose(t)
	const ch = "e2e-least"
	channelOn(t, ch)
	extra := filepath.Join(credentialsDir, "unused-e2e")
	if err := writeCredential("unused-e2e", "sk-unused-"+randHex(8)+"\n"); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(extra)
	other := filepath.Join(layout.PolicyDir, strings.Repeat("f", 32)+".json")
	if err := os.WriteFile(other, []byte(`{"turnId":"another"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	if out, err := run("chown", "_sandbox:_sandbox-broker", other); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}

	text := "LEAST-CRED-" + randHex(4)
	release := heldTurn(t, text)
	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", text) }()
	waitContainer(t, ch, 20*time.Second)
	var turnID string
	for _, tt := range activeTurns(t) {
		// Not the channel's next standby, prepared while this turn runs.
		if tt.ChannelTag == ids.ChannelTag(ch) && tt.Standby == "" {
			turnID = tt.ID
		}
	}
	if turnID == "" {
		t.Fatalf("the turn is not listed in /v1/turns")
	}
	unit := "sandbox-broker@" + turnID + ".service"
	var pid string
	if msg := eventually(10*time.Second, func() string {
		pid = strings.TrimSpace(systemctl(t, "show", "-p", "MainPID", "--value", unit))
		if pid == "" || pid == "0" {
			return unit + " has no main process"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	// What a broker uses, for the unit's bounds (MemoryMax=256M, TasksMax=64).
	t.Logf("broker unit while serving: %s", strings.Join(strings.Fields(systemctl(t, "show", "-p", "MemoryCurrent", "-p", "TasksCurrent", "-p", "CPUUsageNSec", unit)), " "))
	root := "/proc/" + pid + "/root"
	creds := dirEntries(filepath.Join(root, "run/credentials", unit))
	if want := []string{layout.CredentialPrefix + "mcp-search", layout.CredentialPrefix + "model"}; !slices.Equal(creds, want) {
		t.Errorf("the broker's credentials directory lists %v, want exactly %v (its policy's names)", creds, want)
	}
	if got := dirEntries(filepath.Join(root, layout.PolicyDir)); !slices.Equal(got, []string{turnID + ".json"}) {
		t.Errorf("the broker sees policies %v, want only its own %s.json", got, turnID)
	}
	if _, err := os.Stat(filepath.Join(root, other)); err == nil {
		t.Errorf("another turn's policy %s is visible to the broker", other)
	}
	// The host (CAP_CHOWN) must not reach the credential copies: its mount
	// namespace has the directory made inaccessible.
	hostPID := strings.TrimSpace(systemctl(t, "show", "-p", "MainPID", "--value", "sandbox-host.service"))
	if hostPID == "" || hostPID == "0" {
		t.Fatalf("sandbox-host.service has no main process")
	}
	if _, err := os.Stat(filepath.Join(layout.RuntimeDir, "credsets", turnID)); err != nil {
		t.Errorf("the turn's credential copy is missing from the real root: %v", err)
	}
	if got := dirEntries(filepath.Join("/proc", hostPID, "root", layout.RuntimeDir, "credsets")); len(got) != 0 {
		t.Errorf("the host's mount namespace lists credential copies %v, want none (InaccessiblePaths=)", got)
	}
	if _, err := os.Stat(filepath.Join("/proc", hostPID, "root", layout.RuntimeDir, "credsets", turnID)); err == nil {
		t.Errorf("the turn's credential copy is visible in the host's mount namespace")
	}
	status, _ := os.ReadFile("/proc/" + pid + "/status")
	u, _ := user.Lookup(layout.BrokerUser)
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			if f[1] == u.Uid || f[1] == "0" {
				t.Errorf("the broker runs as uid %s, want a dynamic uid of its own (not %s's %s)", f[1], layout.BrokerUser, u.Uid)
			}
			t.Logf("broker %s runs as uid %s", unit, f[1])
		}
	}
	release()
	if r := <-done; r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	if msg := eventually(10*time.Second, func() string {
		if _, err := os.Stat(filepath.Join(layout.RuntimeDir, "credsets", turnID)); err == nil {
			return "the turn's credential copy outlived it"
		}
		return ""
	}); msg != "" {
		t.Error(msg)
	}
	os.Remove(other)
	assertNothingLeft(t, "after the least-credential turn")
}

type listedTurn struct {
	ID         string `json:"id"`
	ChannelTag string `json:"channelTag"`
	// Standby is set for a standby not bound to a turn (its state).
	Standby string `json:"standby"`
}

func activeTurns(t *testing.T) []listedTurn {
	t.Helper()
	r := api(http.MethodGet, "/v1/turns", nil)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /v1/turns: %s", r)
	}
	var out struct {
		Turns []listedTurn `json:"turns"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &out); err != nil {
		t.Fatalf("GET /v1/turns: %v: %s", err, r.Raw)
	}
	return out.Turns
}

// standbyOf waits for the channel's ready standby and returns its turn id
// and container.
func standbyOf(t *testing.T, channel string, within time.Duration) (string, container.Summary) {
	t.Helper()
	tag := ids.ChannelTag(channel)
	var id string
	var found container.Summary
	msg := eventually(within, func() string {
		st := api(http.MethodGet, "/v1/channels/"+pathEscape(channel), nil)
		if st.Body["standby"] != "ready" {
			return "channel status: " + st.String()
		}
		id = ""
		for turn, ch := range hostStandbys(t) {
			if ch == tag {
				id = turn
			}
		}
		for _, c := range containers(t) {
			if id != "" && c.Labels[layout.LabelTurn] == id {
				found = c
				return ""
			}
		}
		return "standby " + id + " has no container"
	})
	if msg != "" {
		t.Fatalf("no ready standby for %s within %s: %s", channel, within, msg)
	}
	return id, found
}

// memKiB reads a process's resident set size and its proportional share
// (shared pages divided among their users), in KiB.
func memKiB(pid int) (rss, pss int) {
	field := func(file, name string) int {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, name); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				return n
			}
		}
		return -1
	}
	return field("status", "VmRSS:"), field("smaps_rollup", "Pss:")
}

func parentPID(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return -1
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// TestStandbyServesTurn: after a channel's first (cold) turn the host keeps
// a standby: a started container with a placeholder policy and a running
// broker. The next turn is served by it: same turn id, the container
// created before the request was sent. Then a few interleaved turns with
// and without a standby, timed.
func TestStandbyServesTurn(t *testing.T) {
	diagnose(t)
	const ch = "e2e-standby"
	channelOn(t, ch)
	if r := turn(ch, "alice", "hello cold"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("first turn: %s", r)
	}
	id, c := standbyOf(t, ch, 30*time.Second)
	if out, err := cli("channel", "status", ch); err != nil || !strings.Contains(out, "standby ready") {
		t.Errorf("sandbox-host channel status does not show the ready standby: %v\n%s", err, out)
	}
	ins, err := env.docker.ContainerInspect(context.Background(), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, ins.Created)
	if err != nil || ins.State == nil || !ins.State.Running {
		t.Fatalf("standby container created %q (%v), state %+v", ins.Created, err, ins.State)
	}
	if ins.Config.Labels[layout.LabelStandby] == "" {
		t.Errorf("standby container lacks its %s label: %v", layout.LabelStandby, ins.Config.Labels)
	}
	polPath, _ := layout.PolicyFile(layout.PolicyDir, id)
	if full, pending, err := policy.Read(polPath); err != nil || full != nil || pending == nil {
		t.Errorf("standby policy file: %v, full %v: want the placeholder only", err, full != nil)
	}
	svc := "sandbox-broker@" + id + ".service"
	if msg := eventually(10*time.Second, func() string {
		if st := unitActive(svc); st != "active" {
			return svc + " is " + st
		}
		return ""
	}); msg != "" {
		t.Errorf("standby broker not started before the turn: %s", msg)
	}
	// Idle cost of the waiting standby.
	workerPID := ins.State.Pid
	shimPID := parentPID(workerPID)
	brokerPID, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(systemctl(t, "show", "-p", "MainPID", svc)), "MainPID="))
	for _, p := range []struct {
		what string
		pid  int
	}{{"worker", workerPID}, {"containerd-shim", shimPID}, {"broker", brokerPID}} {
		rss, pss := memKiB(p.pid)
		t.Logf("standby idle memory: %s (pid %d) RSS %d KiB, PSS %d KiB", p.what, p.pid, rss, pss)
	}

	sent := time.Now()
	r := turn(ch, "bob", "hello warm")
	took := time.Since(sent)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("second turn: %s", r)
	}
	if got, _ := r.Body["turnId"].(string); got != id {
		t.Errorf("second turn ran as %q, want the standby's turn %s", got, id)
	}
	if !created.Before(sent) {
		t.Errorf("the serving container was created at %v, not before the request at %v", created, sent)
	}
	if !strings.Contains(replyText(r), "hello warm") {
		t.Errorf("reply %q", replyText(r))
	}
	t.Logf("turn served by a standby: %v", took)
	assertNothingLeft(t, "after a standby turn")

	// Interleaved: a turn on a ready standby, then one on the cold path
	// (switching the channel off and on discards the standby).
	var warm, cold []time.Duration
	for i := 0; i < 5; i++ {
		standbyOf(t, ch, 30*time.Second)
		s := time.Now()
		if r := turn(ch, "bob", "warm "+strconv.Itoa(i)); r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("warm turn %d: %s", i, r)
		}
		warm = append(warm, time.Since(s))
		// Wait for the replacement, discard it, and let the discard end,
		// so the cold turn shares Docker with nothing.
		standbyOf(t, ch, 30*time.Second)
		if out, err := cli("channel", "off", ch); err != nil {
			t.Fatalf("channel off: %v\n%s", err, out)
		}
		eventually(15*time.Second, func() string {
			for _, c := range containers(t) {
				if c.Labels[layout.LabelChannel] == ids.ChannelTag(ch) {
					return "discard running"
				}
			}
			return ""
		})
		channelOn(t, ch)
		s = time.Now()
		if r := turn(ch, "bob", "cold "+strconv.Itoa(i)); r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("cold turn %d: %s", i, r)
		}
		cold = append(cold, time.Since(s))
	}
	t.Logf("turn latency, client side, 5 interleaved pairs: standby median %v %v; cold median %v %v",
		median(warm), warm, median(cold), cold)
	assertNothingLeft(t, "after the timed turns")
}

// TestStandbyDiscardedWhenChannelOff: switching a channel off removes its
// standby: nothing of it is left.
func TestStandbyDiscardedWhenChannelOff(t *testing.T) {
	diagnose(t)
	const ch = "e2e-standby-off"
	channelOn(t, ch)
	if r := turn(ch, "alice", "hello"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	id, _ := standbyOf(t, ch, 30*time.Second)
	if out, err := cli("channel", "off", ch); err != nil {
		t.Fatalf("channel off: %v\n%s", err, out)
	}
	tag := ids.ChannelTag(ch)
	if msg := eventually(15*time.Second, func() string {
		for _, c := range containers(t) {
			if c.Labels[layout.LabelChannel] == tag {
				return "container " + c.ID + " of the channel left"
			}
		}
		for _, u := range brokerUnits() {
			if strings.Contains(u, id) {
				return "unit left: " + u
			}
		}
		if slices.Contains(dirEntries(layout.RunRoot), id) || slices.Contains(dirEntries(layout.PolicyDir), id+".json") {
			return "turn directory or policy file left"
		}
		return ""
	}); msg != "" {
		t.Errorf("after channel off: %s", msg)
	}
	if st := api(http.MethodGet, "/v1/channels/"+pathEscape(ch), nil); st.Body["standby"] != "none" {
		t.Errorf("channel status after off: %s", st)
	}
	assertNothingLeft(t, "after channel off")
}

// TestStandbyDeadFallsBackToColdPath: a standby whose container was killed
// by hand, and standbys that waited through a Docker restart, are found at
// bind time; the turns take the cold path and succeed.
func TestStandbyDeadFallsBackToColdPath(t *testing.T) {
	diagnose(t)
	const ch = "e2e-standby-dead"
	channelOn(t, ch)
	if r := turn(ch, "alice", "hello"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	id, c := standbyOf(t, ch, 30*time.Second)
	if out, err := run("docker", "kill", c.ID); err != nil {
		t.Fatalf("docker kill: %v\n%s", err, out)
	}
	r := turn(ch, "alice", "after the kill")
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn after its standby was killed: %s", r)
	}
	if got, _ := r.Body["turnId"].(string); got == id {
		t.Errorf("the killed standby %s served the turn", id)
	}
	assertNothingLeft(t, "after a dead standby")

	standbyOf(t, ch, 30*time.Second)
	systemctl(t, "restart", "docker.service")
	if msg := eventually(60*time.Second, func() string {
		if _, err := env.docker.Ping(context.Background()); err != nil {
			return err.Error()
		}
		return ""
	}); msg != "" {
		t.Fatalf("docker did not come back: %s", msg)
	}
	for i := 0; i < 2; i++ {
		if r := turn(ch, "alice", "after the docker restart"); r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("turn %d after docker restart: %s", i, r)
		}
	}
	assertNothingLeft(t, "after a docker restart")
}

// TestStandbyHostKilledThenReaped: standbys ready, the host SIGKILLed and
// kept down: one reaper run leaves nothing.
func TestStandbyHostKilledThenReaped(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.GraceSeconds = 0
	withConfig(t, c)
	chs := []string{"e2e-standby-kill-a", "e2e-standby-kill-b"}
	for _, ch := range chs {
		channelOn(t, ch)
		if r := turn(ch, "alice", "hello"); r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("turn: %s", r)
		}
	}
	for _, ch := range chs {
		standbyOf(t, ch, 30*time.Second)
	}
	systemctl(t, "kill", "--kill-who=main", "--signal=SIGKILL", layout.HostService)
	systemctl(t, "stop", layout.HostService)
	if len(containers(t)) < len(chs) {
		t.Fatalf("the killed host left %d containers, want its %d standbys: the scenario proves nothing", len(containers(t)), len(chs))
	}
	// A pass leaves containers created within its last second alone
	// (Docker's creation time has one-second resolution).
	time.Sleep(2 * time.Second)
	systemctl(t, "start", layout.ReaperUnit)
	if unitActive(layout.HostService) == "active" {
		t.Errorf("the reaper socket-activated the host")
	}
	assertEmpty(t, "after one run of the reaper")
}

// TestStandbyDiscardedOnConfigChange: a configuration change (with its
// restart) discards every standby; the next turn runs under the new config.
func TestStandbyDiscardedOnConfigChange(t *testing.T) {
	diagnose(t)
	const ch = "e2e-standby-config"
	channelOn(t, ch)
	if r := turn(ch, "alice", "hello"); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	id, old := standbyOf(t, ch, 30*time.Second)
	c := baseConfig()
	c.Prompt = "A changed prompt " + randHex(2)
	withConfig(t, c)
	if _, err := env.docker.ContainerInspect(context.Background(), old.ID); err == nil {
		t.Errorf("the old standby's container %s outlived the config change", old.ID)
	}
	for _, u := range brokerUnits() {
		if strings.Contains(u, id) {
			t.Errorf("the old standby's unit outlived the config change: %s", u)
		}
	}
	if slices.Contains(dirEntries(layout.PolicyDir), id+".json") {
		t.Error("the old standby's policy file outlived the config change")
	}
	r := turn(ch, "alice", "after the change")
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn after the config change: %s", r)
	}
	if got, _ := r.Body["turnId"].(string); got == id {
		t.Error("the old standby served a turn after the config change")
	}
	assertNothingLeft(t, "after the config change")
}

// All hostile probes in one turn: after its 16th refusal the broker answers
// every further request of the turn with the refusal-limit 429, unread, and
// nothing past it reaches an upstream.
func TestRefusalBudgetEndsTheTurn(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.Image = hostileImage
	withConfig(t, c)
	const ch = "e2e-budget-refusals"
	channelOn(t, ch)
	r := turn(ch, "alice", "hostile turn")
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	var report struct {
		Probes map[string]struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
		} `json:"probes"`
	}
	if err := json.Unmarshal([]byte(replyText(r)), &report); err != nil || len(report.Probes) == 0 {
		t.Fatalf("hostile reply is not its report: %v: %s", err, r.Raw)
	}
	var own, budget int
	for name, p := range report.Probes {
		switch {
		case name == "control" || name == "forged_identity_host_tool":
		case strings.Contains(p.Body, "refusal limit reached"):
			if p.Status != http.StatusTooManyRequests {
				t.Errorf("probe %s: refusal limit with status %d, want 429", name, p.Status)
			}
			budget++
		case p.Status >= 400 || p.Status == 0:
			own++
		default:
			t.Errorf("probe %s was accepted (HTTP %d)", name, p.Status)
		}
	}
	t.Logf("%d probes: %d refused for their own reason, %d by the spent refusal budget", len(report.Probes), own, budget)
	if budget == 0 {
		t.Errorf("no probe met the refusal budget (16 a turn) in a turn of %d refused probes", own)
	}
	assertNothingLeft(t, "after the refusal-budget turn")
}

// TestStandbyIdleCostAtTheCap: standby.max (16 by default) channels each
// keep a ready standby; the memory they hold while waiting, and the host's,
// are logged. Switching the channels off leaves nothing.
func TestStandbyIdleCostAtTheCap(t *testing.T) {
	diagnose(t)
	// Earlier scenarios' channels keep their standbys; a restart discards
	// them, so this scenario's channels have the whole cap.
	restartHost(t)
	const n = 16
	var chs []string
	for i := 0; i < n; i++ {
		ch := fmt.Sprintf("e2e-standby-cap-%02d", i)
		chs = append(chs, ch)
		channelOn(t, ch)
	}
	var wg sync.WaitGroup
	for _, ch := range chs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := turn(ch, "alice", "hello"); r.Err != nil || r.Status != http.StatusOK {
				t.Errorf("turn on %s: %s", ch, r)
			}
		}()
	}
	wg.Wait()
	var rss, pss [3]int // worker, shim, broker
	for _, ch := range chs {
		id, c := standbyOf(t, ch, 60*time.Second)
		ins, err := env.docker.ContainerInspect(context.Background(), c.ID)
		if err != nil || ins.State == nil {
			t.Fatalf("inspect %s: %v", c.ID, err)
		}
		svc := "sandbox-broker@" + id + ".service"
		broker, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(systemctl(t, "show", "-p", "MainPID", svc)), "MainPID="))
		for i, pid := range []int{ins.State.Pid, parentPID(ins.State.Pid), broker} {
			r, p := memKiB(pid)
			rss[i] += r
			pss[i] += p
		}
	}
	hostPID, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(systemctl(t, "show", "-p", "MainPID", layout.HostService)), "MainPID="))
	hostRSS, hostPSS := memKiB(hostPID)
	t.Logf("%d ready standbys hold RSS %d KiB (workers %d, shims %d, brokers %d), PSS %d KiB (workers %d, shims %d, brokers %d); host RSS %d KiB, PSS %d KiB",
		n, rss[0]+rss[1]+rss[2], rss[0], rss[1], rss[2], pss[0]+pss[1]+pss[2], pss[0], pss[1], pss[2], hostRSS, hostPSS)
	for _, ch := range chs {
		if out, err := cli("channel", "off", ch); err != nil {
			t.Fatalf("channel off: %v\n%s", err, out)
		}
	}
	assertEmpty(t, "after switching the channels off")
}
