package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/host"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/mcp"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

const testYAML = `model:
  url: https://api.example.com/v1/chat/completions
  name: m1
credentials:
  default: model
mcp:
  - name: search
    url: https://mcp.example.com/mcp
    credential: mcp-key
    tools:
      - name: find
        description: Find
        parameters: '{"type":"object"}'
`

type fakeProbe struct {
	pingErr     error
	image       bool
	runtimes    map[string][]string
	runtimesErr error
	containers  []container.Info
}

func (p fakeProbe) List(context.Context, string) ([]container.Info, error) { return p.containers, nil }

func (p fakeProbe) Ping(context.Context) error                         { return p.pingErr }
func (p fakeProbe) ImagePresent(context.Context, string) (bool, error) { return p.image, nil }
func (p fakeProbe) Close() error                                       { return nil }
func (p fakeProbe) Runtimes(context.Context) (map[string][]string, error) {
	return p.runtimes, p.runtimesErr
}

// fakeMachine: a config whose directories pass, units and polkit present.
func fakeMachine(t *testing.T) (string, doctorDeps) {
	dir, err := os.MkdirTemp("/tmp", "sbd") // short: runRoot's socket path must stay within 100
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfgPath := filepath.Join(dir, "sandbox.yaml")
	y := testYAML + "runRoot: " + dir + "/run\nworkspaceRoot: " + dir + "/ws\npolicyDir: " + dir + "/pol\nstateFile: " + dir + "/state/channels.json\nlockFile: " + dir + "/host.lock\n"
	os.WriteFile(cfgPath, []byte(y), 0o600)
	for _, d := range []string{"run", "ws", "pol", "state", "units", "creds"} {
		os.Mkdir(filepath.Join(dir, d), 0o700)
	}
	// As postinst leaves them: the directory 0750, files 0640, group the
	// copier's (the test's own group stands in for _sandbox-credset).
	os.Chmod(filepath.Join(dir, "creds"), 0o750)
	os.WriteFile(filepath.Join(dir, "creds", "model"), []byte("sk-secret-value\n"), 0o640)
	os.WriteFile(filepath.Join(dir, "creds", "mcp-key"), []byte("mcp-secret-value\n"), 0o640)
	for _, u := range []string{"sandbox-host.socket", "sandbox-host.service", "sandbox-broker@.socket", "sandbox-broker@.service", "sandbox-credset@.service", "sandbox-reaper.service", "sandbox-reaper.timer", "sandbox-nats.service"} {
		os.WriteFile(filepath.Join(dir, "units", u), nil, 0o644)
	}
	rule := filepath.Join(dir, "units", "60-roundtable-sandbox.rules")
	os.WriteFile(rule, nil, 0o644)
	d := realDoctorDeps()
	d.lookupUser = func(string) (int, int, error) { return os.Getuid(), os.Getgid(), nil }
	if os.Getuid() == 0 { // stand-in service user
		d.lookupUser = func(string) (int, int, error) { return 4242, 4242, nil }
		for _, s := range []string{"run", "ws", "pol", "state"} {
			os.Chown(filepath.Join(dir, s), 4242, 4242)
		}
	}
	polGID := os.Getgid()
	if st, err := os.Stat(filepath.Join(dir, "pol")); err == nil {
		polGID = int(st.Sys().(*syscall.Stat_t).Gid)
	}
	credGID := os.Getgid()
	if st, err := os.Stat(filepath.Join(dir, "creds")); err == nil {
		credGID = int(st.Sys().(*syscall.Stat_t).Gid)
	}
	d.lookupGroup = func(name string) (int, error) {
		switch name {
		case "_sandbox-broker":
			return polGID, nil
		case layout.CredsetUser:
			return credGID, nil
		}
		return 4321, nil
	}
	d.credOwner = os.Getuid()
	d.docker = func(string) (dockerProbe, error) { return fakeProbe{image: true}, nil }
	d.toolbox, d.fileSHA256 = fakeToolbox(toolbox.Image{WorkerSHA256: "aa11"}, nil), fakeSHA("aa11", nil) // toolbox_test.go
	d.credDir = filepath.Join(dir, "creds")
	d.unitState = fakeUnitStates(nil)
	d.unitDirs = []string{filepath.Join(dir, "units")}
	d.polkitRules = []string{rule}
	d.resolvConf = filepath.Join(dir, "resolv.conf")
	os.WriteFile(d.resolvConf, []byte("nameserver 127.0.0.53\n"), 0o644)
	d.listTools = func(ctx context.Context, s policy.MCPServer, cred string) ([]mcp.Tool, error) {
		if cred != "mcp-secret-value" {
			return nil, errors.New("unauthorized")
		}
		return []mcp.Tool{{Name: "find", Description: "Find", InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil
	}
	return cfgPath, d
}

func credGroupOf(t *testing.T, dir string) int {
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Gid)
}

func statusOf(rep Report, name string) (Check, bool) {
	for _, c := range rep.Checks {
		if c.Name == name && c.Status != StatusOK {
			return c, true
		}
	}
	for _, c := range rep.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func TestDoctorAllGood(t *testing.T) {
	path, d := fakeMachine(t)
	rep := runDoctor(context.Background(), path, d)
	if !rep.OK {
		t.Fatalf("doctor failed: %+v", rep.Checks)
	}
	out, _ := json.Marshal(rep)
	if strings.Contains(string(out), "secret-value") {
		t.Error("doctor report contains a credential value")
	}
}

func TestDoctorFailuresCarryRemedies(t *testing.T) {
	tests := []struct {
		name, check, remedy string
		mutate              func(path string, d *doctorDeps)
	}{
		{"image missing", "image", "docker load -i /usr/lib/roundtable-sandbox/worker-image.tar", func(_ string, d *doctorDeps) {
			d.docker = func(string) (dockerProbe, error) { return fakeProbe{image: false}, nil }
		}},
		{"docker down", "docker", "systemctl start docker", func(_ string, d *doctorDeps) {
			d.docker = func(string) (dockerProbe, error) { return fakeProbe{pingErr: errors.New("refused")}, nil }
		}},
		{"credential missing", "credentials", "install -m 0640 -o root -g _sandbox-credset", func(_ string, d *doctorDeps) {
			os.Remove(filepath.Join(d.credDir, "model"))
		}},
		{"egress credential missing", "credentials", "install -m 0640 -o root -g _sandbox-credset", func(path string, d *doctorDeps) {
			b, _ := os.ReadFile(path)
			os.WriteFile(path, append(b, []byte("egress:\n  credentials:\n    - {name: git, host: git.example.com, port: 443, credential: git-token, header: Authorization, format: \"Bearer {}\", clients: [1000]}\n")...), 0o600)
		}},
		// Issue 35: the copier reads credentials through its group.
		{"credential as before issue 35 (0600)", "credentials", "chown root:_sandbox-credset", func(_ string, d *doctorDeps) {
			os.Chmod(filepath.Join(d.credDir, "model"), 0o600)
		}},
		{"credential readable by others", "credentials", "chmod go=", func(_ string, d *doctorDeps) {
			os.Chmod(filepath.Join(d.credDir, "model"), 0o644)
		}},
		{"credential writable by the group", "credentials", "chmod go=", func(_ string, d *doctorDeps) {
			os.Chmod(filepath.Join(d.credDir, "model"), 0o660)
		}},
		{"credential of another group", "credentials", "chown root:_sandbox-credset", func(_ string, d *doctorDeps) {
			gid := credGroupOf(t, d.credDir) + 1
			d.lookupGroup = func(name string) (int, error) {
				if name == layout.CredsetUser {
					return gid, nil
				}
				return 4321, nil
			}
		}},
		{"credentials directory as before issue 35 (0700)", "credentials", "chmod 0750", func(_ string, d *doctorDeps) {
			os.Chmod(d.credDir, 0o700)
		}},
		{"no copier group", "credentials", "reinstall", func(_ string, d *doctorDeps) {
			lg := d.lookupGroup
			d.lookupGroup = func(name string) (int, error) {
				if name == layout.CredsetUser {
					return 0, errors.New("unknown group")
				}
				return lg(name)
			}
		}},
		{"polkit missing", "polkit", "reinstall", func(_ string, d *doctorDeps) { d.polkitRules = []string{"/nonexistent"} }},
		{"unit missing", "units", "daemon-reload", func(_ string, d *doctorDeps) {
			os.Remove(filepath.Join(d.unitDirs[0], "sandbox-broker@.socket"))
		}},
		{"mcp tool missing", "mcp search", "update mcp.search.tools", func(_ string, d *doctorDeps) {
			d.listTools = func(context.Context, policy.MCPServer, string) ([]mcp.Tool, error) {
				return []mcp.Tool{{Name: "other", Description: "x", InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil
			}
		}},
		{"bad config", "config", "fix the named key", func(path string, d *doctorDeps) {
			os.WriteFile(path, []byte(testYAML+"nonsense: 1\n"), 0o600)
		}},
		{"no config", "config", "reinstall", func(path string, d *doctorDeps) { os.Remove(path) }},
		{"policy dir group", "policy-group", "systemd-tmpfiles", func(path string, d *doctorDeps) {
			d.lookupGroup = func(string) (int, error) { return 4343, nil }
		}},
		{"open directory", "directories", "systemd-tmpfiles", func(path string, d *doctorDeps) {
			os.Chmod(filepath.Join(filepath.Dir(path), "ws"), 0o755)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, d := fakeMachine(t)
			tt.mutate(path, &d)
			rep := runDoctor(context.Background(), path, d)
			c, ok := statusOf(rep, tt.check)
			if rep.OK || !ok || c.Status != StatusFail || !strings.Contains(c.Remedy, tt.remedy) {
				t.Errorf("check %s = %+v (ok=%v), want fail with remedy containing %q", tt.check, c, rep.OK, tt.remedy)
			}
		})
	}
}

func TestDoctorWithoutCredentialAccessSkips(t *testing.T) {
	path, d := fakeMachine(t)
	d.readDir = func(string) ([]fs.DirEntry, error) { return nil, fs.ErrPermission }
	rep := runDoctor(context.Background(), path, d)
	c, _ := statusOf(rep, "credentials")
	if c.Status != StatusSkip || !strings.Contains(c.Remedy, "sudo sandbox-host doctor") {
		t.Errorf("credentials = %+v", c)
	}
	if m, _ := statusOf(rep, "mcp search"); m.Status != StatusSkip {
		t.Errorf("mcp = %+v, want skip", m)
	}
}

// fakes for an in-process host driven by the CLI.
type fakeContainers struct{}

func (fakeContainers) Create(ctx context.Context, s host.ContainerSpec) (string, error) {
	return s.Name, nil
}
func (fakeContainers) Run(ctx context.Context, id string, stdin []byte, max int64, ready func(context.Context) error, stderr io.Writer) (host.RunResult, error) {
	if ready != nil {
		if err := ready(ctx); err != nil {
			return host.RunResult{ExitCode: -1}, err
		}
	}
	return host.RunResult{Stdout: []byte(`{"ok":true,"text":"pong"}`)}, nil
}
func (fakeContainers) Kill(context.Context, string) error   { return nil }
func (fakeContainers) Remove(context.Context, string) error { return nil }

type fakeUnits struct{}

func (fakeUnits) StartBroker(context.Context, string) error        { return nil }
func (fakeUnits) StopBroker(context.Context, string) error         { return nil }
func (fakeUnits) StartBrokerService(context.Context, string) error { return nil }

func TestClientCommands(t *testing.T) {
	dir, _ := os.MkdirTemp("/tmp", "sbcli")
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "sandbox.yaml")
	os.WriteFile(cfgPath, []byte(testYAML), 0o600)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RunRoot, cfg.WorkspaceRoot, cfg.PolicyDir = filepath.Join(dir, "run"), filepath.Join(dir, "ws"), filepath.Join(dir, "pol")
	cfg.StateFile = filepath.Join(dir, "state", "channels.json")
	if err := cfg.EnsureDirs(); err != nil {
		t.Fatal(err)
	}
	st, _, err := host.LoadState(cfg.StateFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Options{Config: cfg, State: st, Containers: fakeContainers{}, Units: fakeUnits{}, PeerGroups: func(int) []int { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "host.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.Run(ctx, ln) }()
	defer func() { cancel(); <-done }()

	run := func(stdin string, args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"--socket", sock}, args...), Inputs{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	if code, out := run("", "turn", "g:1", "--speaker-id", "s", "--text", "ping"); code == 0 || !strings.Contains(out, "not in sandbox mode") {
		t.Errorf("turn in an off channel: %d %q", code, out)
	}
	if code, out := run("", "channel", "on", "g:1"); code != 0 || !strings.Contains(out, "mode on") {
		t.Errorf("channel on: %d %q", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"channel", "on", "g:2", "--rich"}, "--rich needs --profile"},
		{[]string{"channel", "on", "g:2", "--profile", "p"}, "--profile is for --rich"},
		{[]string{"channel", "on", "g:2", "--rich", "--profile", "p"}, "rich channels are disabled"},
	} {
		if code, out := run("", c.args...); code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v: %d %q, want %q", c.args, code, out, c.want)
		}
	}
	// --attach reaches the API, which refuses attachments on a sealed channel;
	// a malformed one is refused before any request.
	if code, out := run("", "turn", "g:1", "--speaker-id", "s", "--text", "x", "--attach", "https://e.com/a.png"); code == 0 || !strings.Contains(out, "attachments need a rich channel") {
		t.Errorf("turn --attach on a sealed channel: %d %q", code, out)
	}
	if code, out := run("", "turn", "g:1", "--speaker-id", "s", "--text", "x", "--attach", "file:///etc/passwd,p"); code == 0 || !strings.Contains(out, "http or https") {
		t.Errorf("turn --attach file URL: %d %q", code, out)
	}
	if code, out := run("ping from stdin\n", "turn", "g:1", "--speaker-id", "s"); code != 0 || strings.TrimSpace(out) != "pong" {
		t.Errorf("turn: %d %q", code, out)
	}
	code, out := run("", "--json", "turn", "g:1", "--speaker-id", "s", "--text", "x")
	var reply struct {
		OK     bool   `json:"ok"`
		TurnID string `json:"turnId"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &reply) != nil || !reply.OK || len(reply.TurnID) != 32 {
		t.Errorf("turn --json: %d %q", code, out)
	}
	if code, out := run("", "channel", "list"); code != 0 || !strings.Contains(out, `"g:1"`) {
		t.Errorf("channel list: %d %q", code, out)
	}
	if code, out := run("", "--json", "channel", "status", "g:1"); code != 0 || !strings.Contains(out, `"mode": "on"`) {
		t.Errorf("channel status --json: %d %q", code, out)
	}
	if code, out := run("", "channel", "cancel", "g:1"); code != 0 || !strings.Contains(out, "no running turn") {
		t.Errorf("channel cancel: %d %q", code, out)
	}
	if code, out := run("", "--json", "channel", "off", "nope\x01"); code == 0 || !strings.Contains(out, `"ok": false`) && !strings.Contains(out, `"ok":false`) {
		t.Errorf("bad channel --json: %d %q", code, out)
	}
	_ = time.Second
}

// runCLI runs the command line and returns its status, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, Inputs{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

// TestErrorPrefixOnce: an error of the host API is printed with the
// command's prefix exactly once, as text and as JSON.
func TestErrorPrefixOnce(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error":"forbidden"}`))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	code, _, stderr := runCLI("--socket", sock, "channel", "on", "g:1")
	if code != 1 || stderr != "sandbox-host: 403: forbidden\n" {
		t.Errorf("text: status %d, stderr %q, want 1 and %q", code, stderr, "sandbox-host: 403: forbidden\n")
	}
	code, stdout, _ := runCLI("--socket", sock, "--json", "channel", "status", "g:1")
	var got struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if code != 1 || json.Unmarshal([]byte(stdout), &got) != nil || got.OK || got.Error != "sandbox-host: 403: forbidden" {
		t.Errorf("json: status %d, stdout %q", code, stdout)
	}
	// An error from the command itself gets the prefix too.
	if code, _, stderr := runCLI("--socket", sock, "turn", "g:1"); code != 1 || !strings.HasPrefix(stderr, "sandbox-host: ") || strings.Count(stderr, "sandbox-host:") != 1 {
		t.Errorf("flag error: status %d, stderr %q", code, stderr)
	}
}

// TestCommandsTimeOut: against a socket that accepts but never answers (a
// host that cannot start, behind systemd's socket), every command gives up
// at its bound with a message naming it.
func TestCommandsTimeOut(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	ln, err := net.Listen("unix", sock) // never accepts: connections wait in the backlog
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "300ms", "channel", "status", "g:1"}, "no answer within 300ms"},
		{[]string{"--timeout", "300ms", "channel", "list"}, "no answer within 300ms"},
		{[]string{"--timeout", "10s", "--turn-timeout", "400ms", "turn", "g:1", "--speaker-id", "s", "--text", "hi"}, "no answer within 400ms"},
	}
	for _, tt := range tests {
		start := time.Now()
		code, _, stderr := runCLI(append([]string{"--socket", sock}, tt.args...)...)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%v took %v", tt.args, took)
		}
		if code != 1 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "systemctl status sandbox-host") {
			t.Errorf("%v: status %d, stderr %q, want %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestServeBadConfig: serve refuses an unknown key before anything else,
// names it as written, and exits with ExitConfig (the unit does not restart
// on it).
func TestServeBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandbox.yaml")
	os.WriteFile(path, []byte(testYAML+"queue:\n  maxWaitingTurns: 3\n"), 0o600)
	code, _, stderr := runCLI("--config", path, "serve", "--listen", filepath.Join(t.TempDir(), "h.sock"))
	if code != ExitConfig {
		t.Errorf("status %d, want %d", code, ExitConfig)
	}
	if !strings.Contains(stderr, "queue.maxWaitingTurns: unknown key (line 15)") || strings.Count(stderr, "sandbox-host:") != 1 {
		t.Errorf("stderr %q does not name the key as written once", stderr)
	}
}

// fakeUnitStates answers like a healthy installation, with over replacing
// single units' states.
func fakeUnitStates(over map[string]unitState) func(context.Context, string) (unitState, error) {
	return func(_ context.Context, unit string) (unitState, error) {
		if st, ok := over[unit]; ok {
			if st.Load == "" {
				st.Load = "loaded"
			}
			return st, nil
		}
		switch unit {
		case "sandbox-host.socket":
			return unitState{"loaded", "active", "listening", "success"}, nil
		case "sandbox-reaper.service":
			return unitState{"loaded", "inactive", "dead", "success"}, nil
		case "sandbox-reaper.timer":
			return unitState{"loaded", "active", "waiting", "success"}, nil
		}
		return unitState{"loaded", "active", "running", "success"}, nil
	}
}

// unitCheck returns the unit-state line about unit.
func unitCheck(rep Report, unit string) (Check, bool) {
	for _, c := range rep.Checks {
		if c.Name == "unit-state" && strings.HasPrefix(c.Detail, unit+" ") {
			return c, true
		}
	}
	return Check{}, false
}

// TestDoctorUnitStates: a failed, restarting or inactive unit is reported
// (with how to recover), never "all checks passed".
func TestDoctorUnitStates(t *testing.T) {
	tests := []struct {
		name, unit     string
		st             unitState
		status, detail string
		remedy         string
		ok             bool
	}{
		{"socket hit the start limit", "sandbox-host.socket", unitState{Active: "failed", Sub: "failed", Result: "service-start-limit-hit"}, StatusFail, "systemd stopped trying", "systemctl reset-failed sandbox-host.socket sandbox-host.service", false},
		{"service failed", "sandbox-host.service", unitState{Active: "failed", Sub: "failed", Result: "exit-code"}, StatusFail, "result exit-code", "journalctl -u sandbox-host.service", false},
		{"service restarting", "sandbox-host.service", unitState{Active: "activating", Sub: "auto-restart", Result: "exit-code"}, StatusFail, "restarting after a failure", "reset-failed", false},
		{"service idle", "sandbox-host.service", unitState{Active: "inactive", Sub: "dead", Result: "success"}, StatusWarn, "the socket starts it", "systemctl start", true},
		{"socket stopped", "sandbox-host.socket", unitState{Active: "inactive", Sub: "dead", Result: "success"}, StatusFail, "clients cannot connect", "enable --now sandbox-host.socket", false},
		{"timer stopped", "sandbox-reaper.timer", unitState{Active: "inactive", Sub: "dead", Result: "success"}, StatusFail, "only removed when the host starts", "enable --now sandbox-reaper.timer", false},
		{"reaper pass failed", "sandbox-reaper.service", unitState{Active: "failed", Sub: "failed", Result: "exit-code"}, StatusWarn, "result exit-code", "journalctl -u sandbox-reaper.service", true},
		{"not loaded", "sandbox-host.service", unitState{Load: "not-found", Active: "inactive", Sub: "dead"}, StatusFail, "not-found", "daemon-reload", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, d := fakeMachine(t)
			d.unitState = fakeUnitStates(map[string]unitState{tt.unit: tt.st})
			rep := runDoctor(context.Background(), path, d)
			c, found := unitCheck(rep, tt.unit)
			if tt.st.Load == "not-found" {
				c, found = statusOf(rep, "unit-state")
			}
			if !found || c.Status != tt.status || !strings.Contains(c.Detail, tt.detail) || !strings.Contains(c.Remedy, tt.remedy) || rep.OK != tt.ok {
				t.Errorf("got %+v (report ok %v), want %s with %q and remedy %q (ok %v)", c, rep.OK, tt.status, tt.detail, tt.remedy, tt.ok)
			}
			var out bytes.Buffer
			cmd := doctorCmd(&globals{})
			cmd.SetOut(&out)
			printReport(cmd, rep)
			if strings.Contains(out.String(), "all checks passed") {
				t.Errorf("report says all checks passed:\n%s", out.String())
			}
		})
	}
	t.Run("no systemd", func(t *testing.T) {
		path, d := fakeMachine(t)
		d.unitState = func(context.Context, string) (unitState, error) {
			return unitState{}, errors.New("systemctl: not found")
		}
		rep := runDoctor(context.Background(), path, d)
		if c, _ := statusOf(rep, "unit-state"); c.Status != StatusSkip || !rep.OK {
			t.Errorf("got %+v ok %v, want skip", c, rep.OK)
		}
	})
}

