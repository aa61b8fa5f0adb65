package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

func TestFinalTextReplyAndRequestShape(t *testing.T) {
	dir := t.TempDir()
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){textAnswer("  Hi Alice!  ")}}
	r := runTurn(t, dir, newTurn(), b)
	mustOK(t, r)
	if r.reply.Text != "Hi Alice!" {
		t.Errorf("reply = %q, want trimmed %q", r.reply.Text, "Hi Alice!")
	}
	req := b.reqs[0]
	if req.Model != "test-model" || len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" {
		t.Fatalf("request = %+v", req)
	}
	if want := `{"speaker":{"id":"u1","name":"Alice"},"message":"hello there"}`; req.Messages[1].Content != want {
		t.Errorf("user content = %s, want %s", req.Messages[1].Content, want)
	}
	var names []string
	for _, tool := range req.Tools {
		names = append(names, tool.Function.Name)
	}
	if got := strings.Join(names, ","); got != "invalid_tool,memory_set,memory_get,memory_remove" {
		t.Errorf("tools = %s", got)
	}
}

func TestModelCallLimit(t *testing.T) {
	dir := t.TempDir()
	b := &fakeBroker{repeat: toolAnswer(call("c", "memory_get", `{"scope":"channel"}`))}
	r := runTurn(t, dir, newTurn(), b)
	if r.err != nil {
		t.Fatalf("err = %v, want the limit reply", r.err)
	}
	if r.reply != (protocol.Reply{OK: false, Text: "The sandbox turn reached its model-call limit."}) {
		t.Errorf("reply = %+v", r.reply)
	}
	if len(b.reqs) != MaxModelCalls || MaxModelCalls != 12 {
		t.Errorf("model calls = %d, want 12", len(b.reqs))
	}
	if _, err := os.Stat(filepath.Join(dir, HistoryFile)); !os.IsNotExist(err) {
		t.Errorf("limit reply wrote history (stat %v)", err)
	}
	// The 12th call may still finish the turn.
	b2 := &fakeBroker{}
	for i := 0; i < 11; i++ {
		b2.model = append(b2.model, toolAnswer(call("c", "memory_get", `{"scope":"channel"}`)))
	}
	b2.model = append(b2.model, textAnswer("done"))
	mustOK(t, runTurn(t, t.TempDir(), newTurn(), b2))
}

func TestToolCallsPerResponse(t *testing.T) {
	for _, n := range []int{8, 9, 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var calls []map[string]any
			for i := 0; i < n; i++ {
				calls = append(calls, call(fmt.Sprintf("c%d", i), "host_echo", `{}`))
			}
			turn := newTurn()
			turn.Tools = []protocol.ToolSpec{{Name: "echo", Description: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}}
			b := &fakeBroker{
				model: []func(modelRequest) (json.RawMessage, error){toolAnswer(calls...), textAnswer("ok")},
				tools: map[string]func([]byte) (json.RawMessage, error){"/tools/echo": func([]byte) (json.RawMessage, error) {
					return json.RawMessage(`{"result":"e"}`), nil
				}},
			}
			r := runTurn(t, t.TempDir(), turn, b)
			if n <= 8 {
				mustOK(t, r)
				if got := len(b.toolCalls()); got != n {
					t.Errorf("tool calls run = %d, want %d", got, n)
				}
				return
			}
			mustFail(t, r, "tool calls in one response")
			if got := len(b.toolCalls()); got != 0 {
				t.Errorf("refused response still ran %d tools", got)
			}
		})
	}
}

