package rich

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

var bigTiers = Tiers{Threshold: sessions.DefaultThreshold, Ceiling: sessions.DefaultCeiling}

func TestTurnWithText(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.broker.setScript(textAnswer("Hello, Ann."))
	res := h.run(newTurn("hi there"))
	if !res.OK || res.Text != "Hello, Ann." || res.Cause != "" {
		t.Fatalf("result = %+v, want ok with the model's text", res)
	}
	reqs := h.broker.modelRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests, want 1", len(reqs))
	}
	r := reqs[0]
	if !r.Stream || r.Model != "claude-test" || r.Thinking != nil || r.MaxTokens != MaxAnswerTokens {
		t.Errorf("request stream=%v model=%q thinking=%v max_tokens=%d", r.Stream, r.Model, r.Thinking, r.MaxTokens)
	}
	if len(r.Messages) != 1 || r.Messages[0].Role != RoleUser || !strings.Contains(r.Messages[0].Content[0].Text, `"message":"hi there"`) {
		t.Errorf("messages = %+v", r.Messages)
	}
	names := map[string]bool{}
	for _, tool := range r.Tools {
		names[tool.Name] = true
	}
	for _, n := range []string{InvalidToolName, "memory_set", "memory_get", "memory_remove"} {
		if !names[n] {
			t.Errorf("tool %s not offered", n)
		}
	}
	entries := h.store.snapshot()
	if len(entries) == 3 && entries[0].Type == sessions.TypeReaders {
		entries = entries[1:] // the turn's reader record (private.go)
	}
	if len(entries) != 2 || entries[0].Type != TypeUser || entries[1].Type != TypeAssistant || entries[1].Usage == nil || entries[1].Usage.InputTokens != 10 {
		t.Errorf("session = %+v, want user and assistant with usage", entries)
	}
	if got := h.broker.firstHeaders().Get("Authorization"); got != "Bearer sandbox-dummy-key" {
		t.Errorf("Authorization = %q", got)
	}
	// Logs: routes and statuses, never the text.
	logs := h.logs.String()
	if strings.Contains(logs, "hi there") || strings.Contains(logs, "Hello, Ann") {
		t.Errorf("logs carry message text:\n%s", logs)
	}
	for _, want := range []string{`"route":"/anthropic/v1/messages"`, `"status":200`, `"latency_ms"`, `"msg":"worker ready"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
}

func TestTurnWithToolCalls(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.broker.toolAnswer = func(route string, body json.RawMessage) (int, string) {
		if strings.HasPrefix(route, "/mcp/") {
			var rpc struct {
				ID int `json:"id"`
			}
			json.Unmarshal(body, &rpc)
			return 200, `{"jsonrpc":"2.0","id":` + string(rune('0'+rpc.ID)) + `,"result":{"content":[{"type":"text","text":"doc hit"}]}}`
		}
		return 200, `{"result":{"temp":21}}`
	}
	h.broker.setScript(
		toolAnswer("toolu_1", "host_weather", `{"city":"Oslo"}`),
		toolAnswer("toolu_2", "mcp_0_search", `{"q":"go"}`),
		toolAnswer("toolu_3", "memory_set", `{"scope":"speaker","key":"city","text":"Oslo"}`),
		toolAnswer("bad id!", "no_such_tool", `{}`),
		textAnswer("Done."),
	)
	turn := newTurn("weather?")
	turn.Tools = []richproto.ToolSpec{{Name: "weather", Description: "w", Parameters: json.RawMessage(`{"type":"object"}`)}}
	turn.MCP = []richproto.MCPServerSpec{{Server: "docs", Tools: []richproto.ToolSpec{{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)}}}}
	res := h.run(turn)
	if !res.OK || res.Text != "Done." {
		t.Fatalf("result = %+v; logs:\n%s", res, h.logs.String())
	}
	if got := h.broker.toolBodies["/tools/weather"]; len(got) != 1 || string(got[0]) != `{"city":"Oslo"}` {
		t.Errorf("host tool bodies = %s", got)
	}
	mcp := h.broker.toolBodies["/mcp/docs"]
	if len(mcp) != 1 || !strings.Contains(string(mcp[0]), `"method":"tools/call"`) || !strings.Contains(string(mcp[0]), `"name":"search"`) {
		t.Errorf("mcp bodies = %s", mcp)
	}
	mem, err := os.ReadFile(filepath.Join(h.ws, "memory.json"))
	if err != nil || !strings.Contains(string(mem), `"scope":"speaker:u1"`) {
		t.Errorf("memory.json = %s, %v", mem, err)
	}
	reqs := h.broker.modelRequests()
	if len(reqs) != 5 {
		t.Fatalf("%d model requests, want 5", len(reqs))
	}
	// The last request pairs every call with its result, in order.
	last := reqs[4].Messages
	wantResults := []string{`{"temp":21}`, `doc hit`, `Saved.`, ToolFailedText}
	var got []string
	for i, m := range last {
		for _, b := range m.Content {
			if b.Type == BlockToolUse {
				next := last[i+1]
				if next.Role != RoleUser || next.Content[0].Type != BlockToolResult || next.Content[0].ToolUseID != b.ID {
					t.Errorf("tool_use %s not answered by the next message: %+v", b.ID, next)
				}
				got = append(got, next.Content[0].Content[0].Text)
			}
		}
	}
	if len(got) != len(wantResults) {
		t.Fatalf("tool results %q, want %d", got, len(wantResults))
	}
	for i := range got {
		if !strings.Contains(got[i], wantResults[i]) {
			t.Errorf("result %d = %q, want it to contain %q", i, got[i], wantResults[i])
		}
	}
	// The bad call was normalized: a valid id, invalid_tool.
	bad := last[7].Content[0]
	if bad.Name != InvalidToolName || !callIDRe.MatchString(bad.ID) {
		t.Errorf("bad call kept as %q/%q", bad.Name, bad.ID)
	}
	if strings.Contains(h.logs.String(), "Oslo") {
		t.Error("logs carry a tool payload")
	}
}

func TestThinkingFromTurn(t *testing.T) {
	for _, level := range richproto.ThinkingLevels {
		t.Run(level, func(t *testing.T) {
			h := newHarness(t, bigTiers)
			h.broker.setScript(
				start(5)+thinkingBlock(0, "let me see", "sig1")+toolBlock(1, "toolu_a", "memory_get", `{"scope":"channel"}`)+stop("tool_use", 3),
				textAnswer("ok"),
				textAnswer("second"),
			)
			turn := newTurn("x")
			turn.Thinking = level
			if res := h.run(turn); !res.OK {
				t.Fatalf("result %+v", res)
			}
			turn2 := newTurn("y")
			turn2.Thinking = level
			if res := h.run(turn2); !res.OK {
				t.Fatalf("result %+v", res)
			}
			reqs := h.broker.modelRequests()
			want, _ := richproto.ThinkingBudget(level)
			for i, r := range reqs {
				got := 0
				if r.Thinking != nil {
					got = r.Thinking.BudgetTokens
				}
				if got != want || (want == 0) != (r.Thinking == nil) {
					t.Errorf("request %d thinking = %+v, want budget %d", i, r.Thinking, want)
				}
				if r.MaxTokens != MaxAnswerTokens+want {
					t.Errorf("request %d max_tokens = %d", i, r.MaxTokens)
				}
			}
			// This turn's thinking is replayed in its tool loop (when on), never in a later turn.
			count := func(r Request) int {
				n := 0
				for _, m := range r.Messages {
					for _, b := range m.Content {
						if b.Type == BlockThinking {
							n++
						}
					}
				}
				return n
			}
			wantReplay := 0
			if want > 0 {
				wantReplay = 1
			}
			if n := count(reqs[1]); n != wantReplay {
				t.Errorf("tool-loop request replays %d thinking blocks, want %d", n, wantReplay)
			}
			if n := count(reqs[2]); n != 0 {
				t.Errorf("next turn's request replays %d thinking blocks, want 0", n)
			}
		})
	}
}

func TestSessionContinuesAcrossTurnsAndRestart(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.broker.setScript(textAnswer("one"), textAnswer("two"), textAnswer("three"))
	h.run(newTurn("first"))
	h.run(newTurn("second"))
	h.stopWorker()
	h.startWorker(bigTiers) // a container restart: same session store
	waitFor(t, "re-announce", func() bool { return h.broker.readyCount() >= 2 })
	h.run(newTurn("third"))
	reqs := h.broker.modelRequests()
	last := reqs[2].Messages
	var texts []string
	for _, m := range last {
		for _, b := range m.Content {
			texts = append(texts, b.Text)
		}
	}
	joined := strings.Join(texts, "|")
	for _, want := range []string{"first", "one", "second", "two", "third"} {
		if !strings.Contains(joined, want) {
			t.Errorf("third request lacks %q: %s", want, joined)
		}
	}
	if len(last) != 5 || last[0].Role != RoleUser || last[1].Role != RoleAssistant || last[4].Role != RoleUser {
		t.Errorf("roles do not alternate: %+v", last)
	}
	if h.store.opens != 2 {
		t.Errorf("session opened %d times, want once a worker process", h.store.opens)
	}
}

func TestFreshTurnOpensFresh(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.broker.setScript(textAnswer("a"))
	turn := newTurn("x")
	turn.Fresh = true
	h.run(turn)
	if h.store.fresh != 1 {
		t.Errorf("fresh opens = %d, want 1", h.store.fresh)
	}
}

func TestCorruptSessionFailsAndIsUntouched(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.store.entries = []Entry{{Type: TypeUser, ID: "x", Content: json.RawMessage(`"old"`)}}
	before := h.store.snapshot()
	h.store.corrupt = true
	h.broker.setScript(textAnswer("never"))
	res := h.run(newTurn("hi"))
	if res.OK || res.Cause != richproto.CauseSession || res.Text != "" {
		t.Fatalf("result = %+v, want failed with cause session", res)
	}
	if got := h.store.snapshot(); !reflect.DeepEqual(got, before) || h.store.appends != 0 {
		t.Errorf("session changed: %+v (appends %d)", got, h.store.appends)
	}
	if n := len(h.broker.modelRequests()); n != 0 {
		t.Errorf("%d model calls on a corrupt session", n)
	}
	if strings.Contains(h.logs.String(), "line 3") {
		t.Error("log carries the session error's text")
	}
}

func TestSessionWriteFailureFailsTurn(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.store.failAt = 2 // the assistant entry
	h.broker.setScript(textAnswer("a"), textAnswer("b"))
	if res := h.run(newTurn("x")); res.OK || res.Cause != richproto.CauseSession {
		t.Fatalf("result = %+v, want cause session", res)
	}
	// The next turn opens the session again (and works).
	if res := h.run(newTurn("y")); !res.OK || h.store.opens != 2 {
		t.Fatalf("next turn = %+v after %d opens, want ok after a reopen", res, h.store.opens)
	}
}

// seed fills the store with n exchanges of about size bytes each.
func seedSession(s *fakeStore, n, size int) {
	for i := 0; i < n; i++ {
		sess, _ := s.Open(false)
		sess.Append(Entry{Type: TypeUser, Content: mustJSON([]ContentBlock{{Type: BlockText, Text: strings.Repeat("u", size)}})})
		sess.Append(Entry{Type: TypeAssistant, Content: mustJSON([]ContentBlock{{Type: BlockText, Text: strings.Repeat("a", size)}})})
	}
	s.opens = 0
}

func TestCompactionThroughHostCompactor(t *testing.T) {
	tiers := Tiers{Threshold: 2_000, Ceiling: 100_000}
	h := newHarness(t, tiers)
	seedSession(h.store, 4, 2_000) // ~4,000 tokens
	h.broker.compact = func(req *CompactRequest) (int, string) {
		c := Compaction{Summary: "they talked", FirstKeptEntryID: req.FirstKeptEntryID, TokensBefore: req.TokensBefore,
			Details: map[string]json.RawMessage{"engine": json.RawMessage(`"jev"`)}}
		b, _ := json.Marshal(CompactAnswer{Compaction: &c})
		return 200, string(b)
	}
	h.broker.setScript(textAnswer("after"))
	res := h.run(newTurn("new question"))
	if !res.OK {
		t.Fatalf("result %+v; logs:\n%s", res, h.logs.String())
	}
	if len(h.broker.compactReqs) != 1 {
		t.Fatalf("%d compact requests, want 1", len(h.broker.compactReqs))
	}
	cr := h.broker.compactReqs[0]
	if cr.Reason != "threshold" || cr.IsSplitTurn || len(cr.MessagesToSummarize) != 8 || len(cr.KeptMessages) != 1 || cr.TokensBefore < 4_000 {
		t.Errorf("compact request: reason %s split %v summarize %d kept %d tokens %d", cr.Reason, cr.IsSplitTurn, len(cr.MessagesToSummarize), len(cr.KeptMessages), cr.TokensBefore)
	}
	var comp *CompactionRecord
	for _, e := range h.store.snapshot() {
		if e.Type == TypeCompaction {
			comp = e.Compaction
		}
	}
	if comp == nil || comp.Engine != "jev" || comp.Summary != "they talked" || comp.TokensBefore != cr.TokensBefore || comp.TokensAfter >= comp.TokensBefore {
		t.Fatalf("compaction record = %+v", comp)
	}
	reqs := h.broker.modelRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls, want 1 (no own summary)", len(reqs))
	}
	first := reqs[0].Messages[0]
	if len(reqs[0].Messages) != 1 || !strings.HasPrefix(first.Content[0].Text, summaryPrefix+"they talked") || !strings.Contains(first.Content[1].Text, "new question") {
		t.Errorf("request after compaction = %+v", reqs[0].Messages)
	}
	if len(h.broker.reports) != 1 || h.broker.reports[0].Engine != "jev" || h.broker.reports[0].Event != "compacted" {
		t.Errorf("reports = %+v", h.broker.reports)
	}
}

func TestCompactionFallsBackToOwnSummary(t *testing.T) {
	for _, tc := range []struct {
		name      string
		status    int
		answer    string
		tiers     Tiers
		wantAsked bool
		fallback  string
	}{
		{"timeout", 200, `{"fallback":"timeout"}`, Tiers{Threshold: 2_000, Ceiling: 100_000}, true, "timeout"},
		{"broker error", 500, ``, Tiers{Threshold: 2_000, Ceiling: 100_000}, true, "error"},
		{"no compactor (404)", 404, ``, Tiers{Threshold: 2_000, Ceiling: 100_000}, true, "undefined"},
		{"wrong first kept", 200, `{"compaction":{"summary":"s","firstKeptEntryId":"nope","tokensBefore":1}}`, Tiers{Threshold: 2_000, Ceiling: 100_000}, true, "shape"},
		{"past ceiling", 200, `{}`, Tiers{Threshold: 500, Ceiling: 1_000}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.tiers)
			seedSession(h.store, 4, 2_000)
			h.broker.compact = func(*CompactRequest) (int, string) { return tc.status, tc.answer }
			h.broker.setScript(textAnswer("my own summary"), textAnswer("after"))
			res := h.run(newTurn("q"))
			if !res.OK || res.Text != "after" {
				t.Fatalf("result %+v; logs:\n%s", res, h.logs.String())
			}
			if asked := len(h.broker.compactReqs) > 0; asked != tc.wantAsked {
				t.Errorf("host compactor asked = %v, want %v", asked, tc.wantAsked)
			}
			reqs := h.broker.modelRequests()
			if len(reqs) != 2 || reqs[0].System[0].Text != summarySystem || len(reqs[0].Tools) != 0 || reqs[0].Thinking != nil {
				t.Fatalf("want a summary call then the turn's call, got %d requests", len(reqs))
			}
			if !strings.Contains(reqs[0].Messages[0].Content[0].Text, "uuuu") {
				t.Error("summary call lacks the transcript")
			}
			var comp *CompactionRecord
			for _, e := range h.store.snapshot() {
				if e.Type == TypeCompaction {
					comp = e.Compaction
				}
			}
			if comp == nil || comp.Engine != EngineWorker || comp.Summary != "my own summary" {
				t.Fatalf("compaction record = %+v", comp)
			}
			if !strings.HasPrefix(reqs[1].Messages[0].Content[0].Text, summaryPrefix+"my own summary") {
				t.Error("turn's request does not start with the summary")
			}
			if len(h.broker.reports) != 1 || h.broker.reports[0].Fallback != tc.fallback {
				t.Errorf("reports = %+v, want fallback %s", h.broker.reports, tc.fallback)
			}
		})
	}
}

func TestCompactionRepeatMarginMovesNextToCeiling(t *testing.T) {
	tiers := Tiers{Threshold: 300_000, Ceiling: 500_000}
	if got := tiers.NextAt(&CompactionRecord{TokensAfter: 260_000}); got != 500_000 {
		t.Errorf("NextAt within margin = %d", got)
	}
	if got := tiers.NextAt(&CompactionRecord{TokensAfter: 200_000}); got != 300_000 {
		t.Errorf("NextAt below margin = %d", got)
	}
	if got := tiers.NextAt(nil); got != 300_000 {
		t.Errorf("NextAt(nil) = %d", got)
	}
}

func TestBrokerRestartMidPollReannounces(t *testing.T) {
	h := newHarness(t, bigTiers)
	waitFor(t, "first announce", func() bool { return h.broker.readyCount() == 1 })
	h.broker.stop()
	time.Sleep(150 * time.Millisecond) // past the fake's poll hold
	h.broker.start()                   // resets the count
	waitFor(t, "re-announce", func() bool { return h.broker.readyCount() >= 1 })
	h.broker.setScript(textAnswer("back"))
	if res := h.run(newTurn("x")); !res.OK || res.Text != "back" {
		t.Fatalf("result after restart = %+v", res)
	}
	if !strings.Contains(h.logs.String(), `"msg":"poll failed"`) {
		t.Error("the failed poll was not logged")
	}
}

func TestRefusedResultIsDroppedAndWorkerGoesOn(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.broker.resultStatus = 409
	h.broker.setScript(textAnswer("late"), textAnswer("fine"))
	h.run(newTurn("x"))
	waitFor(t, "re-announce", func() bool { return h.broker.readyCount() >= 2 })
	h.broker.mu.Lock()
	h.broker.resultStatus = 0
	h.broker.mu.Unlock()
	if res := h.run(newTurn("y")); !res.OK || res.Text != "fine" {
		t.Fatalf("next turn = %+v", res)
	}
	if !strings.Contains(h.logs.String(), `"status":409`) {
		t.Error("the refusal's status was not logged")
	}
}

func TestStreamBreakingMidTurnFails(t *testing.T) {
	h := newHarness(t, bigTiers)
	h.broker.setScript("BREAK:" + start(5) + event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	res := h.run(newTurn("x"))
	if res.OK || res.Cause != richproto.CauseStream {
		t.Fatalf("result = %+v, want cause stream", res)
	}
	// The next turn still works, and its request is well formed.
	h.broker.setScript(textAnswer("ok"))
	if res := h.run(newTurn("y")); !res.OK {
		t.Fatalf("next turn = %+v", res)
	}
	if msgs := h.broker.modelRequests()[1].Messages; len(msgs) != 1 || msgs[0].Role != RoleUser {
		t.Errorf("after a broken turn the user messages merge: %+v", msgs)
	}
}

func TestModelErrorsHaveFixedCauses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script []string
		turn   func(*richproto.Turn)
		cause  string
	}{
		{"error event", []string{start(1) + event("error", `{"type":"error","error":{"type":"overloaded_error","message":"x"}}`)}, nil, richproto.CauseModel},
		{"broker refuses", nil, nil, richproto.CauseBroker}, // the fake answers 500 with no script
		{"empty text", []string{start(1) + stop("end_turn", 1)}, nil, richproto.CauseModel},
		{"too many calls in a reply", []string{start(1) + func() string {
			s := ""
			for i := 0; i < MaxToolCallsPerReply+1; i++ {
				s += toolBlock(i, "t"+string(rune('a'+i)), "memory_get", `{"scope":"channel"}`)
			}
			return s
		}() + stop("tool_use", 1)}, nil, richproto.CauseModel},
		{"deadline passed", nil, func(t *richproto.Turn) { t.DeadlineUnixMs = 1 }, richproto.CauseBudget},
		{"invalid turn", nil, func(t *richproto.Turn) { t.Thinking = "max" }, richproto.CauseInvalidTurn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, bigTiers)
			h.broker.setScript(tc.script...)
			turn := newTurn("x")
			if tc.turn != nil {
				tc.turn(turn)
			}
			res := h.run(turn)
			if res.OK || res.Cause != tc.cause || res.Text != "" {
				t.Fatalf("result = %+v, want cause %q", res, tc.cause)
			}
		})
	}
}

func TestModelCallLimit(t *testing.T) {
	h := newHarness(t, bigTiers)
	for i := 0; i < MaxModelCalls+1; i++ {
		h.broker.setScript(toolAnswer("", "memory_get", `{"scope":"channel"}`))
	}
	res := h.run(newTurn("loop"))
	if res.OK || res.Cause != richproto.CauseBudget {
		t.Fatalf("result = %+v, want cause budget", res)
	}
	if n := len(h.broker.modelRequests()); n != MaxModelCalls {
		t.Errorf("%d model calls, want %d", n, MaxModelCalls)
	}
}

func TestFinalTextBounded(t *testing.T) {
	h := newHarness(t, bigTiers)
	long := strings.Repeat("é", richproto.MaxTextChars+10)
	h.broker.setScript(textAnswer(long))
	res := h.run(newTurn("x"))
	if !res.OK || !strings.HasSuffix(res.Text, TruncationMarker) {
		t.Fatalf("result ok=%v", res.OK)
	}
	if err := res.Validate(); err != nil {
		t.Errorf("result does not validate: %v", err)
	}
}

// sessionFiles lists the top-level session files of the workspace.
func sessionFiles(t *testing.T, ws string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(ws, sessions.DirName, "*"+sessions.Ext))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRealSessionsContinueAcrossTurnsAndRestart(t *testing.T) {
	h := newRealHarness(t)
	h.broker.setScript(textAnswer("one"), toolAnswer("toolu_1", "memory_get", `{"scope":"channel"}`), textAnswer("two"), textAnswer("three"))
	h.run(newTurn("first"))
	h.run(newTurn("second"))
	h.stopWorker()
	h.startWorker(bigTiers)
	if res := h.run(newTurn("third")); !res.OK {
		t.Fatalf("third turn = %+v; logs:\n%s", res, h.logs.String())
	}
	files := sessionFiles(t, h.ws)
	if len(files) != 1 {
		t.Fatalf("session files %v, want one continued file", files)
	}
	reqs := h.broker.modelRequests()
	got := shape(reqs[len(reqs)-1].Messages)
	for _, want := range []string{"text(one)", "use(toolu_1)", "result(toolu_1)", "text(two)"} {
		if !strings.Contains(got, want) {
			t.Errorf("third request lacks %s: %s", want, got)
		}
	}
	data, _ := os.ReadFile(files[0])
	if n := strings.Count(string(data), "\n"); n != 1+3+2+4+2 {
		t.Errorf("session file has %d lines, want header + 3 reader records + 8 entries", n)
	}
}

func TestRealCorruptSessionFailsAndIsUntouched(t *testing.T) {
	h := newRealHarness(t)
	h.broker.setScript(textAnswer("one"), textAnswer("never"))
	h.run(newTurn("first"))
	files := sessionFiles(t, h.ws)
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	// A torn last line, as a worker killed mid-write leaves it; the
	// container's next worker finds it.
	h.stopWorker()
	f, err := os.OpenFile(files[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"type":"user","id":"x","timestamp":"2026-11-30T00:00:00Z","content":"tru` + "\n")
	f.Close()
	before, _ := os.ReadFile(files[0])
	h.startWorker(bigTiers)
	res := h.run(newTurn("second"))
	if res.OK || res.Cause != richproto.CauseSession {
		t.Fatalf("result = %+v, want cause session", res)
	}
	after, _ := os.ReadFile(files[0])
	if string(after) != string(before) {
		t.Error("the corrupt session file was changed")
	}
	if n := len(h.broker.modelRequests()); n != 1 {
		t.Errorf("%d model calls, want only the first turn's", n)
	}
}

