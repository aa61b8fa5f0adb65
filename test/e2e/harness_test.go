// Package e2e holds the end-to-end scenarios: the installed .deb under a real
// systemd 252 and dockerd in a private namespace, driven through the real API
// socket and the real CLI, against a scripted fake model and fake MCP server.
//
// The tests run only with SANDBOX_E2E=1, inside the namespace that
// test/e2e/run.sh (`make e2e`) boots; plain `go test ./...` skips them.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// The switch that enables these tests.
const envSwitch = "SANDBOX_E2E"

const (
	hostSocket     = layout.HostSocket
	configPath     = layout.ConfigFile
	credentialsDir = layout.CredentialsDir
	hostileImage   = "roundtable-e2e-hostile:latest"
	stubbornImage  = "roundtable-e2e-stubborn:latest"
	installation   = "e2e"
)

// env is the run's shared state, set up once by TestMain.
var env struct {
	work       string // E2E_WORK: records, scripts, logs
	bin        string // E2E_BIN: fakemodel, fakemcp
	credential string // the real model credential of this run
	mcpCred    string
	memValue   string // the value the memory scenario stores
	modelPort  int
	mcpPort    int
	modelRec   string
	mcpRec     string
	docker     *client.Client
	procs      []*exec.Cmd
}

func TestMain(m *testing.M) {
	if os.Getenv(envSwitch) != "1" {
		fmt.Printf("e2e tests skipped: set %s=1 (make e2e runs them inside a namespaced systemd with the installed .deb)\n", envSwitch)
		os.Exit(0)
	}
	code := 1
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup failed: %v\n", err)
	} else {
		code = m.Run()
	}
	for _, p := range env.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	os.Exit(code)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func setup() error {
	env.work = os.Getenv("E2E_WORK")
	env.bin = os.Getenv("E2E_BIN")
	if env.work == "" || env.bin == "" {
		return fmt.Errorf("E2E_WORK and E2E_BIN must be set")
	}
	env.credential = "sk-e2e-" + randHex(16)
	env.mcpCred = "mcp-e2e-" + randHex(16)
	env.memValue = "teal-" + randHex(4)
	env.modelRec = filepath.Join(env.work, "model-requests.jsonl")
	env.mcpRec = filepath.Join(env.work, "mcp-requests.jsonl")
	script := filepath.Join(env.work, "model-script.json")
	if err := os.WriteFile(script, modelScript(), 0o644); err != nil {
		return err
	}
	var err error
	if env.modelPort, err = startFake("fakemodel", "-script", script, "-record", env.modelRec); err != nil {
		return err
	}
	if env.mcpPort, err = startFake("fakemcp", "-record", env.mcpRec); err != nil {
		return err
	}
	for name, v := range map[string]string{"model": env.credential, "mcp-search": env.mcpCred} {
		if err := writeCredential(name, v+"\n"); err != nil {
			return err
		}
	}
	if err := writeConfig(baseConfig()); err != nil {
		return err
	}
	env.docker, err = client.NewClientWithOpts(client.WithHost("unix:///run/docker.sock"), client.WithAPIVersionNegotiation())
	return err
}

