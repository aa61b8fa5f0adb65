package sealedturn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/sealedturn"
	"github.com/roundtable-sandbox/sandbox/pkg/toolset"
)

// Moved from pkg/host (turn_test.go): a sealed turn on the cold path, the
// kind made from its Registration over pkg/sandboxtest's kit and run as
// the host runs an admitted turn (rig.run). How the host maps a turn's
// errors to its answers and metrics, its status and its shutdown stay in
// pkg/host's turn_test.go.

// newColdRig is the sealed turn over a kit without standbys (channel "c"
// and guild:1 on); o changes the kit's options.
func newColdRig(t *testing.T, extra string, o sandboxtest.KitOptions) *rig {
	t.Helper()
	kit := sandboxtest.NewKit(t, extra, o)
	made, err := sealedturn.Registration.New(kit.Deps)
	must(t, err)
	r := &rig{kit: kit, k: made.(*sealedturn.Kind), docker: kit.Docker, units: kit.Units}
	for _, c := range []string{"c", "guild:1"} {
		must(t, kit.Host.State.SetMode(c, chanstate.ModeOn))
	}
	t.Cleanup(r.shutdown)
	return r
}

func TestTurnHappyPath(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	in := turnIn{Channel: "guild:1", SpeakerID: "s1", SpeakerName: "Ann", PrincipalID: "p-special", Text: "hi"}
	reply, id, err := r.run(context.Background(), in)
	must(t, err)
	if !reply.OK || reply.Text != "hello" || ids.ValidTurnID(id) != nil {
		t.Fatalf("reply = %+v, id %q", reply, id)
	}
	r.assertClean(t)
	if len(r.units.Started) != 1 || r.units.Started[0] != id || len(r.units.Stopped) != 1 {
		t.Errorf("units started %v stopped %v", r.units.Started, r.units.Stopped)
	}
	spec := r.docker.Created[0]
	wantName, _ := ids.ContainerName("guild:1", id)
	if spec.Name != wantName || spec.LogTag != "sandbox/guild:1" || spec.Labels[layout.LabelTurn] != id ||
		spec.Labels[layout.LabelChannel] != "guild:1" || spec.Labels[layout.LabelInstallation] != "default" || spec.Labels[layout.LabelDeadline] == "" {
		t.Errorf("container spec = %+v", spec)
	}
	if spec.MemoryMB != 512 || spec.Pids != 64 || spec.CPUs != 1 || spec.TmpfsMB != 64 {
		t.Errorf("limits = %+v", spec)
	}
	p := r.docker.Policies[0]
	if p == nil {
		t.Fatal("no valid policy file at create time")
	}
	if p.Model.Credential != "special-key" {
		t.Errorf("policy credential = %q, want the rule-selected special-key", p.Model.Credential)
	}
	if p.Identity.PrincipalID != "p-special" || p.Identity.SpeakerID != "s1" || p.Identity.Channel != "guild:1" || p.TurnID != id {
		t.Errorf("policy identity = %+v", p.Identity)
	}
	if d := time.Until(p.Deadline()); d < 100*time.Second || d > 121*time.Second {
		t.Errorf("policy deadline in %v, want about 120 s", d)
	}
}

func TestTurnJSONCarriesNoSecrets(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	_, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s1", SpeakerName: "Ann", PrincipalID: "principal-secret-77", Text: "hi"})
	must(t, err)
	stdin := string(r.docker.Stdins[0])
	for _, bad := range []string{"principal-secret-77", "principal", "https://", "api.example.com", "tools.example.com", "mcp.example.com", "special-key", "tool-key", "mcp-key", `"model-key"`, "credential"} {
		if strings.Contains(stdin, bad) {
			t.Errorf("turn JSON contains %q: %s", bad, stdin)
		}
	}
	var turn protocol.Turn
	if err := protocol.DecodeStrict([]byte(stdin), &turn); err != nil {
		t.Fatal(err)
	}
	if turn.Speaker.ID != "s1" || turn.Text != "hi" || turn.Model != "m1" || len(turn.Tools) != 1 || turn.Tools[0].Name != "lookup" ||
		len(turn.MCP) != 1 || turn.MCP[0].Server != "search" || turn.MCP[0].Tools[0].Name != "find" {
		t.Errorf("turn = %+v", turn)
	}
}

func TestDefaultCredential(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	_, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s1", Text: "hi"})
	must(t, err)
	if got := r.docker.Policies[0].Model.Credential; got != "model" {
		t.Errorf("credential = %q, want default model", got)
	}
}