func TestRealFreshStartBeginsANewSession(t *testing.T) {
	h := newRealHarness(t)
	h.broker.setScript(textAnswer("one"), textAnswer("two"))
	h.run(newTurn("old conversation"))
	// The host's fresh start: archive, then a turn marked fresh.
	if _, err := sessions.Archive(h.ws, time.Now()); err != nil {
		t.Fatal(err)
	}
	turn := newTurn("new")
	turn.Fresh = true
	if res := h.run(turn); !res.OK {
		t.Fatalf("result %+v", res)
	}
	reqs := h.broker.modelRequests()
	if got := shape(reqs[1].Messages); strings.Contains(got, "old conversation") || strings.Contains(got, "one") {
		t.Errorf("fresh turn sees the archived session: %s", got)
	}
}

func TestTokenBudget(t *testing.T) {
	for _, tc := range []struct {
		level               string
		limit               int
		wantBudget, wantMax int
	}{
		{"off", 0, 0, MaxAnswerTokens},
		{"medium", 0, 8_192, MaxAnswerTokens + 8_192},
		{"xhigh", 200_000, 32_768, MaxAnswerTokens + 32_768},
		{"medium", 8_192, 4_096, 8_192},
		{"high", 4_000, 2_000, 4_000},
		{"low", 2_000, 0, 2_000}, // half the limit is under the provider's minimum
		{"off", 4_000, 0, 4_000},
	} {
		turn := &richproto.Turn{Thinking: tc.level, MaxOutputTokens: tc.limit}
		b, m := tokenBudget(turn)
		ceiling, _ := richproto.ThinkingBudget(tc.level)
		if b != tc.wantBudget || m != tc.wantMax || b > ceiling || (b > 0 && b >= m) {
			t.Errorf("%s/%d: budget %d max %d, want %d %d", tc.level, tc.limit, b, m, tc.wantBudget, tc.wantMax)
		}
	}
}

