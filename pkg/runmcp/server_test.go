package runmcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// The seed's table: property -> JSON type.
var seedProperties = map[string]string{
	"command":         "string",
	"executable":      "string",
	"args":            "array",
	"setup":           "array",
	"network":         "boolean",
	"timeout_seconds": "number",
	"artifacts":       "array",
}

// beyondSeed are sandbox_run's properties past the seed's (docs/code-runs.md says so).
var beyondSeed = map[string]string{"credentials": "array"}

// allProperties is the seed's table and beyondSeed.
func allProperties() map[string]string {
	m := maps.Clone(seedProperties)
	maps.Copy(m, beyondSeed)
	return m
}

func TestToolsListShowsTheSeedSchema(t *testing.T) {
	cs := connect(t, newFake(), Options{Project: "demo"}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != 1 || res.Tools[0].Name != ToolName {
		t.Fatalf("tools: got %d tools, want only %s", len(res.Tools), ToolName)
	}
	tl := res.Tools[0]
	data, _ := json.Marshal(tl.InputSchema)
	var schema struct {
		Type                 string `json:"type"`
		Required             []string
		AdditionalProperties *bool `json:"additionalProperties"`
		Properties           map[string]struct {
			Type        string `json:"type"`
			Description string `json:"description"`
			Items       *struct {
				Type string `json:"type"`
			} `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	eq(t, "schema type", schema.Type, "object")
	if len(schema.Required) != 0 {
		t.Errorf("required: got %v, want none (the seed's parameters are all optional)", schema.Required)
	}
	if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
		t.Errorf("additionalProperties: want false (unknown properties are refused)")
	}
	got := slices.Sorted(maps.Keys(schema.Properties))
	want := slices.Sorted(maps.Keys(allProperties()))
	if !slices.Equal(got, want) {
		t.Fatalf("properties: got %v, want %v", got, want)
	}
	for name, typ := range allProperties() {
		p := schema.Properties[name]
		eq(t, name+" type", p.Type, typ)
		if p.Description == "" {
			t.Errorf("%s: no description", name)
		}
		if typ == "array" && (p.Items == nil || p.Items.Type != "string") {
			t.Errorf("%s: items should be strings", name)
		}
	}
	if !strings.Contains(schema.Properties["network"].Description, "requires human approval") {
		t.Errorf("network description lost the seed's words: %q", schema.Properties["network"].Description)
	}
	for _, w := range []string{"/workspace", "/output", "/tmp", "read-only", `"demo"`, "network", "approve"} {
		if !strings.Contains(tl.Description, w) {
			t.Errorf("tool description does not mention %q", w)
		}
	}
}

func TestShellRun(t *testing.T) {
	f := newFake()
	f.Final.Stdout = "hello\n"
	f.Final.Stderr = "warn\n"
	cs := connect(t, f, Options{Project: "demo"}, nil)
	res := call(t, cs, map[string]any{"command": "echo hello", "timeout_seconds": 30, "setup": []string{"apt-get install -y jq"}})
	if res.IsError {
		t.Fatalf("ok run reported as error: %s", text(t, res))
	}
	ps := f.Params()
	if len(ps) != 1 {
		t.Fatalf("StartRun calls: %d, want 1", len(ps))
	}
	p := ps[0]
	eq(t, "project", p.Project, "demo")
	eq(t, "command", p.Command, "echo hello")
	eq(t, "timeoutSeconds", p.TimeoutSeconds, 30)
	eq(t, "setup", strings.Join(p.Setup, "|"), "apt-get install -y jq")
	eq(t, "network", p.Network, false)
	eqCalls(t, f, "start", "events")
	txt := text(t, res)
	for _, w := range []string{"result: ok", "exit code: 0", "duration: 1.234 s", "stdout:\nhello\n", "stderr:\nwarn\n"} {
		if !strings.Contains(txt, w) {
			t.Errorf("text lacks %q:\n%s", w, txt)
		}
	}
	st := structured(t, res)
	eq(t, "structured id", st.ID, "r1")
	eq(t, "structured result", st.Result, runs.ResultOK)
	eq(t, "structured stdout", st.Stdout, "hello\n")
}

// An ok run whose stdout the host cut says so before the output and where
// it ends; a run that was not cut says nothing of it.
func TestCutOutputIsSaid(t *testing.T) {
	f := newFake()
	f.Final.Stdout, f.Final.StdoutTruncated, f.Final.StdoutDroppedBytes = "yyyy", true, 314572800
	cs := connect(t, f, Options{}, nil)
	txt := text(t, call(t, cs, map[string]any{"command": "yes"}))
	note := "stdout cut at the host's output bound, 314572800 bytes dropped"
	if i, j := strings.Index(txt, "output cut: "+note+"\n"), strings.Index(txt, "stdout:\nyyyy\n["+note+"]\n"); i < 0 || j < 0 || i > j {
		t.Errorf("text does not say the cut before and after stdout:\n%s", txt)
	}
	f = newFake()
	f.Final.Stdout = "y\n"
	cs = connect(t, f, Options{}, nil)
	if txt := text(t, call(t, cs, map[string]any{"command": "yes"})); strings.Contains(txt, "cut") {
		t.Errorf("a whole output is said to be cut:\n%s", txt)
	}
}

func TestArgvRunNonZeroExitIsAToolError(t *testing.T) {
	f := newFake()
	f.Final.Mode, f.Final.Result, f.Final.ExitCode = runs.ModeArgv, runs.ResultFailed, intp(3)
	f.Final.Stderr, f.Final.StderrTruncated, f.Final.StderrDroppedBytes = "Traceback ...\n", true, 4096
	cs := connect(t, f, Options{}, nil)
	res := call(t, cs, map[string]any{"executable": "python3", "args": []string{"/workspace/check.py", "--x"}, "artifacts": []string{"report.json"}})
	p := f.Params()[0]
	eq(t, "executable", p.Executable, "python3")
	eq(t, "args", strings.Join(p.Args, "|"), "/workspace/check.py|--x")
	eq(t, "artifacts", strings.Join(p.Artifacts, "|"), "report.json")
	eq(t, "command", p.Command, "")
	eq(t, "project", p.Project, "")
	if !res.IsError {
		t.Errorf("exit 3: IsError false, want true")
	}
	txt := text(t, res)
	for _, w := range []string{"result: failed", "exit code: 3", "Traceback", "[stderr cut at the host's output bound, 4096 bytes dropped]",
		"output cut: stderr cut at the host's output bound, 4096 bytes dropped\n", "stdout: (empty)"} {
		if !strings.Contains(txt, w) {
			t.Errorf("text lacks %q:\n%s", w, txt)
		}
	}
}

func TestArgumentsThatDoNotMapAreRefused(t *testing.T) {
	cases := []struct {
		name string
		args any
		want string
	}{
		{"unknown property", map[string]any{"command": "ls", "cwd": "/"}, `unknown property "cwd"`},
		{"project is not a parameter", map[string]any{"command": "ls", "project": "other"}, `unknown property "project"`},
		{"case differs", map[string]any{"Command": "ls"}, `unknown property "Command"`},
		{"camelCase timeout", map[string]any{"command": "ls", "timeoutSeconds": 5}, `unknown property "timeoutSeconds"`},
		{"command not a string", map[string]any{"command": 1}, "command: must be a string"},
		{"args not an array", map[string]any{"executable": "ls", "args": "-l"}, "args: must be an array of strings"},
		{"args with a number", map[string]any{"executable": "ls", "args": []any{"-l", 2}}, "args: must be an array of strings"},
		{"setup with null", map[string]any{"command": "ls", "setup": []any{nil}}, "setup: must be an array of strings"},
		{"network as a string", map[string]any{"command": "ls", "network": "true"}, "network: must be a boolean"},
		{"timeout as a string", map[string]any{"command": "ls", "timeout_seconds": "60"}, "timeout_seconds: must be a number"},
		{"timeout fractional", map[string]any{"command": "ls", "timeout_seconds": 1.5}, "timeout_seconds: must be a whole number"},
		{"timeout zero", map[string]any{"command": "ls", "timeout_seconds": 0}, "timeout_seconds: must be a whole number"},
		{"timeout negative", map[string]any{"command": "ls", "timeout_seconds": -5}, "timeout_seconds: must be a whole number"},
		{"arguments an array", json.RawMessage(`["ls"]`), "not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			cs := connect(t, f, Options{}, nil)
			res := call(t, cs, c.args)
			if !res.IsError {
				t.Fatalf("IsError false, want a refusal")
			}
			if txt := text(t, res); !strings.Contains(txt, c.want) {
				t.Errorf("refusal: got %q, want it to contain %q", txt, c.want)
			}
			eqCalls(t, f)
		})
	}
}

func TestParamsMapping(t *testing.T) {
	cases := []struct {
		name, raw string
		want      runs.Params
	}{
		{"empty", ``, runs.Params{Project: "p"}},
		{"null", `null`, runs.Params{Project: "p"}},
		{"nulls are absent", `{"command":"ls","args":null,"network":null,"timeout_seconds":null}`, runs.Params{Project: "p", Command: "ls"}},
		{"whole float", `{"command":"ls","timeout_seconds":60.0}`, runs.Params{Project: "p", Command: "ls", TimeoutSeconds: 60}},
		{"over the max maps (the host refuses)", `{"command":"ls","timeout_seconds":3601}`, runs.Params{Project: "p", Command: "ls", TimeoutSeconds: 3601}},
		{"both modes map (the host refuses)", `{"command":"ls","executable":"ls"}`, runs.Params{Project: "p", Command: "ls", Executable: "ls"}},
		{"all", `{"executable":"e","args":["a"],"setup":["s"],"network":true,"timeout_seconds":7,"artifacts":["x/y"]}`,
			runs.Params{Project: "p", Executable: "e", Args: []string{"a"}, Setup: []string{"s"}, Network: true, TimeoutSeconds: 7, Artifacts: []string{"x/y"}}},
		{"credentials (beyond the seed)", `{"command":"git clone https://git.example.com/r","network":true,"credentials":["git"]}`,
			runs.Params{Project: "p", Command: "git clone https://git.example.com/r", Network: true, Credentials: []string{"git"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := params(json.RawMessage(c.raw), "p")
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(c.want)
			if string(g) != string(w) {
				t.Errorf("got %s, want %s", g, w)
			}
		})
	}
	if _, err := params(json.RawMessage(`{"command":"`+strings.Repeat("a", maxArgsBytes)+`"}`), ""); err == nil {
		t.Errorf("arguments over %d bytes: accepted", maxArgsBytes)
	}
}

func FuzzParams(f *testing.F) {
	for _, s := range []string{`{}`, `{"command":"ls"}`, `{"args":["a",1]}`, `{"timeout_seconds":1e300}`, `[1]`, `{"network":true}`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := params(raw, "proj")
		if err != nil {
			return
		}
		if p.Project != "proj" {
			t.Fatalf("project %q: the arguments changed it", p.Project)
		}
		if p.TimeoutSeconds < 0 {
			t.Fatalf("negative timeout %d accepted", p.TimeoutSeconds)
		}
		// Whatever was accepted names only sandbox_run's properties.
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			for k := range m {
				if _, ok := allProperties()[k]; !ok {
					t.Fatalf("unknown property %q accepted", k)
				}
			}
		}
	})
}

func TestStartRefusalsAndFailures(t *testing.T) {
	cases := []struct {
		name     string
		err      error
		want     string
		mustNot  string
		wantCall []string
	}{
		{"bad request: the host's reason", &client.Error{Status: 400, Reason: "exactly one of command or executable"}, "refused the run: exactly one of command or executable", "", []string{"start"}},
		{"server error: generic", &client.Error{Status: 500, Reason: "docker: /var/lib/docker/secret token=abc"}, msgStartFailed, "/var/lib", []string{"start"}},
		{"transport error: generic", errors.New("dial unix /run/roundtable-sandbox/host.sock: connection refused"), msgStartFailed, "/run/", []string{"start"}},
		{"queue full", &client.Error{Status: 429, Reason: "queue full"}, msgBusy, "", []string{"start"}},
		{"forbidden", &client.Error{Status: 403, Reason: "uid 1000 not allowed"}, msgForbidden, "uid", []string{"start"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			f.StartErr = c.err
			cs := connect(t, f, Options{}, nil)
			res := call(t, cs, map[string]any{"command": "ls"})
			txt := text(t, res)
			if !res.IsError || !strings.Contains(txt, c.want) {
				t.Errorf("got IsError=%v %q, want an error containing %q", res.IsError, txt, c.want)
			}
			if c.mustNot != "" && strings.Contains(txt, c.mustNot) {
				t.Errorf("tool error echoes %q: %q", c.mustNot, txt)
			}
			eqCalls(t, f, c.wantCall...)
		})
	}
}

func TestNetworkWithoutElicitationStartsNothing(t *testing.T) {
	f := newFake()
	cs := connect(t, f, Options{}, nil) // the SDK client declares elicitation only with a handler
	res := call(t, cs, map[string]any{"command": "curl example.org", "network": true})
	if !res.IsError {
		t.Fatalf("network without elicitation: IsError false")
	}
	eq(t, "message", text(t, res), msgCannotAsk)
	eqCalls(t, f) // no run, no container
}

func TestNetworkWithURLOnlyElicitationStartsNothing(t *testing.T) {
	f := newFake()
	var q asked
	co := elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q)
	co.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
	cs := connect(t, f, Options{}, co)
	res := call(t, cs, map[string]any{"command": "curl example.org", "network": true})
	eq(t, "message", text(t, res), msgCannotAsk)
	eq(t, "questions asked", len(q.Messages()), 0)
	eqCalls(t, f)
}

func TestNetworkApproved(t *testing.T) {
	f := newFake()
	f.Final.Network = true
	var q asked
	cs := connect(t, f, Options{Project: "demo"}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q))
	res := call(t, cs, map[string]any{"command": "curl -s example.org\nrm -rf /tmp/x", "network": true, "timeout_seconds": 90, "setup": []string{"apt-get install -y curl"}})
	if res.IsError {
		t.Fatalf("approved run: %s", text(t, res))
	}
	eqCalls(t, f, "start", "approve", "events")
	eq(t, "network param", f.Params()[0].Network, true)
	if len(q.Messages()) != 1 {
		t.Fatalf("questions asked: %d, want 1", len(q.Messages()))
	}
	// The command is quoted: its newline cannot pose as the server's text.
	for _, w := range []string{`Command: "curl -s example.org\nrm -rf /tmp/x"`, `Project (read-only): "demo"`, "Timeout: 90 s", `Setup as root 1: "apt-get install -y curl"`, "this one run"} {
		if !strings.Contains(q.Messages()[0], w) {
			t.Errorf("approval message lacks %q:\n%s", w, q.Messages()[0])
		}
	}
}

// TestNetworkApprovalNamesCredentials: the human is shown exactly the
// credentials the run asks for (quoted), and the host gets exactly those.
func TestNetworkApprovalNamesCredentials(t *testing.T) {
	f := newFake()
	f.Final.Network = true
	var q asked
	cs := connect(t, f, Options{}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q))
	res := call(t, cs, map[string]any{"command": "git clone https://git.example.com/r", "network": true, "credentials": []string{"git", "npm\nX"}})
	if res.IsError {
		t.Fatalf("approved run: %s", text(t, res))
	}
	if got := f.Params()[0].Credentials; !slices.Equal(got, []string{"git", "npm\nX"}) {
		t.Errorf("credentials sent to the host: %q", got)
	}
	msg := q.Messages()[0]
	if !strings.Contains(msg, `never the value): "git" in $GIT_TOKEN for git.example.com:443, "npm\nX" in $NPM_X_TOKEN for registry.example.com:8443`) || !strings.Contains(msg, "with these credentials") {
		t.Errorf("approval message does not name the credentials (quoted), their variables and hosts:\n%s", msg)
	}
	if f.credsFor == nil || f.credsFor[0] != "" {
		t.Errorf("credentials listed for projects %q, want the run's (none)", f.credsFor)
	}
	// Without credentials it says so.
	f2 := newFake()
	f2.Final.Network = true
	var q2 asked
	cs2 := connect(t, f2, Options{}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q2))
	call(t, cs2, map[string]any{"command": "true", "network": true})
	if !strings.Contains(q2.Messages()[0], "Credentials: none") {
		t.Errorf("approval message without credentials:\n%s", q2.Messages()[0])
	}
}

// TestNetworkApprovalNeedsTheListedCredentials: a credential the host does
// not list for this client and project, or a host that does not answer the
// list, ends the call before the human is asked, and nothing starts.
func TestNetworkApprovalNeedsTheListedCredentials(t *testing.T) {
	for _, tc := range []struct {
		name  string
		creds []string
		err   error
		want  string
	}{
		{"not listed", []string{"git", "other"}, nil, credentialUnavailable("other", "the run was not started")},
		{"host did not list", []string{"git"}, errors.New("connection refused"), msgCredsUnlisted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.CredsErr = tc.err
			var q asked
			cs := connect(t, f, Options{Project: "demo"}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q))
			res := call(t, cs, map[string]any{"command": "true", "network": true, "credentials": tc.creds})
			if !res.IsError || text(t, res) != tc.want {
				t.Errorf("got %q, want %q", text(t, res), tc.want)
			}
			if len(q.Messages()) != 0 || len(f.Calls()) != 0 {
				t.Errorf("asked %q, host saw %q: want nothing", q.Messages(), f.Calls())
			}
			if !slices.Equal(f.credsFor, []string{"demo"}) {
				t.Errorf("listed for %q, want the server's project", f.credsFor)
			}
		})
	}
}

func TestNetworkNotApprovedStartsNothing(t *testing.T) {
	cases := []struct {
		name string
		res  *mcp.ElicitResult
		err  error
		want string
	}{
		{"decline", &mcp.ElicitResult{Action: "decline"}, nil, msgDeclined},
		{"cancel", &mcp.ElicitResult{Action: "cancel"}, nil, msgDeclined},
		{"accept with allow false", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": false}}, nil, msgDeclined},
		{"accept without content", &mcp.ElicitResult{Action: "accept"}, nil, msgDeclined},
		{"accept with a string", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": "yes"}}, nil, msgAskFailed},
		{"client error", nil, errors.New("no UI"), msgAskFailed},
		{"no answer in time", nil, nil, msgNoAnswer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			var q asked
			cs := connect(t, f, Options{ApprovalTimeout: 300 * time.Millisecond}, elicitWith(c.res, c.err, &q))
			res := call(t, cs, map[string]any{"executable": "curl", "args": []string{"example.org"}, "network": true})
			if !res.IsError {
				t.Fatalf("not approved: IsError false")
			}
			eq(t, "message", text(t, res), c.want)
			eq(t, "questions asked", len(q.Messages()), 1)
			eqCalls(t, f)
		})
	}
}

func TestNetworkApprovalForbiddenCancelsTheRun(t *testing.T) {
	f := newFake()
	f.ApproveErr = &client.Error{Status: 403, Reason: "admin only"}
	var q asked
	cs := connect(t, f, Options{}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q))
	res := call(t, cs, map[string]any{"command": "curl example.org", "network": true})
	if !res.IsError {
		t.Fatalf("forbidden approval: IsError false")
	}
	eq(t, "message", text(t, res), msgNeedAdmin)
	eqCalls(t, f, "start", "approve", "cancel")
	if err := <-f.cancelled; err != nil {
		t.Errorf("CancelRun got a finished context: %v", err)
	}
}

func TestNetworkApprovalOtherFailureCancelsTheRun(t *testing.T) {
	f := newFake()
	f.ApproveErr = &client.Error{Status: 409, Reason: "denied meanwhile"}
	var q asked
	cs := connect(t, f, Options{}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q))
	res := call(t, cs, map[string]any{"command": "curl example.org", "network": true})
	eq(t, "message", text(t, res), msgApproveError)
	eqCalls(t, f, "start", "approve", "cancel")
}

func TestProgressNotifications(t *testing.T) {
	f := newFake()
	f.EventGap = 40 * time.Millisecond
	f.Events = []runs.Event{
		{Seq: 1, Type: runs.EventState, State: runs.StateRunning},
		{Seq: 2, Type: runs.EventOutput, Stream: runs.StreamStdout, Phase: runs.PhaseMain, Data: []byte("step 1\n")},
		{Seq: 3, Type: runs.EventOutput, Stream: runs.StreamStdout, Phase: runs.PhaseMain, Data: []byte("step 2\nstep 3\x1b[31m red\n\n")},
		{Seq: 4, Type: runs.EventOutput, Stream: runs.StreamStderr, Phase: runs.PhaseMain, Data: []byte(strings.Repeat("x", 5000) + "\n")},
	}
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	arrived := make(chan struct{}, 16)
	cs := connect(t, f, Options{ProgressInterval: 30 * time.Millisecond}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, req.Params)
			mu.Unlock()
			arrived <- struct{}{}
		},
	})
	p := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"command": "./build.sh"}}
	p.SetProgressToken("tok-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, p); err != nil {
		t.Fatal(err)
	}
	// Notifications may trail the result (the client handles them apart
	// from the call's answer): wait for the four.
	for i := range 4 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("progress notifications: got %d, want 4 (one per event, 40 ms apart)", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 4 {
		t.Fatalf("progress notifications: got %d, want 4 (one per event, 40 ms apart)", len(got))
	}
	msgs := []string{}
	for i, n := range got {
		eq(t, "token", n.ProgressToken, any("tok-1"))
		if i > 0 && n.Progress <= got[i-1].Progress {
			t.Errorf("progress did not increase: %v then %v", got[i-1].Progress, n.Progress)
		}
		msgs = append(msgs, n.Message)
	}
	eq(t, "message 1", msgs[0], "running")
	eq(t, "message 2", msgs[1], "step 1")
	eq(t, "message 3 (control characters dropped)", msgs[2], "step 3[31m red")
	if r := []rune(msgs[3]); len(r) != maxProgressMessage+1 || r[0] != '…' {
		t.Errorf("long line: %d runes, want %d with a leading ellipsis", len(r), maxProgressMessage+1)
	}
}

func TestProgressIsRateLimited(t *testing.T) {
	f := newFake()
	for i := 1; i <= 50; i++ {
		f.Events = append(f.Events, runs.Event{Seq: int64(i), Type: runs.EventOutput, Stream: runs.StreamStdout, Data: []byte("line\n")})
	}
	var mu sync.Mutex
	n := 0
	arrived := make(chan struct{}, 64)
	cs := connect(t, f, Options{ProgressInterval: time.Hour}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			n++
			mu.Unlock()
			arrived <- struct{}{}
		},
	})
	p := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"command": "yes | head -50"}}
	p.SetProgressToken(7)
	if _, err := cs.CallTool(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	// The first notification may trail the answer: wait for it, then give
	// a wrong implementation's further ones a moment to arrive.
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no progress notification at all")
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	eq(t, "notifications for 50 events within one interval", n, 1)
}

func TestNoProgressWithoutToken(t *testing.T) {
	f := newFake()
	f.Events = []runs.Event{{Seq: 1, Type: runs.EventOutput, Data: []byte("x\n")}}
	var mu sync.Mutex
	n := 0
	cs := connect(t, f, Options{}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { mu.Lock(); n++; mu.Unlock() },
	})
	call(t, cs, map[string]any{"command": "echo x"})
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	eq(t, "notifications", n, 0)
}

func TestCancellingTheCallCancelsTheRun(t *testing.T) {
	f := newFake()
	f.Block = true
	cs := connect(t, f, Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"command": "sleep 600"}})
		done <- err
	}()
	waitFor(t, f.following, "RunEvents") // the server follows the events
	cancel()
	select {
	case err := <-f.cancelled:
		if err != nil {
			t.Errorf("CancelRun got a finished context: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the run was not cancelled after the tool call was; calls %v", f.Calls())
	}
	<-done
	eqCalls(t, f, "start", "events", "cancel")
}

// ServeStdio: the agent closing stdin (it went away) cancels the run in
// flight and ends the server.
func TestStdinEOFCancelsTheRun(t *testing.T) {
	f := newFake()
	f.Block = true
	inR, inW := io.Pipe()   // the server's stdin
	outR, outW := io.Pipe() // the server's stdout
	served := make(chan error, 1)
	go func() { served <- ServeStdio(context.Background(), NewServer(f, Options{}), inR, outW) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"command": "sleep 600"}})
	waitFor(t, f.following, "RunEvents")
	inW.Close() // EOF on the server's stdin
	select {
	case err := <-f.cancelled:
		if err != nil {
			t.Errorf("CancelRun got a finished context: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the run was not cancelled after stdin closed; calls %v", f.Calls())
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdio after EOF: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeStdio did not return after stdin closed")
	}
	outR.Close()
}

func TestServerStopCancelsTheRun(t *testing.T) {
	f := newFake()
	f.Block = true
	stop, cancel := context.WithCancel(context.Background())
	cs := connect(t, f, Options{Context: stop}, nil)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"command": "sleep 600"}})
		done <- res
	}()
	waitFor(t, f.following, "RunEvents")
	cancel()
	select {
	case res := <-done:
		if res == nil || !res.IsError || text(t, res) != msgCancelled {
			t.Errorf("result after the server stopped: %+v, want the tool error %q", res, msgCancelled)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no result after the server stopped")
	}
	eqCalls(t, f, "start", "events", "cancel")
}

func TestWaitBoundCancelsTheRun(t *testing.T) {
	f := newFake()
	f.Block = true
	cs := connect(t, f, Options{WaitSlack: 200 * time.Millisecond}, nil)
	start := time.Now()
	res := call(t, cs, map[string]any{"command": "sleep 600", "timeout_seconds": 1})
	if el := time.Since(start); el < time.Second || el > 5*time.Second {
		t.Errorf("gave up after %v, want timeout_seconds (1 s) plus the slack", el)
	}
	eq(t, "message", text(t, res), msgWaitTooLong)
	eqCalls(t, f, "start", "events", "cancel")
}

func TestBrokenEventStreamIsReopened(t *testing.T) {
	f := newFake()
	f.EventErrs = []error{errors.New("unexpected EOF"), errors.New("connection reset")}
	f.Events = []runs.Event{{Seq: 1, Type: runs.EventOutput, Data: []byte("a\n")}}
	cs := connect(t, f, Options{}, nil)
	res := call(t, cs, map[string]any{"command": "echo a"})
	if res.IsError {
		t.Fatalf("reopened stream: %s", text(t, res))
	}
	eqCalls(t, f, "start", "events", "events", "events")
}

func TestLostEventStreamCancelsTheRun(t *testing.T) {
	f := newFake()
	for range eventRetries + 1 {
		f.EventErrs = append(f.EventErrs, errors.New("read /run/roundtable-sandbox/host.sock: reset"))
	}
	cs := connect(t, f, Options{}, nil)
	res := call(t, cs, map[string]any{"command": "echo a"})
	eq(t, "message", text(t, res), msgLost)
	calls := f.Calls()
	if got := calls[len(calls)-1]; got != "cancel" {
		t.Errorf("last call %q, want cancel (calls %v)", got, calls)
	}
	eq(t, "event stream attempts", strings.Count(strings.Join(calls, " "), "events"), eventRetries+1)
}

func TestNotFoundStreamIsNotRetried(t *testing.T) {
	f := newFake()
	f.EventErrs = []error{&client.Error{Status: 404, Reason: "no such run"}}
	cs := connect(t, f, Options{}, nil)
	res := call(t, cs, map[string]any{"command": "echo a"})
	eq(t, "message", text(t, res), msgLost)
	eqCalls(t, f, "start", "events", "cancel")
}

func TestArtifactsAreEmbeddedResources(t *testing.T) {
	f := newFake()
	f.Final.Artifacts = []runs.Artifact{
		{Path: "report.json", Size: 9, Data: []byte(`{"ok":1}` + "\n")},
		{Path: "cov/index.html", Size: 5, Data: []byte("<p/>\n")},
		{Path: "empty.bin", Size: 0},
		{Path: "odd name#1.txt", Size: 1, Data: []byte("x")},
		{Path: "missing.txt", Error: "missing"},
	}
	cs := connect(t, f, Options{}, nil)
	res := call(t, cs, map[string]any{"command": "make report", "artifacts": []string{"report.json", "cov/index.html", "empty.bin", "odd name#1.txt", "missing.txt"}})
	if res.IsError {
		t.Fatalf("run with artifacts: %s", text(t, res))
	}
	want := []struct{ uri, mime, data string }{
		{"sandbox-output:///report.json", "application/json", `{"ok":1}` + "\n"},
		{"sandbox-output:///cov/index.html", "text/html; charset=utf-8", "<p/>\n"},
		{"sandbox-output:///empty.bin", "application/octet-stream", ""},
		{"sandbox-output:///odd%20name%231.txt", "text/plain; charset=utf-8", "x"},
	}
	if len(res.Content) != 1+len(want) {
		t.Fatalf("content blocks: got %d, want text + %d resources", len(res.Content), len(want))
	}
	for i, w := range want {
		er, ok := res.Content[i+1].(*mcp.EmbeddedResource)
		if !ok {
			t.Fatalf("content[%d] is %T, want an embedded resource", i+1, res.Content[i+1])
		}
		eq(t, "uri", er.Resource.URI, w.uri)
		eq(t, "mime "+w.uri, er.Resource.MIMEType, w.mime)
		eq(t, "blob "+w.uri, string(er.Resource.Blob), w.data)
		eq(t, "text "+w.uri, er.Resource.Text, "")
	}
	txt := text(t, res)
	for _, w := range []string{"- missing.txt: missing", "- report.json (9 bytes) as sandbox-output:///report.json"} {
		if !strings.Contains(txt, w) {
			t.Errorf("text lacks %q:\n%s", w, txt)
		}
	}
	st := structured(t, res)
	if len(st.Artifacts) != 5 {
		t.Fatalf("structured artifacts: %d, want 5", len(st.Artifacts))
	}
	for _, a := range st.Artifacts {
		if a.Data != nil {
			t.Errorf("structured artifact %s carries data", a.Path)
		}
	}
	eq(t, "structured error", st.Artifacts[4].Error, "missing")
	// The fake's status kept its data: the copy is the result's.
	if f.Final.Artifacts[0].Data == nil {
		t.Errorf("withoutData changed the runner's status")
	}
}

// The blob is base64 on the wire (the SDK encodes []byte so).
func TestArtifactBlobIsBase64OnTheWire(t *testing.T) {
	r := result(runs.Status{Result: runs.ResultOK, Artifacts: []runs.Artifact{{Path: "a.bin", Size: 3, Data: []byte{0, 1, 0xff}}, {Path: "e", Size: 0}}})
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"blob":"`+base64.StdEncoding.EncodeToString([]byte{0, 1, 0xff})+`"`) {
		t.Errorf("wire form lacks the base64 blob: %s", data)
	}
	if !strings.Contains(string(data), `"uri":"sandbox-output:///e","mimeType":"application/octet-stream","blob":""`) {
		t.Errorf("an empty artifact has no empty blob on the wire: %s", data)
	}
}

func TestResultsOtherThanOKAreToolErrors(t *testing.T) {
	for _, r := range []string{runs.ResultFailed, runs.ResultTimeout, runs.ResultCancelled, runs.ResultDenied, runs.ResultError} {
		res := result(runs.Status{Result: r, Error: "generic reason", FailedSetup: 2})
		if !res.IsError {
			t.Errorf("%s: IsError false", r)
		}
		txt := res.Content[0].(*mcp.TextContent).Text
		for _, w := range []string{"result: " + r, "exit code: none", "error: generic reason", "setup command 2 failed"} {
			if !strings.Contains(txt, w) {
				t.Errorf("%s: text lacks %q:\n%s", r, w, txt)
			}
		}
	}
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s not called in time", what)
	}
}

