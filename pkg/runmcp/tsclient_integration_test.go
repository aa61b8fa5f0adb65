package runmcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// TSClientSwitch turns on the interop test with the official MCP
// TypeScript SDK's client (test/peers/mcp-run-client.mjs; test/peers
// installed with npm ci). test/integration.sh sets it when it can.
const TSClientSwitch = "SANDBOX_IT_MCP_TSCLIENT"

// serveEnv makes the test binary an MCP server over stdio with a fake
// Runner (TestMain); callsEnv names the file where it writes the calls the
// fake saw when stdin closes.
const (
	serveEnv = "SANDBOX_RUNMCP_TEST_SERVE"
	callsEnv = "SANDBOX_RUNMCP_TEST_CALLS"
)

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		os.Exit(serveFakeOverStdio())
	}
	os.Exit(m.Run())
}

// serveFakeOverStdio is the re-executed test binary: runmcp over its
// stdin/stdout, the Runner a fake whose run prints, reports progress and
// returns an artifact.
func serveFakeOverStdio() int {
	f := newFake()
	f.Final.Stdout = "hello from the fake run\n"
	f.Final.Artifacts = []runs.Artifact{{Path: "out/report.json", Size: 9, Data: []byte(`{"ok":1}` + "\n")}}
	f.EventGap = 150 * time.Millisecond
	f.Events = []runs.Event{
		{Seq: 1, Type: runs.EventState, State: runs.StateRunning},
		{Seq: 2, Type: runs.EventOutput, Stream: runs.StreamStdout, Phase: runs.PhaseMain, Data: []byte("hello from the fake run\n")},
		{Seq: 3, Type: runs.EventOutput, Stream: runs.StreamStdout, Phase: runs.PhaseMain, Data: []byte("done\n")},
	}
	err := ServeStdio(context.Background(), NewServer(f, Options{Project: "demo", ProgressInterval: 50 * time.Millisecond}), os.Stdin, os.Stdout)
	if p := os.Getenv(callsEnv); p != "" {
		data, _ := json.Marshal(map[string]any{"calls": f.Calls(), "params": f.Params()})
		os.WriteFile(p, data, 0o600)
	}
	if err != nil {
		os.Stderr.WriteString("serve: " + err.Error() + "\n")
		return 1
	}
	return 0
}

