package richproto

import (
	"errors"
	"strings"
	"testing"
)

func TestTurnValidate(t *testing.T) {
	ok := Turn{ID: strings.Repeat("a", 32), Text: "hi", Speaker: Speaker{ID: "u1"}, Thinking: "low", DeadlineUnixMs: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Turn){
		"id":        func(t *Turn) { t.ID = "x" },
		"upper id":  func(t *Turn) { t.ID = strings.Repeat("A", 32) },
		"text":      func(t *Turn) { t.Text = strings.Repeat("x", MaxTextChars+1) },
		"utf8":      func(t *Turn) { t.Text = "\xff" },
		"speaker":   func(t *Turn) { t.Speaker.ID = "" },
		"thinking":  func(t *Turn) { t.Thinking = "max" },
		"deadline":  func(t *Turn) { t.DeadlineUnixMs = 0 },
		"model":     func(t *Turn) { t.Model = strings.Repeat("m", MaxModelChars+1) },
		"tool name": func(t *Turn) { t.Tools = []ToolSpec{{Name: "Bad", Parameters: []byte(`{}`)}} },
		"tool dup": func(t *Turn) {
			t.Tools = []ToolSpec{{Name: "a", Parameters: []byte(`{}`)}, {Name: "a", Parameters: []byte(`{}`)}}
		},
		"tool params": func(t *Turn) { t.Tools = []ToolSpec{{Name: "a", Parameters: []byte(`[]`)}} },
		"tool big params": func(t *Turn) {
			t.Tools = []ToolSpec{{Name: "a", Parameters: []byte(`{"x":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`)}}
		},
		"tool desc": func(t *Turn) {
			t.Tools = []ToolSpec{{Name: "a", Description: strings.Repeat("d", MaxDescChars+1), Parameters: []byte(`{}`)}}
		},
		"tools count": func(t *Turn) {
			t.Tools = make([]ToolSpec, MaxToolSpecs+1)
		},
		"mcp server": func(t *Turn) { t.MCP = []MCPServerSpec{{Server: "a/b"}} },
		"mcp dup":    func(t *Turn) { t.MCP = []MCPServerSpec{{Server: "a"}, {Server: "a"}} },
		"mcp tool": func(t *Turn) {
			t.MCP = []MCPServerSpec{{Server: "a", Tools: []ToolSpec{{Name: "x y", Parameters: []byte(`{}`)}}}}
		},
		"mcp count": func(t *Turn) { t.MCP = make([]MCPServerSpec, MaxMCPServers+1) },
	} {
		tt := ok
		mutate(&tt)
		if err := tt.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestTurnWithToolsValidates(t *testing.T) {
	tt := Turn{ID: strings.Repeat("a", 32), Speaker: Speaker{ID: "u"}, Thinking: "off", DeadlineUnixMs: 1, Model: "claude-x",
		Tools: []ToolSpec{{Name: "weather", Description: "d", Parameters: []byte(`{"type":"object"}`)}},
		MCP:   []MCPServerSpec{{Server: "docs", Tools: []ToolSpec{{Name: "Search.v2", Parameters: []byte(`{}`)}}}}}
	if err := tt.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestThinkingBudget(t *testing.T) {
	prev := -1
	for _, l := range ThinkingLevels {
		n, ok := ThinkingBudget(l)
		if !ok || n <= prev {
			t.Errorf("ThinkingBudget(%q) = %d, %v; want known and above %d", l, n, ok, prev)
		}
		prev = n
	}
	if _, ok := ThinkingBudget("max"); ok {
		t.Error("unknown level accepted")
	}
	if n, _ := ThinkingBudget("off"); n != 0 {
		t.Errorf("off = %d, want 0", n)
	}
}

func TestCauses(t *testing.T) {
	for _, c := range []string{CauseInvalidTurn, CauseSession, CauseWorkspace, CauseBroker, CauseModel, CauseStream, CauseBudget, CauseCompaction, CauseInternal} {
		if !ValidCause(c) || len(c) > 64 {
			t.Errorf("cause %q not valid", c)
		}
	}
	if ValidCause("open /workspace/x: no such file") {
		t.Error("free text accepted as a cause")
	}
}

func TestResultValidate(t *testing.T) {
	ok := Result{TurnID: strings.Repeat("b", 32), OK: true, Text: "done", Files: []File{{Name: "a.png", Data: []byte{1}}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, MaxReplyFileBytes+1)
	for name, mutate := range map[string]func(*Result){
		"turn":   func(r *Result) { r.TurnID = "" },
		"slash":  func(r *Result) { r.Files = []File{{Name: "../x"}} },
		"dotdot": func(r *Result) { r.Files = []File{{Name: ".."}} },
		"big":    func(r *Result) { r.Files = []File{{Name: "a", Data: big}} },
		"count":  func(r *Result) { r.Files = make([]File, MaxReplyFiles+1) },
		"total": func(r *Result) {
			r.Files = []File{{Name: "a", Data: big[:MaxReplyFileBytes]}, {Name: "b", Data: big[:MaxReplyFileBytes]}, {Name: "c", Data: big[:MaxReplyFileBytes]}, {Name: "d", Data: big[:MaxReplyFileBytes]}, {Name: "e", Data: big[:MaxReplyFileBytes]}, {Name: "f", Data: big[:1]}}
		},
		"long text": func(r *Result) { r.Text = strings.Repeat("x", MaxTextChars+1) },
		"type long": func(r *Result) { r.Files = []File{{Name: "a", Type: strings.Repeat("a", MaxAttachmentType+1)}} },
		"type ctl":  func(r *Result) { r.Files = []File{{Name: "a", Type: "text/plain\r\nX-Evil: 1"}} },
	} {
		rr := ok
		mutate(&rr)
		if err := rr.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