// A server on a TCP port refuses network before asking or starting
// anything, even when the client would accept: whoever reaches the port
// would answer the question. A run without network still runs.
func TestTCPServerRefusesNetwork(t *testing.T) {
	f := newFake()
	var q asked
	cs := connect(t, f, Options{TCP: true}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &q))
	res := call(t, cs, map[string]any{"command": "curl -s example.org", "network": true})
	if !res.IsError || !strings.Contains(text(t, res), "TCP port") {
		t.Fatalf("network over TCP: error %v, %q; want a refusal naming the TCP port", res.IsError, text(t, res))
	}
	eqCalls(t, f)
	eq(t, "questions asked", len(q.Messages()), 0)
	if res := call(t, cs, map[string]any{"command": "true"}); res.IsError {
		t.Errorf("run without network over TCP: %s", text(t, res))
	}
}

func TestCheckTCPRole(t *testing.T) {
	for _, tt := range []struct {
		role, want string
	}{
		{"client", ""},
		{"admin", "admin role"},
		{"none", "not an API client"},
		{"", "needs the host to name this user's role"},
		{"root", "needs the host to name this user's role"},
	} {
		err := CheckTCPRole(tt.role)
		if got := fmt.Sprint(err); (tt.want == "") != (err == nil) || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("CheckTCPRole(%q) = %v, want %q", tt.role, err, tt.want)
		}
	}
}
