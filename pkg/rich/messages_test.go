package rich

import (
	"encoding/json"
	"strings"
	"testing"
)

func ent(typ, id string, blocks ...ContentBlock) Entry {
	return Entry{Type: typ, ID: id, Content: mustJSON(blocks)}
}

func txt(s string) ContentBlock { return ContentBlock{Type: BlockText, Text: s} }
func call(id string) ContentBlock {
	return ContentBlock{Type: BlockToolUse, ID: id, Name: "memory_get", Input: json.RawMessage(`{}`)}
}
func result(id string) ContentBlock {
	return ContentBlock{Type: BlockToolResult, ToolUseID: id, Content: []ContentBlock{txt("r")}}
}

// shape renders messages as role:block-kinds for comparison.
func shape(msgs []Message) string {
	var parts []string
	for _, m := range msgs {
		var kinds []string
		for _, b := range m.Content {
			k := b.Type
			switch b.Type {
			case BlockToolUse:
				k = "use(" + b.ID + ")"
			case BlockToolResult:
				k = "result(" + b.ToolUseID + ")"
				if b.IsError {
					k = "missing(" + b.ToolUseID + ")"
				}
			case BlockText:
				k = "text(" + b.Text + ")"
			}
			kinds = append(kinds, k)
		}
		parts = append(parts, m.Role[:1]+":"+strings.Join(kinds, ","))
	}
	return strings.Join(parts, " ")
}

func TestBuildMessagesRepairs(t *testing.T) {
	tests := []struct {
		name string
		ctx  SessionContext
		want string
	}{
		{"plain", SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", txt("b")), ent(TypeUser, "3", txt("c"))}},
			"u:text(a) a:text(b) u:text(c)"},
		{"consecutive users merge (a failed turn)", SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeUser, "2", txt("b"))}},
			"u:text(a),text(b)"},
		{"unanswered call (crash before its result)", SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", call("x")), ent(TypeUser, "3", txt("c"))}},
			"u:text(a) a:use(x) u:missing(x),text(c)"},
		{"unanswered call at the end", SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", call("x"), call("y"))}},
			"u:text(a) a:use(x),use(y) u:missing(x),missing(y)"},
		{"half answered", SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", call("x"), call("y")), ent(TypeToolResult, "3", result("y"))}},
			"u:text(a) a:use(x),use(y) u:result(y),missing(x)"},
		{"orphan result after compaction", SessionContext{Summary: "S", Messages: []Entry{ent(TypeToolResult, "3", result("y")), ent(TypeAssistant, "4", txt("b")), ent(TypeUser, "5", txt("c"))}},
			"u:text(" + summaryPrefix + "S) a:text(b) u:text(c)"},
		{"starts with the assistant (split turn kept)", SessionContext{Summary: "S", Messages: []Entry{ent(TypeAssistant, "4", call("z")), ent(TypeToolResult, "5", result("z"))}},
			"u:text(" + summaryPrefix + "S) a:use(z) u:result(z)"},
		{"result for another call", SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", call("x")), ent(TypeToolResult, "3", result("q"))}},
			"u:text(a) a:use(x) u:missing(x)"},
		{"empty text dropped", SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", txt("")), ent(TypeUser, "3", txt("c"))}},
			"u:text(a),text(c)"},
		{"empty context", SessionContext{}, "u:text((The conversation continues.))"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := shape(buildMessages(tt.ctx, nil, false)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestBuildMessagesThinkingOnlyThisTurn(t *testing.T) {
	th := ContentBlock{Type: BlockThinking, Thinking: "t", Signature: "s"}
	unsigned := ContentBlock{Type: BlockThinking, Thinking: "t"}
	c := SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "old", th, txt("b")),
		ent(TypeUser, "3", txt("c")), ent(TypeAssistant, "new", th, unsigned, call("x")), ent(TypeToolResult, "5", result("x"))}}
	mine := map[string]bool{"new": true}
	if got, want := shape(buildMessages(c, mine, true)), "u:text(a) a:text(b) u:text(c) a:thinking,use(x) u:result(x)"; got != want {
		t.Errorf("thinking on: got %s, want %s", got, want)
	}
	if got, want := shape(buildMessages(c, mine, false)), "u:text(a) a:text(b) u:text(c) a:use(x) u:result(x)"; got != want {
		t.Errorf("thinking off: got %s, want %s", got, want)
	}
}