func TestUnitStopFailureIsAnError(t *testing.T) {
	r := newColdRig(t, "", sandboxtest.KitOptions{})
	r.units.StopErr = errors.New("dbus gone")
	if _, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"}); !errors.Is(err, sandbox.ErrCleanup) {
		t.Fatalf("err = %v, want ErrCleanup", err)
	}
}

// TestModelSchemaHasNoDialect: a tool schema's root $schema (accepted as a
// dialect declaration, in a config or from discovery) does not reach the
// model, which some providers refuse over it; the rest of the schema does.
func TestModelSchemaHasNoDialect(t *testing.T) {
	const dialect = `"$schema":"http://json-schema.org/draft-07/schema#",`
	r := newColdRig(t, "", sandboxtest.KitOptions{
		Config: func(c *config.Config) {
			c.Tools[0].Parameters = `{` + dialect + `"type":"object","properties":{"q":{"type":"string","description":"a <query> & more"}}}`
		},
		MCPTools: map[string][]protocol.ToolSpec{"search": {{Name: "find", Description: "Find",
			Parameters: json.RawMessage(`{` + dialect + `"type":"object","properties":{"n":{"type":"number","maximum":1e400}}}`)}}},
	})
	_, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s1", SpeakerName: "Ann", PrincipalID: "p1", Text: "hi"})
	must(t, err)
	var turn protocol.Turn
	if err := protocol.DecodeStrict(r.docker.Stdins[0], &turn); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  json.RawMessage
		want string
	}{
		{"host tool", turn.Tools[0].Parameters, `{"properties":{"q":{"description":"a <query> & more","type":"string"}},"type":"object"}`},
		{"discovered mcp tool", turn.MCP[0].Tools[0].Parameters, `{"properties":{"n":{"maximum":1e400,"type":"number"}},"type":"object"}`},
	}
	decode := func(raw []byte) any {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		return v
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(decode(tt.got), decode([]byte(tt.want))) {
			t.Errorf("%s: parameters %s, want %s", tt.name, tt.got, tt.want)
		}
	}
	if got, want := string(toolset.ModelSchema(json.RawMessage(`{"type":"object"}`))), `{"type":"object"}`; got != want {
		t.Errorf("a schema without $schema: %s, want it unchanged", got)
	}
}

// TestWorkerExitIsLoggedWithItsCause (moved from pkg/host): a worker that
// exits non-zero fails the run and is logged (by the host, as rig.run
// does) with its status, what the status means and the cause its reply
// names; a cause outside protocol's list is never logged. The caller's
// generic error is pkg/host's TestResultOf.
func TestWorkerExitIsLoggedWithItsCause(t *testing.T) {
	for _, tt := range []struct {
		name  string
		res   sandbox.RunResult
		want  []string
		never string
	}{
		{"disk full", sandbox.RunResult{ExitCode: 1, Stdout: []byte(`{"ok":false,"text":"The sandbox worker failed.","cause":"no space left on device"}` + "\n")},
			[]string{`worker exited with status 1 (turn failed); the worker reports: no space left on device`, `"exit_code":1`, `"worker_cause":"no space left on device"`}, ""},
		{"unknown cause", sandbox.RunResult{ExitCode: 1, Stdout: []byte(`{"ok":false,"text":"x","cause":"INJECTED\nlevel=ERROR"}`)},
			[]string{`worker exited with status 1 (turn failed); the worker reported no cause`, `"worker_cause":""`}, "INJECTED"},
		{"killed", sandbox.RunResult{ExitCode: 137},
			[]string{`worker exited with status 137 (killed by SIGKILL: memory limit or forced stop); the worker reported no cause`}, ""},
		{"no reply", sandbox.RunResult{ExitCode: 2, Stdout: []byte("panic: GUESTTEXT")},
			[]string{`worker exited with status 2 (worker crashed)`}, "GUESTTEXT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &sandboxtest.LockedBuffer{}
			r := newColdRig(t, "", sandboxtest.KitOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			r.docker.RunFn = func(context.Context, sandbox.ContainerSpec, []byte) (sandbox.RunResult, error) { return tt.res, nil }
			if _, _, err := r.run(context.Background(), turnIn{Channel: "c", SpeakerID: "s", Text: "x"}); err == nil {
				t.Error("the run did not fail")
			}
			for _, w := range tt.want {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("log lacks %s:\n%s", w, logs.String())
				}
			}
			if tt.never != "" && strings.Contains(logs.String(), tt.never) {
				t.Errorf("log carries worker text %q:\n%s", tt.never, logs.String())
			}
		})
	}
}
