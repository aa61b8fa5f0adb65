package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

func TestMain_ExitCodesAndOneReply(t *testing.T) {
	valid := `{"text":"hi","speaker":{"id":"u","name":"n"},"model":"m","prompt":"p","timeZone":"UTC","reset":false,"tools":[],"mcp":[]}`
	tests := []struct {
		name   string
		stdin  string
		broker *fakeBroker
		code   int
		reply  protocol.Reply
	}{
		{"ok", valid, &fakeBroker{repeat: textAnswer("hello")}, 0, protocol.Reply{OK: true, Text: "hello"}},
		{"limit", valid, &fakeBroker{repeat: toolAnswer(call("a", "memory_get", `{"scope":"channel"}`))}, 0, protocol.Reply{OK: false, Text: LimitReplyText}},
		{"model refused", valid, &fakeBroker{}, 1, protocol.Reply{OK: false, Text: FailedReplyText, Cause: protocol.CauseBroker}},
		{"invalid turn", `{"text":1}`, &fakeBroker{repeat: textAnswer("x")}, 1, protocol.Reply{OK: false, Text: FailedReplyText, Cause: protocol.CauseInvalidTurn}},
		{"unknown field", strings.Replace(valid, `"mcp":[]`, `"mcp":[],"workspace":"/etc"`, 1), &fakeBroker{repeat: textAnswer("x")}, 1, protocol.Reply{OK: false, Text: FailedReplyText, Cause: protocol.CauseInvalidTurn}},
		{"oversized", `{"text":"` + strings.Repeat("a", protocol.MaxTurnBytes) + `"}`, &fakeBroker{repeat: textAnswer("x")}, 1, protocol.Reply{OK: false, Text: FailedReplyText, Cause: protocol.CauseInvalidTurn}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, logs bytes.Buffer
			code := Main(context.Background(), strings.NewReader(tt.stdin), &out, Options{
				Broker: tt.broker, Workspace: t.TempDir(), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			})
			if code != tt.code {
				t.Errorf("exit code %d, want %d (logs %s)", code, tt.code, logs.String())
			}
			reply, err := protocol.DecodeReply(out.Bytes())
			if err != nil {
				t.Fatalf("stdout %q is not exactly one reply: %v", out.String(), err)
			}
			if *reply != tt.reply {
				t.Errorf("reply %+v, want %+v", *reply, tt.reply)
			}
			// The host answers at the final frame of a worker that exits 0
			// (docs/sealed-turns.md): exactly such a stdout is one.
			if _, err := protocol.DecodeReplyFrame(out.Bytes()); (err == nil) != (tt.code == 0) {
				t.Errorf("stdout %q as a final frame: %v; want a frame exactly when the exit code is 0", out.String(), err)
			}
			dec := json.NewDecoder(&out)
			n := 0
			for dec.More() {
				var v any
				if dec.Decode(&v) != nil {
					break
				}
				n++
			}
			if n != 1 {
				t.Errorf("stdout holds %d JSON values, want 1", n)
			}
		})
	}
}

// TestLogsCarryNoPayloads runs a turn full of marked payloads through every
// logging path and checks none reaches the log.
func TestLogsCarryNoPayloads(t *testing.T) {
	secrets := []string{"TEXTSECRET", "MEMSECRET", "ARGSECRET", "RESULTSECRET", "REPLYSECRET", "PROMPTSECRET", "NAMESECRET", "CONTENTSECRET"}
	dir := t.TempDir()
	writeFile(t, dir+"/memory.json", `[{"scope":"channel","key":"k","text":"MEMSECRET"}]`)
	turn := newTurn()
	turn.Text = "TEXTSECRET " + strings.Repeat("\u0001", 20000)
	turn.Prompt = "PROMPTSECRET"
	turn.Speaker.Name = "NAMESECRET"
	turn.Tools = []protocol.ToolSpec{{Name: "t", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)}}
	b := &fakeBroker{
		model: []func(modelRequest) (json.RawMessage, error){
			answer(mustJSON(map[string]any{"choices": []any{map[string]any{"message": map[string]any{
				"content": "CONTENTSECRET",
				"tool_calls": []any{
					call("a", "host_t", `{"q":"ARGSECRET"}`),
					call("b", "host_missing_ARGSECRET", `{"q":"ARGSECRET"}`),
					call("c", "memory_set", `{"scope":"channel","key":"","text":"MEMSECRET"}`),
					call("d", "memory_get", `{"scope":"channel","query":"MEMSECRET"}`),
				},
			}}}})),
			textAnswer("REPLYSECRET " + strings.Repeat("x", 9000)),
		},
		tools: map[string]func([]byte) (json.RawMessage, error){"/tools/t": func([]byte) (json.RawMessage, error) {
			return nil, &RefusedError{Status: 502}
		}},
	}
	r := runTurn(t, dir, turn, b)
	mustOK(t, r)
	for _, s := range secrets {
		if strings.Contains(r.logs, s) {
			t.Errorf("log carries %s:\n%s", s, r.logs)
		}
	}
	for _, want := range []string{`"tool":"host_t"`, `"status":502`, `"msg":"turn finished"`, `"model_calls":2`, `"duration_ms"`, `"msg":"text truncated"`} {
		if !strings.Contains(r.logs, want) {
			t.Errorf("log lacks %s:\n%s", want, r.logs)
		}
	}
}