// tsOutput is what mcp-run-client.mjs prints.
type tsOutput struct {
	ProtocolVersion string `json:"protocolVersion"`
	Server          struct {
		Name string `json:"name"`
	} `json:"server"`
	Tools []struct {
		Name        string `json:"name"`
		InputSchema struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"inputSchema"`
	} `json:"tools"`
	Result *struct {
		IsError bool `json:"isError"`
		Content []struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Resource *struct {
				URI      string `json:"uri"`
				MIMEType string `json:"mimeType"`
				Blob     string `json:"blob"`
			} `json:"resource"`
		} `json:"content"`
		StructuredContent *runs.Status `json:"structuredContent"`
	} `json:"result"`
	Elicitations []struct {
		Message string `json:"message"`
	} `json:"elicitations"`
	Progress []struct {
		Progress float64 `json:"progress"`
		Message  string  `json:"message"`
	} `json:"progress"`
}

func TestTSClientIntegration(t *testing.T) {
	if os.Getenv(TSClientSwitch) != "1" {
		t.Skipf("MCP TypeScript SDK client interop test skipped: set %s=1 (needs node and npm ci --prefix test/peers; test/integration.sh does both)", TSClientSwitch)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("%s=1 but node is not on PATH", TSClientSwitch)
	}
	script, _ := filepath.Abs("../../test/peers/mcp-run-client.mjs")
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("%s=1 but the SDK is not installed: npm ci --prefix test/peers (%v)", TSClientSwitch, err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T, flags ...string) (tsOutput, []string) {
		t.Helper()
		calls := filepath.Join(t.TempDir(), "calls.json")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		args := append([]string{script}, flags...)
		args = append(args, "--timeout-ms", "30000", "--", self)
		cmd := exec.CommandContext(ctx, node, args...)
		cmd.Env = append(os.Environ(), serveEnv+"=1", callsEnv+"="+calls)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("mcp-run-client %v: %v\nstderr:\n%s", flags, err, stderr.String())
		}
		var out tsOutput
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("mcp-run-client output: %v\n%s", err, stdout.String())
		}
		// The server writes its calls when the client closes its stdin.
		var seen struct{ Calls []string }
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			data, err := os.ReadFile(calls)
			if err == nil && json.Unmarshal(data, &seen) == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server wrote no call record (did it exit?)\nstderr:\n%s", stderr.String())
			}
		}
		return out, seen.Calls
	}
	resultText := func(t *testing.T, out tsOutput) string {
		t.Helper()
		if out.Result == nil || len(out.Result.Content) == 0 || out.Result.Content[0].Type != "text" {
			t.Fatalf("no text result: %+v", out.Result)
		}
		return out.Result.Content[0].Text
	}

	t.Run("list and a shell run with progress and an artifact", func(t *testing.T) {
		out, calls := run(t, "--progress", "--call", `{"command":"echo hello","timeout_seconds":5,"artifacts":["out/report.json"]}`)
		eq(t, "protocol version", out.ProtocolVersion, "2025-11-25")
		eq(t, "server name", out.Server.Name, "roundtable-sandbox")
		if len(out.Tools) != 1 || out.Tools[0].Name != ToolName {
			t.Fatalf("tools: %+v", out.Tools)
		}
		var names []string
		for n := range out.Tools[0].InputSchema.Properties {
			names = append(names, n)
		}
		slices.Sort(names)
		// The seed's properties plus credentials (optional, beyond the seed:
		// docs/credentialed-egress.md).
		eq(t, "schema properties", strings.Join(names, ","), "args,artifacts,command,credentials,executable,network,setup,timeout_seconds")
		eq(t, "required", len(out.Tools[0].InputSchema.Required), 0)
		if out.Result.IsError {
			t.Fatalf("run: tool error %q", resultText(t, out))
		}
		if txt := resultText(t, out); !strings.Contains(txt, "hello from the fake run") || !strings.Contains(txt, "exit code: 0") {
			t.Errorf("text: %q", txt)
		}
		if len(out.Result.Content) != 2 || out.Result.Content[1].Resource == nil {
			t.Fatalf("content: want text + one embedded resource, got %+v", out.Result.Content)
		}
		r := out.Result.Content[1].Resource
		eq(t, "resource uri", r.URI, "sandbox-output:///out/report.json")
		eq(t, "resource mime", r.MIMEType, "application/json")
		eq(t, "resource blob", r.Blob, base64.StdEncoding.EncodeToString([]byte(`{"ok":1}`+"\n")))
		if out.Result.StructuredContent == nil || out.Result.StructuredContent.ID != "r1" || out.Result.StructuredContent.Artifacts[0].Data != nil {
			t.Errorf("structured content: %+v", out.Result.StructuredContent)
		}
		// The server sends the last output line before the result (a flush
		// past the rate limit), but the TypeScript client drops a
		// notification that its transport delivers after the response (3
		// runs in 10 here): assert what every run shows.
		if len(out.Progress) < 2 {
			t.Errorf("progress notifications: %d, want at least 2 (events 150 ms apart)", len(out.Progress))
		}
		for i, p := range out.Progress {
			if p.Message != "running" && p.Message != "hello from the fake run" && p.Message != "done" {
				t.Errorf("progress %d message %q is neither a state nor an output line of the run", i, p.Message)
			}
			if i > 0 && p.Progress <= out.Progress[i-1].Progress {
				t.Errorf("progress not increasing: %+v", out.Progress)
			}
		}
		eq(t, "calls", strings.Join(calls, ","), "start,events")
	})

	t.Run("network without elicitation starts nothing", func(t *testing.T) {
		out, calls := run(t, "--call", `{"command":"curl example.org","network":true}`)
		if !out.Result.IsError {
			t.Errorf("network without elicitation: not a tool error")
		}
		eq(t, "text", resultText(t, out), msgCannotAsk)
		eq(t, "calls", len(calls), 0)
	})

	t.Run("network accepted through elicitation", func(t *testing.T) {
		out, calls := run(t, "--elicit", "accept", "--call", `{"command":"curl example.org","network":true}`)
		if out.Result.IsError {
			t.Errorf("approved run: tool error %q", resultText(t, out))
		}
		if len(out.Elicitations) != 1 || !strings.Contains(out.Elicitations[0].Message, `Command: "curl example.org"`) {
			t.Errorf("elicitations: %+v", out.Elicitations)
		}
		eq(t, "calls", strings.Join(calls, ","), "start,approve,events")
	})

	t.Run("network declined starts nothing", func(t *testing.T) {
		out, calls := run(t, "--elicit", "decline", "--call", `{"command":"curl example.org","network":true}`)
		eq(t, "text", resultText(t, out), msgDeclined)
		eq(t, "questions", len(out.Elicitations), 1)
		eq(t, "calls", len(calls), 0)
	})

	t.Run("unknown property refused", func(t *testing.T) {
		out, calls := run(t, "--call", `{"command":"ls","cwd":"/etc"}`)
		if !out.Result.IsError || !strings.Contains(resultText(t, out), `unknown property "cwd"`) {
			t.Errorf("unknown property: %+v", out.Result)
		}
		eq(t, "calls", len(calls), 0)
	})
}