// BenchmarkTurn: one text turn through the worker (long poll answered,
// session opened and two entries fsynced, one streamed model call, the
// result posted) against the fake broker on a Unix socket.
func BenchmarkTurn(b *testing.B) {
	h := &harness{t: b, broker: newFakeBroker(b), real: true, ws: b.TempDir(), logs: &lockedBuffer{}}
	h.startWorker(bigTiers)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.broker.setScript(textAnswer("ok"))
		if res := h.run(newTurn("hello")); !res.OK {
			b.Fatalf("turn failed: %+v", res)
		}
	}
	b.StopTimer()
	h.stop()
}

func TestToolCallBoundsOfATurn(t *testing.T) {
	h := newHarness(t, bigTiers)
	reply := start(1)
	for i := 0; i < MaxToolCallsPerReply; i++ {
		reply += toolBlock(i, "", "memory_get", `{"scope":"channel"}`)
	}
	reply += stop("tool_use", 1)
	for i := 0; i <= MaxToolCallsPerTurn/MaxToolCallsPerReply; i++ {
		h.broker.setScript(reply)
	}
	res := h.run(newTurn("x"))
	if res.OK || res.Cause != richproto.CauseBudget {
		t.Fatalf("result = %+v, want cause budget past %d tool calls", res, MaxToolCallsPerTurn)
	}
	if n := len(h.broker.modelRequests()); n != MaxToolCallsPerTurn/MaxToolCallsPerReply+1 {
		t.Errorf("%d model calls", n)
	}
}

func TestLargeToolInputRunsButIsOmittedFromTheSession(t *testing.T) {
	h := newHarness(t, bigTiers)
	big := `{"q":"` + strings.Repeat("z", MaxToolInputBytes) + `"}`
	h.broker.setScript(toolAnswer("toolu_big", "host_search", big), textAnswer("done"))
	turn := newTurn("x")
	turn.Tools = []richproto.ToolSpec{{Name: "search", Parameters: json.RawMessage(`{"type":"object"}`)}}
	if res := h.run(turn); !res.OK {
		t.Fatalf("result %+v", res)
	}
	if got := h.broker.toolBodies["/tools/search"]; len(got) != 1 || len(got[0]) != len(big) {
		t.Errorf("the tool did not get the whole input")
	}
	for _, e := range h.store.snapshot() {
		if e.Type == TypeAssistant && strings.Contains(string(e.Content), "zzzz") {
			t.Error("the large input was stored in the session")
		}
	}
	if req := h.broker.modelRequests()[1]; !strings.Contains(string(mustJSON(req.Messages)), "omitted") {
		t.Error("the next request does not carry the omitted marker")
	}
}
