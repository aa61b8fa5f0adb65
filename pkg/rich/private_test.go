package rich

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

func readerTurn(text, speaker, reader string) *richproto.Turn {
	turn := newTurn(text)
	turn.Speaker = richproto.Speaker{ID: speaker, Name: speaker}
	turn.Reader = reader
	turn.Tools = []richproto.ToolSpec{{Name: "lookup", Description: "Look a person up.", Parameters: json.RawMessage(`{"type":"object"}`)}}
	return turn
}

// findUse returns the tool_use block id and the tool_result paired with it
// in msgs (the result in the message right after the call's).
func findPair(t *testing.T, msgs []Message, id string) (use, result ContentBlock) {
	t.Helper()
	for i, m := range msgs {
		for _, b := range m.Content {
			if b.Type == BlockToolUse && b.ID == id {
				use = b
				if i+1 >= len(msgs) || msgs[i+1].Role != RoleUser {
					t.Fatalf("call %s has no following user message", id)
				}
				for _, r := range msgs[i+1].Content {
					if r.Type == BlockToolResult && r.ToolUseID == id {
						return use, r
					}
				}
				t.Fatalf("call %s is not answered in the next message: pairing broken", id)
			}
		}
	}
	t.Fatalf("call %s not in the request", id)
	return
}

func resultText(b ContentBlock) string {
	var s []string
	for _, c := range b.Content {
		s = append(s, c.Text)
	}
	return strings.Join(s, "")
}

