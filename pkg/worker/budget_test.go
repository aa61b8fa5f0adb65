package worker

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// checkNoOrphans asserts every tool reply follows the assistant message that
// carries its call id, and every call has its reply.
func checkNoOrphans(t *testing.T, step int, msgs []chatMessage) {
	t.Helper()
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == "tool" {
			t.Fatalf("request %d: orphan tool reply at %d (%s)", step, i, m.ToolCallID)
		}
		if m.Role != "assistant" || len(m.ToolCalls) == 0 {
			continue
		}
		for k, c := range m.ToolCalls {
			if i+1+k >= len(msgs) || msgs[i+1+k].Role != "tool" || msgs[i+1+k].ToolCallID != c.ID {
				t.Fatalf("request %d: call %s at %d lacks its paired reply", step, c.ID, i)
			}
		}
		i += len(m.ToolCalls)
	}
}

func TestBudgetDropsOldHistoryFirst(t *testing.T) {
	dir := t.TempDir()
	// 20 stored entries of ~8 KiB plus a 48 KiB user context exceed 192 KiB.
	writeFile(t, filepath.Join(dir, HistoryFile), historyJSON(20, func(i int) string {
		return fmt.Sprintf("H%02d ", i) + strings.Repeat("h", MaxHistoryEntryBytes-10)
	}))
	turn := newTurn()
	turn.Text = strings.Repeat("\u0001", protocol.MaxTextChars) // 6 encoded bytes each: over 48 KiB
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){textAnswer("ok")}}
	r := runTurn(t, dir, turn, b)
	mustOK(t, r)
	req := b.reqs[0]
	if n := size(t, req); n > MaxRequestBytes {
		t.Fatalf("request is %d bytes, budget %d", n, MaxRequestBytes)
	}
	msgs := req.Messages
	user := msgs[len(msgs)-1]
	if user.Role != "user" || !strings.HasSuffix(user.Content, TruncationMarker) || jsonStringLen(user.Content) > MaxUserContextBytes {
		t.Errorf("current user context not bounded and marked (%d encoded bytes)", jsonStringLen(user.Content))
	}
	kept := msgs[1 : len(msgs)-1]
	if len(kept) == 0 || len(kept) >= 20 {
		t.Fatalf("kept %d history messages, want some dropped and some kept", len(kept))
	}
	// The newest history survives: the kept entries are the stored suffix.
	first := 20 - len(kept)
	for k, m := range kept {
		if want := fmt.Sprintf("H%02d ", first+k); !strings.HasPrefix(m.Content, want) {
			t.Errorf("kept history[%d] starts %.4q, want %q (oldest must go first)", k, m.Content, want)
		}
	}
	if !strings.Contains(r.logs, `"msg":"context trimmed"`) {
		t.Errorf("trim not logged: %s", r.logs)
	}
}

func TestBudgetDropsWholeGroupsNeverOrphans(t *testing.T) {
	turn := newTurn()
	turn.Text = strings.Repeat("\u0001", protocol.MaxTextChars)
	turn.Tools = []protocol.ToolSpec{{Name: "big", Description: "b", Parameters: json.RawMessage(`{"type":"object"}`)}}
	// Some history too, which must be gone before any group is dropped.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, HistoryFile), historyJSON(4, func(i int) string { return fmt.Sprintf("old%d", i) }))
	bigArgs := `{"pad":"` + strings.Repeat("x", 1900) + `"}`
	var b *fakeBroker
	b = &fakeBroker{
		repeat: func(req modelRequest) (json.RawMessage, error) {
			step := len(b.reqs) - 1
			var calls []map[string]any
			for i := 0; i < MaxToolCallsPerReply; i++ {
				calls = append(calls, call(fmt.Sprintf("s%dc%d", step, i), "host_big", bigArgs))
			}
			return toolAnswer(calls...)(req)
		},
		tools: map[string]func([]byte) (json.RawMessage, error){"/tools/big": func([]byte) (json.RawMessage, error) {
			return json.RawMessage(`{"result":"` + strings.Repeat("r", 8000) + `"}`), nil
		}},
	}
	r := runTurn(t, dir, turn, b)
	if r.err != nil || r.reply.Text != LimitReplyText {
		t.Fatalf("want the limit reply, got %+v %v", r.reply, r.err)
	}
	dropped := false
	for step, req := range b.reqs {
		if n := size(t, req); n > MaxRequestBytes {
			t.Errorf("request %d is %d bytes, budget %d", step, n, MaxRequestBytes)
		}
		msgs := req.Messages
		if msgs[0].Role != "system" {
			t.Fatalf("request %d: first message %s", step, msgs[0].Role)
		}
		userAt := 1
		for msgs[userAt].Role != "user" || !strings.HasPrefix(msgs[userAt].Content, `{"speaker"`) {
			userAt++
		}
		checkNoOrphans(t, step, msgs[userAt+1:])
		groups := (len(msgs) - userAt - 1) / (1 + MaxToolCallsPerReply)
		if groups < step {
			dropped = true
			if userAt != 1 {
				t.Errorf("request %d dropped a tool group while %d history messages remained", step, userAt-1)
			}
			// The groups kept are the newest ones.
			if first := msgs[userAt+1].ToolCalls[0].ID; first != fmt.Sprintf("s%dc0", step-groups) {
				t.Errorf("request %d: oldest kept group %s, want s%dc0", step, first, step-groups)
			}
		}
		for _, m := range msgs {
			if m.Role == "tool" && (jsonStringLen(m.Content) > MaxToolResultBytes || !strings.HasSuffix(m.Content, TruncationMarker)) {
				t.Errorf("request %d: tool result not bounded and marked", step)
				break
			}
		}
	}
	if !dropped {
		t.Fatalf("no tool group was ever dropped; the test does not exercise the budget")
	}
}

func TestContextWindowFailsWhenNothingLeftToDrop(t *testing.T) {
	c := &contextWindow{model: "m", messages: []chatMessage{
		{Role: "system", Content: strings.Repeat("s", MaxRequestBytes)},
		{Role: "user", Content: "u"},
	}}
	if _, _, err := c.fit(); err == nil || !strings.Contains(err.Error(), "request budget") {
		t.Errorf("fit = %v, want a request budget error", err)
	}
	// Exact size accounting matches the encoder.
	c = &contextWindow{model: "m", tools: []modelTool{{Type: "function", Function: protocol.ToolSpec{Name: "x", Parameters: json.RawMessage(`{ "type" : "object" }`)}}}, messages: []chatMessage{
		{Role: "system", Content: "<s>&"}, {Role: "user", Content: "\u2028u"},
		{Role: "assistant", ToolCalls: []toolCall{{ID: "a", Type: "function", Function: toolFunction{Name: "x", Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: "a", Content: "r"},
	}}
	got, err := c.size()
	if want := size(t, c.request()); err != nil || got != want {
		t.Errorf("size = %d (%v), want %d", got, err, want)
	}
}