func TestInvalidToolPlaceholder(t *testing.T) {
	tests := []struct {
		name string
		fn   any // the "function" member
	}{
		{"unknown", map[string]any{"name": "delete_everything", "arguments": `{}`}},
		{"malformed", map[string]any{"name": "Memory-Get!", "arguments": `{}`}},
		{"undeclared host", map[string]any{"name": "host_shell", "arguments": `{}`}},
		{"invalid_tool itself", map[string]any{"name": "invalid_tool", "arguments": `{}`}},
		{"non-string name", map[string]any{"name": 7, "arguments": `{}`}},
		{"missing name", map[string]any{"arguments": `{}`}},
		{"function not object", "memory_get"},
		{"too long", map[string]any{"name": strings.Repeat("a", 65), "arguments": `{}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){
				answer(mustJSON(map[string]any{"choices": []any{map[string]any{"message": map[string]any{
					"tool_calls": []any{map[string]any{"id": "x1", "type": "function", "function": tt.fn}},
				}}}})),
				textAnswer("ok"),
			}}
			mustOK(t, runTurn(t, dir, newTurn(), b))
			msgs := b.reqs[1].Messages
			asst, tool := msgs[len(msgs)-2], msgs[len(msgs)-1]
			if len(asst.ToolCalls) != 1 || asst.ToolCalls[0].Function.Name != InvalidToolName {
				t.Errorf("assistant tool calls = %+v, want one invalid_tool", asst.ToolCalls)
			}
			if tool.Role != "tool" || tool.ToolCallID != "x1" || tool.Content != ToolFailedText {
				t.Errorf("tool reply = %+v, want the refusal for x1", tool)
			}
			if len(b.toolCalls()) != 0 {
				t.Errorf("broker tool routes called: %v", b.toolCalls())
			}
			if s := readFile(t, filepath.Join(dir, "history.json")); strings.Contains(s, "delete_everything") {
				t.Errorf("history holds a tool transcript: %s", s)
			}
		})
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestCallIDNormalization(t *testing.T) {
	get := `{"scope":"channel"}`
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){
		toolAnswer(
			call("a", "memory_get", get),
			call("a", "memory_get", get),                     // duplicate
			call("bad id!", "memory_get", get),               // invalid characters
			call(nil, "memory_get", get),                     // missing
			call(123, "memory_get", get),                     // not a string
			call(strings.Repeat("x", 65), "memory_get", get), // too long
			call("call_0_7", "memory_get", get),              // collides with a generated id below
			call("", "memory_get", get),                      // empty
		),
		toolAnswer(
			call("a", "memory_get", get),        // reused from step 0
			call("call_1_0", "memory_get", get), // taken by the call above
		),
		toolAnswer(
			call("call_2_2", "memory_get", get),
			call("call_2_2_1", "memory_get", get),
			call("x!", "memory_get", get), // call_2_2 and call_2_2_1 are both taken
		),
		textAnswer("ok"),
	}}
	mustOK(t, runTurn(t, t.TempDir(), newTurn(), b))
	msgs := b.reqs[3].Messages
	var want = [][]string{
		{"a", "call_0_1", "call_0_2", "call_0_3", "call_0_4", "call_0_5", "call_0_7", "call_0_7_1"},
		{"call_1_0", "call_1_1"},
		{"call_2_2", "call_2_2_1", "call_2_2_2"},
	}
	i := 2 // after system and user
	for g, ids := range want {
		asst := msgs[i]
		if asst.Role != "assistant" || len(asst.ToolCalls) != len(ids) {
			t.Fatalf("group %d: message %+v", g, asst)
		}
		for k, id := range ids {
			if got := asst.ToolCalls[k].ID; got != id {
				t.Errorf("group %d call %d: assistant id %q, want %q", g, k, got, id)
			}
			reply := msgs[i+1+k]
			if reply.Role != "tool" || reply.ToolCallID != id {
				t.Errorf("group %d call %d: tool reply id %q role %s, want %q", g, k, reply.ToolCallID, reply.Role, id)
			}
		}
		i += 1 + len(ids)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if seen[c.ID] || !protocol.ValidCallID(c.ID) {
				t.Errorf("id %q duplicate or invalid", c.ID)
			}
			seen[c.ID] = true
		}
	}
}

func TestArgumentsBoundAndOmittedMarker(t *testing.T) {
	turn := newTurn()
	turn.Tools = []protocol.ToolSpec{{Name: "echo", Description: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}}
	fits := `{"v":"` + strings.Repeat("a", MaxArgumentBytes-14) + `"}` // JSON-encoded: exactly 2048 bytes
	if n := jsonStringLen(fits); n != MaxArgumentBytes {
		t.Fatalf("setup: fits encodes to %d", n)
	}
	large := `{"v":"` + strings.Repeat("a", MaxArgumentBytes-13) + `"}`
	var bodies []string
	b := &fakeBroker{
		model: []func(modelRequest) (json.RawMessage, error){
			toolAnswer(call("a", "host_echo", fits), call("b", "host_echo", large), call("c", "host_echo", 42), call("d", "host_echo", "not json"), call("e", "host_echo", `[1]`)),
			textAnswer("ok"),
		},
		tools: map[string]func([]byte) (json.RawMessage, error){"/tools/echo": func(body []byte) (json.RawMessage, error) {
			bodies = append(bodies, string(body))
			return json.RawMessage(`{"result":"done"}`), nil
		}},
	}
	mustOK(t, runTurn(t, t.TempDir(), turn, b))
	calls := b.reqs[1].Messages[2].ToolCalls
	wantArgs := []string{fits, OmittedArguments, OmittedArguments, "not json", "[1]"}
	for i, w := range wantArgs {
		if calls[i].Function.Arguments != w {
			t.Errorf("call %d arguments = %.60q, want %.60q", i, calls[i].Function.Arguments, w)
		}
	}
	// The object arguments ran (the large one too, as the reference does); the others were refused.
	if len(bodies) != 2 || bodies[0] != fits || bodies[1] != large {
		t.Errorf("tool bodies = %d, want the two object arguments", len(bodies))
	}
	for i, want := range []string{`"done"`, `"done"`, ToolFailedText, ToolFailedText, ToolFailedText} {
		if got := b.reqs[1].Messages[3+i].Content; got != want {
			t.Errorf("tool reply %d = %q, want %q", i, got, want)
		}
	}
}

func TestHostAndMCPRoutes(t *testing.T) {
	turn := newTurn()
	turn.Tools = []protocol.ToolSpec{{Name: "clock", Description: "time", Parameters: json.RawMessage(`{"type":"object"}`)}}
	turn.MCP = []protocol.MCPServerSpec{
		{Server: "docs", Tools: []protocol.ToolSpec{{Name: "search", Description: "s", Parameters: json.RawMessage(`{"type":"object"}`)}}},
		{Server: "wiki", Tools: []protocol.ToolSpec{{Name: "search", Description: "s", Parameters: json.RawMessage(`{"type":"object"}`)}}},
	}
	var mcpBodies []map[string]any
	b := &fakeBroker{
		model: []func(modelRequest) (json.RawMessage, error){
			toolAnswer(call("a", "host_clock", `{"fmt":"iso"}`), call("b", "mcp_1_search", `{"q":"go"}`), call("c", "mcp_0_search", `{"q":"x"}`)),
			textAnswer("ok"),
		},
		tools: map[string]func([]byte) (json.RawMessage, error){
			"/tools/clock": func(body []byte) (json.RawMessage, error) {
				if string(body) != `{"fmt":"iso"}` {
					t.Errorf("host tool body = %s, want the arguments", body)
				}
				return json.RawMessage(`{"result": "2026-01-15T12:00:00Z"}`), nil
			},
			"/mcp/wiki": func(body []byte) (json.RawMessage, error) {
				var m map[string]any
				json.Unmarshal(body, &m)
				mcpBodies = append(mcpBodies, m)
				return json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":{"content":[{"type":"text","text":"hit"}]}}`, m["id"])), nil
			},
			"/mcp/docs": func(body []byte) (json.RawMessage, error) {
				return json.RawMessage(`{"jsonrpc":"2.0","id":999,"result":{}}`), nil // wrong id
			},
		},
	}
	mustOK(t, runTurn(t, t.TempDir(), turn, b))
	var names []string
	for _, tool := range b.reqs[0].Tools {
		names = append(names, tool.Function.Name)
	}
	if got := strings.Join(names, ","); got != "invalid_tool,memory_set,memory_get,memory_remove,host_clock,mcp_0_search,mcp_1_search" {
		t.Errorf("tool names = %s", got)
	}
	if len(mcpBodies) != 1 {
		t.Fatalf("mcp calls = %d", len(mcpBodies))
	}
	m := mcpBodies[0]
	params, _ := m["params"].(map[string]any)
	if m["jsonrpc"] != "2.0" || m["method"] != "tools/call" || params["name"] != "search" || mustJSON(params["arguments"]) != `{"q":"go"}` {
		t.Errorf("mcp body = %v", m)
	}
	msgs := b.reqs[1].Messages
	for i, want := range []string{`"2026-01-15T12:00:00Z"`, `{"content":[{"type":"text","text":"hit"}]}`, ToolFailedText} {
		if got := msgs[3+i].Content; got != want {
			t.Errorf("tool reply %d = %s, want %s", i, got, want)
		}
	}
}