// TestPrivateExchangesAcrossReaders: A -> B -> A turns in one channel
// with compaction in between, on real session files. A's private host
// tool result (privateTo pA) and A's memory exchange: B's requests show
// placeholders for their arguments and results with the call id and name
// pairing valid; A sees its own originals; the compaction request (kept
// tail included) and every request after it hold no private text; the
// session file keeps the originals, tagged.
func TestPrivateExchangesAcrossReaders(t *testing.T) {
	h := &harness{t: t, broker: newFakeBroker(t), real: true, ws: t.TempDir(), logs: &lockedBuffer{}}
	h.startWorker(bigTiers)
	h.broker.toolAnswer = func(route string, body json.RawMessage) (int, string) {
		return 200, `{"result":{"phone":"SECRET-RESULT-A"},"privateTo":"pA"}`
	}
	// Turn A1: a private host tool call and a memory call.
	h.broker.setScript(
		toolAnswer("toolu_a1", "host_lookup", `{"who":"SECRET-ARG-A"}`),
		toolAnswer("toolu_m1", "memory_set", `{"scope":"speaker","key":"k","text":"SECRET-MEM-A"}`),
		textAnswer("noted, A"))
	if res := h.run(readerTurn("look me up", "uA", "pA")); !res.OK {
		t.Fatalf("A1: %+v\n%s", res, h.logs.String())
	}
	// Turn B1: B sees placeholders, pairing valid.
	h.broker.setScript(textAnswer("hello B"))
	if res := h.run(readerTurn("what did A get?", "uB", "pB")); !res.OK {
		t.Fatalf("B1: %+v\n%s", res, h.logs.String())
	}
	reqs := h.broker.modelRequests()
	b1 := reqs[len(reqs)-1]
	raw, _ := json.Marshal(b1)
	if strings.Contains(string(raw), "SECRET") {
		t.Fatalf("B's request holds A's private exchange: %s", raw)
	}
	for _, c := range []struct{ id, name string }{{"toolu_a1", "host_lookup"}, {"toolu_m1", "memory_set"}} {
		use, result := findPair(t, b1.Messages, c.id)
		if use.Name != c.name || string(use.Input) != PrivateInput || resultText(result) != PrivateResult {
			t.Errorf("B sees call %s as %s %s -> %q, want the name with placeholders", c.id, use.Name, use.Input, resultText(result))
		}
	}
	// Turn A2: A sees its own originals.
	h.broker.setScript(textAnswer("hi again A"))
	if res := h.run(readerTurn("and now?", "uA", "pA")); !res.OK {
		t.Fatalf("A2: %+v", res)
	}
	reqs = h.broker.modelRequests()
	a2 := reqs[len(reqs)-1]
	use, result := findPair(t, a2.Messages, "toolu_a1")
	if !strings.Contains(string(use.Input), "SECRET-ARG-A") || !strings.Contains(resultText(result), "SECRET-RESULT-A") {
		t.Errorf("A does not see its own exchange: %s -> %q", use.Input, resultText(result))
	}
	if use, _ := findPair(t, a2.Messages, "toolu_m1"); !strings.Contains(string(use.Input), "SECRET-MEM-A") {
		t.Errorf("A does not see its own memory call: %s", use.Input)
	}
	// A restart with low tiers: B's next turn compacts first.
	h.stopWorker()
	h.broker.compact = func(req *CompactRequest) (int, string) {
		c := Compaction{Summary: "people talked", FirstKeptEntryID: req.FirstKeptEntryID, TokensBefore: req.TokensBefore}
		b, _ := json.Marshal(CompactAnswer{Compaction: &c})
		return 200, string(b)
	}
	h.startWorker(Tiers{Threshold: 100, Ceiling: 1_000_000})
	h.broker.setScript(textAnswer("hello again B"))
	if res := h.run(readerTurn("anything new?", "uB", "pB")); !res.OK {
		t.Fatalf("B2: %+v\n%s", res, h.logs.String())
	}
	h.broker.mu.Lock()
	compacts := append([]CompactRequest(nil), h.broker.compactReqs...)
	h.broker.mu.Unlock()
	if len(compacts) != 1 {
		t.Fatalf("%d compactions, want 1", len(compacts))
	}
	craw, _ := json.Marshal(compacts[0])
	if strings.Contains(string(craw), "SECRET") {
		t.Errorf("the compactor received a private exchange: %s", craw)
	}
	if !strings.Contains(string(craw), "toolu_a1") || !strings.Contains(string(craw), PrivateResult) {
		t.Errorf("the compactor lost the exchange's pairing: %s", craw)
	}
	reqs = h.broker.modelRequests()
	raw, _ = json.Marshal(reqs[len(reqs)-1])
	if strings.Contains(string(raw), "SECRET") {
		t.Errorf("B's request after compaction holds A's private exchange: %s", raw)
	}
	// A after the compaction: served, nothing private lost from the file.
	h.broker.setScript(textAnswer("bye A"))
	if res := h.run(readerTurn("bye", "uA", "pA")); !res.OK {
		t.Fatalf("A3: %+v", res)
	}
	files := sessionFiles(t, h.ws)
	s, err := sessions.Open(h.ws)
	if err != nil || len(files) != 1 {
		t.Fatalf("session %v %v", files, err)
	}
	defer s.Close()
	c := s.Context()
	for _, e := range c.Messages {
		if r, ok := c.Owner[e.ID]; !ok || r.Turn == "" {
			t.Errorf("message %s has no reader record", e.ID)
		}
	}
	_ = time.Second
}