// TestDoctorDiscover: in discover mode the declared entries are names to
// take from the server; doctor does not compare them with the server's
// schemas (nor suggest the discover setting that is on), and reports what
// startup would refuse.
func TestDoctorDiscover(t *testing.T) {
	path, d := fakeMachine(t)
	data, _ := os.ReadFile(path)
	y := strings.Replace(string(data), "    credential: mcp-key\n    tools:\n      - name: find\n        description: Find\n        parameters: '{\"type\":\"object\"}'\n",
		"    discover: true\n    tools:\n      - name: find\n", 1)
	if y == string(data) {
		t.Fatal("test config not rewritten")
	}
	os.WriteFile(path, []byte(y), 0o600)
	d.listTools = func(ctx context.Context, s policy.MCPServer, cred string) ([]mcp.Tool, error) {
		return []mcp.Tool{
			{Name: "find", Description: "Find things", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)},
			{Name: "other", Description: "x", InputSchema: json.RawMessage(`{"type":"object"}`)},
		}, nil
	}
	rep := runDoctor(context.Background(), path, d)
	c, _ := statusOf(rep, "mcp search")
	if !rep.OK || c.Status != StatusOK || !strings.Contains(c.Detail, "takes find from the server") || strings.Contains(c.Remedy, "discover: true") {
		t.Errorf("discover: %+v (ok %v)", c, rep.OK)
	}
	os.WriteFile(path, []byte(strings.Replace(y, "      - name: find\n", "      - name: find\n      - name: gone\n", 1)), 0o600)
	rep = runDoctor(context.Background(), path, d)
	c, _ = statusOf(rep, "mcp search")
	if rep.OK || c.Status != StatusFail || !strings.Contains(c.Detail, "gone is not offered") || strings.Contains(c.Remedy, "set discover") {
		t.Errorf("discover of an absent tool: %+v (ok %v)", c, rep.OK)
	}
}