// TestMCPFunctionNamesMapBack: tools named as the MCP specification allows
// (the reference server's get-sum, names that sanitize alike such as a.b and
// a_b, long names cut alike) each get their own valid function name, and a
// call of that name reaches the broker with the exact tool name.
func TestMCPFunctionNamesMapBack(t *testing.T) {
	long := strings.Repeat("n", 100)
	tools := []string{"get-sum", "a.b", "a_b", "a-b", "Get_Tiny-Image", long + ".1", long + ".2", strings.Repeat(".", 128)}
	turn := newTurn()
	var specs []protocol.ToolSpec
	for _, name := range tools {
		specs = append(specs, protocol.ToolSpec{Name: name, Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	turn.MCP = []protocol.MCPServerSpec{{Server: "everything", Tools: specs}}
	if err := turn.Validate(); err != nil {
		t.Fatalf("turn refused: %v", err)
	}
	var calls []map[string]any
	for i, name := range tools {
		calls = append(calls, call(fmt.Sprintf("c%d", i), protocol.MCPFunctionName(0, name), fmt.Sprintf(`{"i":%d}`, i)))
	}
	var got []string
	b := &fakeBroker{
		model: []func(modelRequest) (json.RawMessage, error){toolAnswer(calls...), textAnswer("ok")},
		tools: map[string]func([]byte) (json.RawMessage, error){
			"/mcp/everything": func(body []byte) (json.RawMessage, error) {
				var m struct {
					ID     int `json:"id"`
					Params struct {
						Name      string          `json:"name"`
						Arguments json.RawMessage `json:"arguments"`
					} `json:"params"`
				}
				if err := json.Unmarshal(body, &m); err != nil {
					t.Errorf("mcp body %s: %v", body, err)
				}
				got = append(got, m.Params.Name+" "+string(m.Params.Arguments))
				return json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}`, m.ID)), nil
			},
		},
	}
	// At most 8 calls run per answer; the list is exactly 8.
	mustOK(t, runTurn(t, t.TempDir(), turn, b))
	var want []string
	for i, name := range tools {
		want = append(want, fmt.Sprintf(`%s {"i":%d}`, name, i))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("broker saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	seen := map[string]bool{}
	for _, tool := range b.reqs[0].Tools {
		n := tool.Function.Name
		if !protocol.ValidFunctionName(n) || seen[n] {
			t.Errorf("function name %q invalid or repeated", n)
		}
		seen[n] = true
	}
	if len(seen) != 4+len(tools) {
		t.Errorf("model saw %d functions, want %d", len(seen), 4+len(tools))
	}
	for _, want := range []string{"mcp_0_get-sum", "mcp_0_a_b", "mcp_0_a-b", "mcp_0_Get_Tiny-Image"} {
		if !seen[want] {
			t.Errorf("function %q missing; model saw %v", want, seen)
		}
	}
}

func TestBrokerRefusals(t *testing.T) {
	turn := newTurn()
	turn.Tools = []protocol.ToolSpec{{Name: "echo", Description: "e", Parameters: json.RawMessage(`{"type":"object"}`)}}
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){
		toolAnswer(call("a", "host_echo", `{}`)), // no handler: 403
		textAnswer("ok"),
	}}
	r := runTurn(t, t.TempDir(), turn, b)
	mustOK(t, r)
	if got := b.reqs[1].Messages[3].Content; got != ToolFailedText {
		t.Errorf("refused tool reply = %q", got)
	}
	if !strings.Contains(r.logs, `"tool":"host_echo"`) || !strings.Contains(r.logs, `"status":403`) {
		t.Errorf("logs lack the tool name and status: %s", r.logs)
	}
	// A refused model call fails the turn.
	r = runTurn(t, t.TempDir(), newTurn(), &fakeBroker{})
	mustFail(t, r, "model call 1 failed")
	if !strings.Contains(r.logs, `"status":429`) {
		t.Errorf("logs lack the model refusal status: %s", r.logs)
	}
}

func TestInvalidModelResponses(t *testing.T) {
	for name, raw := range map[string]string{
		"not object":      `[1]`,
		"no choices":      `{}`,
		"empty choices":   `{"choices":[]}`,
		"choice null":     `{"choices":[null]}`,
		"no message":      `{"choices":[{}]}`,
		"message string":  `{"choices":[{"message":"hi"}]}`,
		"empty content":   `{"choices":[{"message":{"content":"   "}}]}`,
		"null content":    `{"choices":[{"message":{"content":null}}]}`,
		"content number":  `{"choices":[{"message":{"content":5}}]}`,
		"empty tool list": `{"choices":[{"message":{"content":"","tool_calls":[]}}]}`,
		"too many bytes":  mustJSON(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"content": "a" + strings.Repeat("\u0001", 90_000)}}}}),
		"too long":        mustJSON(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"content": strings.Repeat("a", protocol.MaxReplyChars+1)}}}}),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			r := runTurn(t, dir, newTurn(), &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){answer(raw)}})
			mustFail(t, r, "")
			if _, err := os.Stat(filepath.Join(dir, HistoryFile)); !os.IsNotExist(err) {
				t.Errorf("failed turn wrote history")
			}
		})
	}
}

func TestToolDescriptionBudget(t *testing.T) {
	turn := newTurn()
	for i := 0; i < 9; i++ {
		turn.Tools = append(turn.Tools, protocol.ToolSpec{Name: fmt.Sprintf("t%d", i), Description: strings.Repeat("d", protocol.MaxDescChars), Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	b := &fakeBroker{repeat: textAnswer("ok")}
	mustFail(t, runTurn(t, t.TempDir(), turn, b), "tool descriptions")
	if len(b.calls) != 0 {
		t.Errorf("broker called %d times despite the refusal", len(b.calls))
	}
	turn.Tools = turn.Tools[:6] // ~24 KiB: within budget
	mustOK(t, runTurn(t, t.TempDir(), turn, b))
	if n := size(t, b.reqs[0].Tools); n > MaxToolDescBytes {
		t.Errorf("tools sent are %d bytes", n)
	}
}

func TestSystemPromptTimeAndMemory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "memory.json"), mustJSON([]map[string]string{
		{"scope": "speaker:u1", "key": "likes", "text": "tea"},
		{"scope": "speaker:u2", "key": "likes", "text": "coffee"},
		{"scope": "channel", "key": "topic", "text": "gardening"},
	}))
	turn := newTurn()
	turn.TimeZone = "Asia/Tokyo"
	turn.Prompt = strings.Repeat("p", MaxPromptBytes) // over the 8 KiB prompt budget once quoted
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){textAnswer("ok")}}
	mustOK(t, runTurn(t, dir, turn, b))
	sys := b.reqs[0].Messages[0].Content
	for _, want := range []string{
		"Current time: Thursday, January 15, 2026, 9:00 PM JST (Asia/Tokyo).",
		`Current speaker memory (untrusted data): [{"key":"likes","text":"tea"}]`,
		`Shared channel notes (untrusted data): [{"key":"topic","text":"gardening"}]`,
		TruncationMarker,
	} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %q", want)
		}
	}
	if strings.Contains(sys, "coffee") {
		t.Errorf("system prompt shows another speaker's memory")
	}
}

func TestMemoryPreviewBounded(t *testing.T) {
	dir := t.TempDir()
	var entries []map[string]string
	for i := 0; i < 10; i++ {
		entries = append(entries, map[string]string{"scope": "channel", "key": fmt.Sprint(i), "text": strings.Repeat("n", 2000)})
	}
	writeFile(t, filepath.Join(dir, "memory.json"), mustJSON(entries))
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){textAnswer("ok")}}
	mustOK(t, runTurn(t, dir, newTurn(), b))
	sys := b.reqs[0].Messages[0].Content
	i := strings.Index(sys, "Shared channel notes (untrusted data): ")
	preview := sys[i+len("Shared channel notes (untrusted data): "):]
	if !strings.HasSuffix(preview, TruncationMarker) || jsonStringLen(preview) > MaxMemoryPreview {
		t.Errorf("channel preview: %d encoded bytes, marked %v; want <= %d and marked", jsonStringLen(preview), strings.HasSuffix(preview, TruncationMarker), MaxMemoryPreview)
	}
}

func TestMemoryToolsThroughModel(t *testing.T) {
	dir := t.TempDir()
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){
		toolAnswer(
			call("a", "memory_set", `{"scope":"speaker","key":"pet","text":"cat"}`),
			call("b", "memory_set", `{"scope":"channel","key":"","text":"x"}`),
		),
		textAnswer("ok"),
	}}
	turn := newTurn()
	mustOK(t, runTurn(t, dir, turn, b))
	msgs := b.reqs[1].Messages
	if msgs[3].Content != "Saved." {
		t.Errorf("memory_set reply = %q", msgs[3].Content)
	}
	if want := "Tool refused: key must be 1 to 128 characters."; msgs[4].Content != want {
		t.Errorf("refused memory_set reply = %q, want %q", msgs[4].Content, want)
	}
	if got := readFile(t, filepath.Join(dir, "memory.json")); got != `[{"scope":"speaker:u1","key":"pet","text":"cat"}]` {
		t.Errorf("memory.json = %s", got)
	}
}

// TestNoMemoryTurn: a research turn (noMemory) offers no memory tool and
// shows no memory preview; a memory call is the invalid-tool placeholder.
func TestNoMemoryTurn(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memory.json"), []byte(`[{"scope":"channel","key":"k","text":"CHANNEL-NOTE"}]`), 0o600)
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){
		toolAnswer(call("a", "memory_get", `{"scope":"channel"}`)),
		textAnswer("report"),
	}}
	turn := newTurn()
	turn.NoMemory = true
	r := runTurn(t, dir, turn, b)
	mustOK(t, r)
	var names []string
	for _, tool := range b.reqs[0].Tools {
		names = append(names, tool.Function.Name)
	}
	if got := strings.Join(names, ","); got != "invalid_tool" {
		t.Errorf("tools = %s, want invalid_tool only", got)
	}
	if sys := b.reqs[0].Messages[0].Content; strings.Contains(sys, "memory") || strings.Contains(sys, "CHANNEL-NOTE") {
		t.Errorf("system prompt shows memory: %s", sys)
	}
	if strings.Contains(fmt.Sprint(b.reqs[1].Messages), "CHANNEL-NOTE") {
		t.Errorf("a memory call reached the store")
	}
}