// TestPrivateProjectionTable: who sees what, including calls without a
// reader record (built-in calls then belong to nobody), a tagged result
// whose call was compacted away, and invalid_tool calls.
func TestPrivateProjectionTable(t *testing.T) {
	ent := func(typ, id string, blocks ...ContentBlock) Entry {
		return Entry{Type: typ, ID: id, Content: mustJSON(blocks)}
	}
	use := func(id, name, in string) ContentBlock {
		return ContentBlock{Type: BlockToolUse, ID: id, Name: name, Input: json.RawMessage(in)}
	}
	res := func(id, text string) ContentBlock {
		return ContentBlock{Type: BlockToolResult, ToolUseID: id, Content: []ContentBlock{{Type: BlockText, Text: text}}}
	}
	tagged := ent(TypeToolResult, "r1", res("c1", "priv"))
	tagged.PrivateTo = "pA"
	c := SessionContext{
		Owner: map[string]sessions.ReaderRecord{"a1": {Turn: "t1", Reader: "pA"}, "a2": {Turn: "t1", Reader: "pA"}},
		Messages: []Entry{
			ent(TypeUser, "u1", ContentBlock{Type: BlockText, Text: "hi"}),
			ent(TypeAssistant, "a1", use("c1", "host_lookup", `{"q":"arg"}`), use("c2", "host_pub", `{"q":"pub"}`)),
			tagged,
			ent(TypeToolResult, "r2", res("c2", "public")),
			ent(TypeAssistant, "a2", use("c3", "invalid_tool", `{"bad":"x"}`)),
			ent(TypeAssistant, "a3", use("c4", "memory_get", `{"scope":"speaker"}`)), // no reader record
			ent(TypeToolResult, "r9", res("gone", "orphan")),
		},
	}
	c.Messages[6].PrivateTo = "pA"
	cases := []struct {
		reader string
		hidden []string
		shown  []string
	}{
		{"pA", []string{"c4"}, []string{"c1", "c2", "c3"}},
		{"pB", []string{"c1", "c3", "c4", "gone"}, []string{"c2"}},
		{nobody, []string{"c1", "c3", "c4", "gone"}, []string{"c2"}},
	}
	for _, tc := range cases {
		p := project(c, nil, tc.reader)
		hiddenIDs := map[string]bool{}
		for _, e := range p.Messages {
			for _, b := range blocksOf(e) {
				if b.Type == BlockToolUse && string(b.Input) == PrivateInput {
					hiddenIDs[b.ID] = true
				}
				if b.Type == BlockToolResult && resultText(b) == PrivateResult {
					hiddenIDs[b.ToolUseID] = true
				}
			}
		}
		for _, id := range tc.hidden {
			if !hiddenIDs[id] {
				t.Errorf("reader %q sees %s, want a placeholder", tc.reader, id)
			}
		}
		for _, id := range tc.shown {
			if hiddenIDs[id] {
				t.Errorf("reader %q gets a placeholder for %s, want the original", tc.reader, id)
			}
		}
		// The original context is unchanged.
		if !strings.Contains(string(c.Messages[2].Content), "priv") {
			t.Fatal("projection changed the session's entries")
		}
		// The refusal passes the projection and refuses the raw context.
		owners := privateCalls(c, nil, tc.reader)
		if err := checkProjected(buildMessages(p, nil, false), owners, tc.reader); err != nil {
			t.Errorf("reader %q: projected request refused: %v", tc.reader, err)
		}
		if tc.reader != "pA" {
			if err := checkProjected(buildMessages(c, nil, false), owners, tc.reader); err == nil {
				t.Errorf("reader %q: a raw request replaying private history was not refused", tc.reader)
			}
		}
	}
}

// The worker declares both capabilities; a private answer for another
// principal than the turn's reader is dropped unread (a failed call).
func TestPrivateReadyAndForeignPrivateTo(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.broker.toolAnswer = func(string, json.RawMessage) (int, string) {
		return 200, `{"result":"SECRET-OF-PX","privateTo":"pX"}`
	}
	h.broker.setScript(toolAnswer("toolu_x", "host_lookup", `{}`), textAnswer("ok"))
	if res := h.run(readerTurn("q", "uA", "pA")); !res.OK {
		t.Fatalf("turn: %+v", res)
	}
	h.broker.mu.Lock()
	rd := h.broker.lastReady
	h.broker.mu.Unlock()
	if !rd.Capabilities.PrivateTo || !rd.Capabilities.ReaderRecords {
		t.Errorf("ready %+v, want both capabilities", rd)
	}
	for _, e := range h.store.snapshot() {
		if strings.Contains(string(e.Content), "SECRET") {
			t.Fatalf("a result private to another principal was kept: %s", e.Content)
		}
	}
	reqs := h.broker.modelRequests()
	if _, r := findPair(t, reqs[len(reqs)-1].Messages, "toolu_x"); resultText(r) != ToolFailedText {
		t.Errorf("result %q, want the failed-call text", resultText(r))
	}
}