// TestDoctorCredentialsDirMissing: a missing directory is named as missing,
// on the credentials line and on the MCP line that needs a credential.
func TestDoctorCredentialsDirMissing(t *testing.T) {
	path, d := fakeMachine(t)
	os.RemoveAll(d.credDir)
	rep := runDoctor(context.Background(), path, d)
	c, _ := statusOf(rep, "credentials")
	if c.Status != StatusFail || !strings.Contains(c.Detail, "does not exist") || !strings.Contains(c.Remedy, "install -d -m 0750 -o root -g _sandbox-credset") {
		t.Errorf("credentials: %+v", c)
	}
	m, _ := statusOf(rep, "mcp search")
	if m.Status != StatusFail || !strings.Contains(m.Detail, "does not exist") || strings.Contains(m.Detail, "cannot read") {
		t.Errorf("mcp: %+v", m)
	}
}

func TestDoctorRuntime(t *testing.T) {
	good := map[string][]string{"runc": nil, "runsc": {"--network=none", "--host-uds=open"}}
	tests := []struct {
		name, runtime string
		probe         fakeProbe
		want          string // status
		remedy        string
	}{
		{"default runtime needs no registration", "", fakeProbe{runtimesErr: errors.New("not asked")}, StatusOK, ""},
		{"runsc registered with its arguments", "runsc", fakeProbe{runtimes: good}, StatusOK, ""},
		{"one-dash and split arguments count", "runsc", fakeProbe{runtimes: map[string][]string{"runsc": {"-network", "none", "-host-uds=open"}}}, StatusOK, ""},
		{"other runtime registered", "kata", fakeProbe{runtimes: map[string][]string{"kata": nil}}, StatusOK, ""},
		{"runsc not registered", "runsc", fakeProbe{runtimes: map[string][]string{"runc": nil}}, StatusFail, `"runtimeArgs":["--network=none","--host-uds=open"]`},
		{"runsc without --network=none", "runsc", fakeProbe{runtimes: map[string][]string{"runsc": {"--host-uds=open"}}}, StatusFail, "/etc/docker/daemon.json"},
		{"runsc without --host-uds", "runsc", fakeProbe{runtimes: map[string][]string{"runsc": {"--network=none"}}}, StatusFail, "/etc/docker/daemon.json"},
		{"runsc with another network", "runsc", fakeProbe{runtimes: map[string][]string{"runsc": {"--network=host", "--host-uds=open"}}}, StatusFail, "--network=none"},
		{"other runtime not registered", "kata", fakeProbe{runtimes: good}, StatusFail, "daemon.json"},
		{"docker info fails", "runsc", fakeProbe{runtimesErr: errors.New("boom")}, StatusFail, "docker info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Check
			doctorRuntime(context.Background(), tt.runtime, tt.probe, func(name, status, detail, remedy string) {
				got = append(got, Check{Name: name, Status: status, Detail: detail, Remedy: remedy})
			})
			if len(got) != 1 || got[0].Name != "runtime" || got[0].Status != tt.want || !strings.Contains(got[0].Remedy, tt.remedy) {
				t.Errorf("doctorRuntime(%q) = %+v, want one runtime check %s with remedy containing %q", tt.runtime, got, tt.want, tt.remedy)
			}
		})
	}
}