func TestSplitForCompaction(t *testing.T) {
	c := SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", txt("b")), ent(TypeUser, "3", txt("c")),
		ent(TypeAssistant, "4", call("x")), ent(TypeToolResult, "5", result("x"))}}
	req, ok := splitForCompaction(c, 100)
	if !ok || req.FirstKeptEntryID != "3" || req.IsSplitTurn || len(req.MessagesToSummarize) != 2 || len(req.KeptMessages) != 3 {
		t.Errorf("split = %+v, %v", req, ok)
	}
	// One long turn: its prefix before the newest answer.
	c = SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", call("x")), ent(TypeToolResult, "3", result("x")),
		ent(TypeAssistant, "4", call("y")), ent(TypeToolResult, "5", result("y"))}}
	req, ok = splitForCompaction(c, 100)
	if !ok || req.FirstKeptEntryID != "4" || !req.IsSplitTurn || len(req.TurnPrefixMessages) != 3 || len(req.MessagesToSummarize) != 0 {
		t.Errorf("split turn = %+v, %v", req, ok)
	}
	// Nothing before the kept part.
	if _, ok := splitForCompaction(SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a"))}}, 100); ok {
		t.Error("a lone user message was split")
	}
	// Thinking never leaves for a summary.
	c = SessionContext{Messages: []Entry{ent(TypeUser, "1", txt("a")), ent(TypeAssistant, "2", ContentBlock{Type: BlockThinking, Thinking: "secret", Signature: "s"}, txt("b")), ent(TypeUser, "3", txt("c"))}}
	req, _ = splitForCompaction(c, 100)
	for _, m := range req.MessagesToSummarize {
		if strings.Contains(string(m), "secret") {
			t.Errorf("thinking sent for summary: %s", m)
		}
	}
}

// FuzzBuildMessages: whatever sequence of entries a session holds (after a
// crash, a compaction, a broken stream), the request is one the provider
// accepts: user first, roles alternating, no empty message, every tool_use
// answered first thing in the next message, no tool_result without its
// tool_use, thinking only when asked for.
func FuzzBuildMessages(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0}, true, false)
	f.Add([]byte{2, 0, 3, 11, 19, 4, 1}, false, true)
	f.Fuzz(func(t *testing.T, seq []byte, summary, thinking bool) {
		if len(seq) > 64 {
			return
		}
		c := SessionContext{}
		if summary {
			c.Summary = "S"
		}
		mine := map[string]bool{}
		for i, b := range seq {
			id := string(rune('a' + (b>>3)%4))
			eid := itoa(i)
			switch b % 6 {
			case 0:
				c.Messages = append(c.Messages, ent(TypeUser, eid, txt("u")))
			case 1:
				c.Messages = append(c.Messages, ent(TypeAssistant, eid, txt("a")))
			case 2:
				c.Messages = append(c.Messages, ent(TypeAssistant, eid, call(id)))
			case 3:
				c.Messages = append(c.Messages, ent(TypeToolResult, eid, result(id)))
			case 4:
				mine[eid] = b&0x80 != 0
				c.Messages = append(c.Messages, ent(TypeAssistant, eid, ContentBlock{Type: BlockThinking, Thinking: "t", Signature: "s"}, call(id+"x")))
			case 5:
				c.Messages = append(c.Messages, ent(TypeAssistant, eid, txt("")))
			}
		}
		out := buildMessages(c, mine, thinking)
		if len(out) == 0 || out[0].Role != RoleUser {
			t.Fatalf("does not start with a user message: %s", shape(out))
		}
		for i, m := range out {
			if len(m.Content) == 0 {
				t.Fatalf("empty message %d: %s", i, shape(out))
			}
			if i > 0 && out[i-1].Role == m.Role {
				t.Fatalf("roles do not alternate at %d: %s", i, shape(out))
			}
			var prevUses map[string]bool
			if i > 0 && out[i-1].Role == RoleAssistant {
				prevUses = toolUses(out[i-1])
			}
			seenOther := false
			answered := map[string]bool{}
			for _, b := range m.Content {
				switch {
				case b.Type == BlockThinking && (!thinking || m.Role != RoleAssistant):
					t.Fatalf("thinking block where none belongs: %s", shape(out))
				case b.Type == BlockToolResult:
					if m.Role != RoleUser || seenOther || !prevUses[b.ToolUseID] || answered[b.ToolUseID] {
						t.Fatalf("tool_result %s out of place in message %d: %s", b.ToolUseID, i, shape(out))
					}
					answered[b.ToolUseID] = true
				default:
					seenOther = true
				}
			}
			if m.Role == RoleUser && len(answered) != len(prevUses) {
				t.Fatalf("message %d answers %d of %d calls: %s", i, len(answered), len(prevUses), shape(out))
			}
			if m.Role == RoleAssistant && len(toolUses(m)) > 0 && i+1 == len(out) {
				t.Fatalf("calls of the last message unanswered: %s", shape(out))
			}
		}
	})
}