// heldTurn returns a release for a turn whose text matches a rule with
// "hold": "{{user}}": the fake model answers it only after the release, so
// its container is surely running while the test looks at it. The release
// also runs at cleanup, so a failing test never leaves the turn waiting.
func heldTurn(t *testing.T, text string) (release func()) {
	t.Helper()
	var once sync.Once
	release = func() {
		once.Do(func() {
			u := fmt.Sprintf("http://127.0.0.1:%d/release/%s", env.modelPort, url.PathEscape(text))
			resp, err := http.Post(u, "", nil)
			if err != nil {
				t.Errorf("release held turn: %v", err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				t.Errorf("release held turn: %s", resp.Status)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// startFake starts one of the fake servers and returns its port.
func startFake(name string, args ...string) (int, error) {
	portFile := filepath.Join(env.work, name+".port")
	_ = os.Remove(portFile)
	logf, err := os.Create(filepath.Join(env.work, name+".log"))
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(filepath.Join(env.bin, name), append([]string{"-port-file", portFile}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	env.procs = append(env.procs, cmd)
	for i := 0; i < 100; i++ {
		if data, err := os.ReadFile(portFile); err == nil {
			var port int
			_, err := fmt.Sscan(string(data), &port)
			return port, err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s did not start", name)
}

// The model script: one rule per scenario, keyed by a marker in the guest text.
func modelScript() []byte {
	type call = map[string]any
	rules := []map[string]any{
		// Held until the test releases it (releaseTurn): the container
		// lives exactly as long as the test inspects it.
		{"match": "CRED-CHECK", "replies": []call{{"text": "sealed answer", "hold": "{{user}}"}}},
		{"match": "MEM-SET", "replies": []call{
			{"toolCalls": []call{{"name": "memory_set", "arguments": json.RawMessage(`{"scope":"channel","key":"e2e-code","text":"` + env.memValue + `"}`)}}},
			{"text": "stored: {{tool}}"},
		}},
		{"match": "MEM-GET", "replies": []call{
			{"toolCalls": []call{{"name": "memory_get", "arguments": json.RawMessage(`{"scope":"channel","key":"e2e-code"}`)}}},
			{"text": "recalled: {{tool}}"},
		}},
		{"match": "MCP-CALL", "replies": []call{
			{"toolCalls": []call{{"name": "mcp_0_lookup", "arguments": json.RawMessage(`{"q":"{{user}}"}`)}}},
			{"text": "mcp said: {{tool}}"},
		}},
		{"match": "e2efetch", "replies": []call{
			{"toolCalls": []call{{"name": "host_fetch", "arguments": json.RawMessage(`{"url":"{{user}}"}`)}}},
			{"text": "fetched: {{tool}}"},
		}},
		// A delegated job's research turn: fetch the URL on the task's last
		// line, report what came back.
		{"match": "E2E-DELEGATE", "replies": []call{
			{"toolCalls": []call{{"name": "host_fetch", "arguments": json.RawMessage(`{"url":"{{lastline}}"}`)}}},
			{"text": "report: {{tool}}"},
		}},
		{"match": "SLOW", "replies": []call{{"text": "slow answer", "delayMs": 20000}}},
		{"match": "LEAST-CRED", "replies": []call{{"text": "least answer", "hold": "{{user}}"}}},
		{"match": "RUNSC-HOLD", "replies": []call{{"text": "echo: {{user}}", "hold": "{{user}}"}}},
		{"match": "OVERLAP", "replies": []call{{"text": "overlap {{user}}", "delayMs": 1500}}},
		{"match": "", "replies": []call{{"text": "echo: {{user}}"}}},
	}
	b, _ := json.MarshalIndent(map[string]any{"rules": rules}, "", " ")
	return b
}

// cfg is what a scenario may change in the installed config.
type cfg struct {
	Image           string
	DeadlineSeconds int
	GraceSeconds    int
	ModelPort       int
	MCPPort         int
	FetchAllow      string // egress.allow entry ("127.0.0.1:port") or ""
	// FetchAllowMore: further egress.allow entries, after FetchAllow.
	FetchAllowMore []string
	// StandbyOff writes standby.enabled: false; StandbyMaxAge, when set,
	// standby.maxAgeSeconds; Prompt, when set, replaces the prompt.
	StandbyOff    bool
	StandbyMaxAge int
	Prompt        string
	// Runtime, when set, writes runtime: (the OCI runtime of every container).
	Runtime string
	// RunsProject, when set, declares the runs project "demo" at this path.
	RunsProject string
	// RunStandby declares the run shape "no project, no setup" under
	// runs.standby (tail_runstandby_test.go); RunStandbyAge, when set, is
	// runs.standby.maxAgeSeconds.
	RunStandby    bool
	RunStandbyAge int
	// RichPort, when set, enables rich channels with the fake Anthropic
	// upstream on this loopback port, profile "e2e" and rich.idleSeconds
	// RichIdle (tail_rich_test.go).
	RichPort int
	RichIdle int
	// RichSkills, when set, is rich.skillsDir (tail_rich_media_test.go).
	RichSkills string
	// EgressCredentials, when set, is egress.credentials (YAML flow list)
	// and TestRootCAFile egress.testRootCAFile (tail_credegress_test.go).
	EgressCredentials string
	TestRootCAFile    string
	// SessionIdle, when set, is sessions.idleSeconds and SessionWorkMb
	// sessions.workMb (tail_sessions_test.go).
	SessionIdle   int
	SessionWorkMb int
}

func baseConfig() cfg {
	return cfg{Image: layout.DefaultImage, DeadlineSeconds: 30, GraceSeconds: 60, ModelPort: env.modelPort, MCPPort: env.mcpPort}
}

var configTmpl = template.Must(template.New("c").Parse(`# written by the e2e harness
model:
  url: http://127.0.0.1:{{.ModelPort}}/v1/chat/completions
  name: e2e-model
  maxTokens: 1024
  allowInsecureLoopbackHTTP: true
credentials:
  default: model
  rules: []
initialChannels: []
api:
  clients:
    uids: [0]
    groups: [sandbox-clients]
  admins:
    uids: [0]
    groups: []
turnDeadlineSeconds: {{.DeadlineSeconds}}
limits:
  memoryMb: 256
  cpus: 1
  pids: 64
  tmpfsMb: 16
queue:
  depth: 8
  globalConcurrency: 0
timeZone: UTC
tools:
  - name: clock
    description: Read the current UTC time
    parameters: '{"type":"object","properties":{},"additionalProperties":false}'
    kind: builtin
    builtin: clock
  - name: whoami
    description: Echo nothing; the server records the identity headers
    parameters: '{"type":"object"}'
    kind: http
    url: http://127.0.0.1:{{.MCPPort}}/whoami
    allowInsecureLoopbackHTTP: true
  - name: fetch
    description: Fetch a public web page as text
    parameters: '{"type":"object","properties":{"url":{"type":"string"}},"required":["url"],"additionalProperties":false}'
    kind: fetch
    timeoutSeconds: 10
egress:
  allow: [{{if .FetchAllow}}"{{.FetchAllow}}"{{end}}{{range .FetchAllowMore}}, "{{.}}"{{end}}]
{{- if .EgressCredentials}}
  credentials: {{.EgressCredentials}}
{{- end}}
{{- if .TestRootCAFile}}
  testRootCAFile: {{.TestRootCAFile}}
{{- end}}
mcp:
  - name: search
    url: http://127.0.0.1:{{.MCPPort}}/mcp
    credential: mcp-search
    session: stateless
    allowInsecureLoopbackHTTP: true
    tools:
      - name: lookup
        description: Look up a term
        parameters: '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'
prechecks:
  enabled: true
  timeoutSeconds: 8
  grants:
    - channel: e2e-precheck
      server: search
      tools: [lookup]
image: {{.Image}}
installation: ` + installation + `
reaper:
  graceSeconds: {{.GraceSeconds}}
delegation:
  enabled: true
  fetchTool: fetch
  searchTool: whoami
  timeoutSeconds: 60
logLevel: debug
{{- if or .StandbyOff .StandbyMaxAge}}
standby:
{{- if .StandbyOff}}
  enabled: false
{{- end}}
{{- if .StandbyMaxAge}}
  maxAgeSeconds: {{.StandbyMaxAge}}
{{- end}}
{{- end}}
{{- if .Prompt}}
prompt: {{printf "%q" .Prompt}}
{{- end}}
{{- if .Runtime}}
runtime: {{.Runtime}}
{{- end}}
runs:
  memoryMb: 512
  tmpfsMb: 64
  outputMb: 32
  approvalTimeoutSeconds: 120
{{- if .RunsProject}}
  projects:
    - name: demo
      path: {{.RunsProject}}
{{- end}}
{{- if .RunStandby}}
  standby:
{{- if .RunStandbyAge}}
    maxAgeSeconds: {{.RunStandbyAge}}
{{- end}}
    shapes:
      - setup: false
{{- end}}
{{- if or .SessionIdle .SessionWorkMb}}
sessions:
{{- if .SessionIdle}}
  idleSeconds: {{.SessionIdle}}
{{- end}}
{{- if .SessionWorkMb}}
  workMb: {{.SessionWorkMb}}
{{- end}}
{{- end}}
{{- if .RichPort}}
rich:
  enabled: true
  anthropicUrl: http://127.0.0.1:{{.RichPort}}
  allowInsecureLoopbackHTTP: true
  idleSeconds: {{.RichIdle}}
  startTimeoutSeconds: 60
  turnTimeoutSeconds: 120
{{- if .RichSkills}}
  skillsDir: {{.RichSkills}}
{{- end}}
profiles:
  - name: e2e
    model: claude-e2e
    maxOutputTokens: 4096
    thinking: low
    tools: [clock]
{{- end}}
`))

func writeConfig(c cfg) error {
	var b bytes.Buffer
	if err := configTmpl.Execute(&b, c); err != nil {
		return err
	}
	tmp := configPath + ".e2e-tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o640); err != nil {
		return err
	}
	// root:_sandbox 0640, as the package ships it.
	if out, err := exec.Command("chown", "root:_sandbox", tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("chown config: %v: %s", err, out)
	}
	return os.Rename(tmp, configPath)
}

// withConfig installs c and restarts the host; the base config comes back
// (with a restart) when the test ends.
func withConfig(t *testing.T, c cfg) {
	t.Helper()
	if err := writeConfig(c); err != nil {
		t.Fatalf("write config: %v", err)
	}
	restartHost(t)
	t.Cleanup(func() {
		if err := writeConfig(baseConfig()); err != nil {
			t.Errorf("restore config: %v", err)
		}
		_, _ = run("systemctl", "reset-failed", layout.HostService)
		if out, err := run("systemctl", "restart", layout.HostService); err != nil {
			t.Errorf("restart host after restoring config: %v\n%s", err, out)
		}
	})
}

// restartHost restarts the host. The scenarios restart it more often than
// systemd's default start limit (5 in 10 s) allows, so the counter is reset.
func restartHost(t *testing.T) {
	t.Helper()
	_, _ = run("systemctl", "reset-failed", layout.HostService)
	systemctl(t, "restart", layout.HostService)
}

// run runs a command and returns its combined output.
// writeCredential writes a credential file as an operator should
// (docs/operating.md, "Credentials"): root:_sandbox-credset 0640, so the
// copier of sandbox-credset@<turn>.service may read it, and atomically
// (a temporary file in the same directory, renamed over the name).
func writeCredential(name, value string) error {
	g, err := user.LookupGroup(layout.CredsetUser)
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(credentialsDir, ".e2e-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(value); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(f.Chown(0, gid), f.Chmod(0o640), f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(credentialsDir, name))
}

func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

func systemctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run("systemctl", args...)
	if err != nil {
		t.Fatalf("systemctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func unitActive(unit string) string {
	out, _ := run("systemctl", "is-active", unit)
	return strings.TrimSpace(out)
}

// diagnose prints what a failed scenario needs for diagnosis.
func diagnose(t *testing.T) {
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, _ := run("sh", "-c", "journalctl -u sandbox-host -u 'sandbox-broker@*' -u sandbox-reaper --no-pager --since '"+since+"' | tail -200")
		t.Logf("--- journal (host, brokers, reaper) ---\n%s", out)
		out, _ = run("docker", "ps", "-a", "--no-trunc")
		t.Logf("--- docker ps -a ---\n%s", out)
		out, _ = run("sh", "-c", "systemctl list-units --all --no-pager 'sandbox-*'; ls -la /run/roundtable-sandbox /run/roundtable-sandbox/turns /run/roundtable-sandbox/policies 2>&1")
		t.Logf("--- units and runtime files ---\n%s", out)
	})
}

// apiClient talks HTTP to the host's API socket as root (an admin).
var apiClient = &http.Client{
	Timeout: 3 * time.Minute,
	Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", hostSocket)
		},
		DisableKeepAlives: true,
	},
}

type apiResult struct {
	Status int
	Body   map[string]any
	Raw    string
	Err    error
}

func api(method, path string, body any) apiResult {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://host"+path, rd)
	if err != nil {
		return apiResult{Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := apiClient.Do(req)
	if err != nil {
		return apiResult{Err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	r := apiResult{Status: resp.StatusCode, Raw: string(raw)}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

func (r apiResult) String() string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	return fmt.Sprintf("HTTP %d %s", r.Status, strings.TrimSpace(r.Raw))
}

// turn runs one turn through the API socket.
func turn(channel, speaker, text string) apiResult {
	return api(http.MethodPost, "/v1/channels/"+pathEscape(channel)+"/turns", map[string]any{
		"speaker": map[string]string{"id": speaker, "name": "Guest " + speaker, "principalId": "principal-" + speaker},
		"text":    text,
	})
}

// pathEscape escapes a channel key as one path segment.
func pathEscape(s string) string { return url.PathEscape(s) }

// replyText extracts the reply text of a successful turn.
func replyText(r apiResult) string {
	for _, k := range []string{"text", "reply"} {
		if s, ok := r.Body[k].(string); ok {
			return s
		}
		if m, ok := r.Body[k].(map[string]any); ok {
			if s, ok := m["text"].(string); ok {
				return s
			}
		}
	}
	return ""
}

// cli runs the real sandbox-host CLI.
func cli(args ...string) (string, error) { return run("/usr/bin/sandbox-host", args...) }

func channelOn(t *testing.T, channel string) {
	t.Helper()
	if out, err := cli("channel", "on", channel); err != nil {
		t.Fatalf("sandbox-host channel on %s: %v\n%s", channel, err, out)
	}
}

// containers lists this installation's turn containers (all states).
func containers(t *testing.T) []container.Summary {
	t.Helper()
	list, err := env.docker.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", layout.LabelInstallation))})
	if err != nil {
		t.Fatalf("docker list: %v", err)
	}
	return list
}

// waitContainer waits for a running container of the channel that is not
// a standby waiting for a turn.
func waitContainer(t *testing.T, channel string, within time.Duration) container.Summary {
	t.Helper()
	prefix := "/" + ids.ContainerPrefix + ids.ChannelHash(channel)[:16] + "-"
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		standbys := hostStandbys(t)
		for _, c := range containers(t) {
			if _, waiting := standbys[c.Labels[layout.LabelTurn]]; waiting {
				continue
			}
			for _, n := range c.Names {
				if strings.HasPrefix(n, prefix) && c.State == "running" {
					return c
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no running container for channel %q within %s", channel, within)
	return container.Summary{}
}

// brokerUnits lists loaded sandbox-broker@ units (any state).
func brokerUnits() []string {
	out, _ := run("systemctl", "list-units", "--all", "--no-legend", "--plain", "--no-pager", "sandbox-broker@*")
	var units []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			units = append(units, strings.Join(f[:min(4, len(f))], " "))
		}
	}
	return units
}

func dirEntries(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// hostStandbys is what a running host lists as standbys not bound to a
// turn (GET /v1/turns entries with a standby state): turn id -> channel tag.
// A host that is not running has none, and is not socket-activated here.
func hostStandbys(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	if unitActive(layout.HostService) != "active" {
		return out
	}
	r := api(http.MethodGet, "/v1/turns", nil)
	if r.Err != nil || r.Status != http.StatusOK {
		t.Logf("GET /v1/turns: %s", r)
		return out
	}
	var body struct {
		Turns []struct {
			ID         string `json:"id"`
			ChannelTag string `json:"channelTag"`
			Standby    string `json:"standby"`
		} `json:"turns"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &body); err != nil {
		t.Fatalf("GET /v1/turns: %v", err)
	}
	for _, x := range body.Turns {
		if x.Standby != "" {
			out[x.ID] = x.ChannelTag
		}
	}
	return out
}

// leftovers lists containers, broker units, turn directories and policy
// files that do not belong to a standby the running host lists. A
// channel's standby (at most one per channel, its container labelled as a
// standby) is what a sandbox channel is expected to keep after a turn.
func leftovers(t *testing.T) (conts, units, dirs, pols []string) {
	t.Helper()
	standbys := hostStandbys(t)
	perChannel := map[string]int{}
	for _, c := range containers(t) {
		turn := c.Labels[layout.LabelTurn]
		if tag, ok := standbys[turn]; ok && c.Labels[layout.LabelStandby] != "" && c.Labels[layout.LabelChannel] == tag {
			if perChannel[tag]++; perChannel[tag] == 1 {
				continue
			}
		}
		conts = append(conts, strings.Join(c.Names, ",")+" ("+c.State+")")
	}
	for _, u := range brokerUnits() {
		keep := false
		for id := range standbys {
			keep = keep || strings.Contains(u, "sandbox-broker@"+id+".")
		}
		if !keep {
			units = append(units, u)
		}
	}
	for _, d := range dirEntries(layout.RunRoot) {
		if _, ok := standbys[d]; !ok {
			dirs = append(dirs, d)
		}
	}
	for _, p := range dirEntries(layout.PolicyDir) {
		if _, ok := standbys[strings.TrimSuffix(p, ".json")]; !ok {
			pols = append(pols, p)
		}
	}
	return conts, units, dirs, pols
}

// assertNothingLeft checks no container, broker unit, turn directory or
// policy file remains beyond the standbys the running host lists (see
// leftovers).
func assertNothingLeft(t *testing.T, what string) {
	t.Helper()
	// The host answers a successful turn before its cleanup: wait for it.
	var conts, units, dirs, pols []string
	eventually(15*time.Second, func() string {
		conts, units, dirs, pols = leftovers(t)
		if len(conts)+len(units)+len(dirs)+len(pols) != 0 {
			return "left"
		}
		return ""
	})
	if len(conts) != 0 {
		t.Errorf("%s: containers left: %v", what, conts)
	}
	if len(units) != 0 {
		t.Errorf("%s: broker units left: %v%s", what, units, hostCleanupFailures())
	}
	if len(dirs) != 0 {
		t.Errorf("%s: turn directories left in %s: %v", what, layout.RunRoot, dirs)
	}
	if len(pols) != 0 {
		t.Errorf("%s: policy files left in %s: %v", what, layout.PolicyDir, pols)
	}
}

// assertEmpty checks that nothing at all is left: no standby either.
func assertEmpty(t *testing.T, what string) {
	t.Helper()
	count := func() int {
		return len(containers(t)) + len(brokerUnits()) + len(dirEntries(layout.RunRoot)) + len(dirEntries(layout.PolicyDir))
	}
	eventually(15*time.Second, func() string {
		if count() != 0 {
			return "left"
		}
		return ""
	})
	if count() != 0 {
		var names []string
		for _, x := range containers(t) {
			names = append(names, strings.Join(x.Names, ",")+" ("+x.State+")")
		}
		t.Errorf("%s: left: containers %v, units %v, turn dirs %v, policies %v%s", what, names, brokerUnits(),
			dirEntries(layout.RunRoot), dirEntries(layout.PolicyDir), hostCleanupFailures())
	}
}

// hostCleanupFailures is the host's recent journal lines that say a unit
// stop or a cleanup failed: when something is left, they name the cause
// (a broker stop that ran out of time under load is a product defect, not
// this test's).
func hostCleanupFailures() string {
	out, _ := run("journalctl", "-u", layout.HostService, "--since", "-15min", "--no-pager", "-o", "cat")
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "stop failed") || strings.Contains(l, "cleanup failed") || strings.Contains(l, "left to the reaper") || strings.Contains(l, "left to sandbox-reaper") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "\n(the host's journal has no unit stop or cleanup failure in the last 15 min)"
	}
	if len(lines) > 20 {
		lines = append(lines[:20], fmt.Sprintf("... and %d more", len(lines)-20))
	}
	return "\nthe host's journal says:\n" + strings.Join(lines, "\n")
}

// eventually polls f until it returns "" or the time is up; returns the last complaint.
func eventually(within time.Duration, f func() string) string {
	deadline := time.Now().Add(within)
	for {
		msg := f()
		if msg == "" || time.Now().After(deadline) {
			return msg
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// modelRecord is one request the fake model received.
type modelRecord struct {
	Start  time.Time           `json:"start"`
	End    time.Time           `json:"end"`
	Path   string              `json:"path"`
	Header map[string][]string `json:"header"`
	Body   json.RawMessage     `json:"body"`
	Raw    string              `json:"-"`
}

func readRecords(path string) []modelRecord {
	data, _ := os.ReadFile(path)
	var recs []modelRecord
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r modelRecord
		if json.Unmarshal(line, &r) == nil {
			r.Raw = string(line)
			recs = append(recs, r)
		}
	}
	return recs
}

// recordsWith returns the model requests whose raw record contains marker.
func recordsWith(path, marker string) []modelRecord {
	var out []modelRecord
	for _, r := range readRecords(path) {
		if strings.Contains(r.Raw, marker) {
			out = append(out, r)
		}
	}
	return out
}

// journal returns journal lines for the given journalctl arguments.
func journal(args ...string) string {
	out, _ := run("journalctl", append([]string{"--no-pager"}, args...)...)
	return out
}

// recordsForUser returns the model requests whose last user message
// contains marker (history of earlier turns repeats older markers).
func recordsForUser(path, marker string) []modelRecord {
	var out []modelRecord
	for _, r := range readRecords(path) {
		var body struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if json.Unmarshal(r.Body, &body) != nil {
			continue
		}
		last := ""
		for _, m := range body.Messages {
			if m.Role == "user" {
				last = string(m.Content)
			}
		}
		if strings.Contains(last, marker) {
			out = append(out, r)
		}
	}
	return out
}
