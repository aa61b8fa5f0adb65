package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

func TestPromptText(t *testing.T) {
	marker := jsonStringLen(TruncationMarker)
	tail := strings.Repeat("z", 200)
	tests := []struct {
		name   string
		text   string
		budget int
		want   string
	}{
		{"fits", "hello", 7, "hello"},
		{"escapes counted", "a\"b", 6, "a\"b"},
		{"exact fit", strings.Repeat("z", 100), 102, strings.Repeat("z", 100)},
		{"one over", strings.Repeat("z", 101), 102, strings.Repeat("z", 102-marker) + TruncationMarker},
		{"escapes cut", "a\"bc" + tail, marker + 2, "a" + TruncationMarker},
		{"multibyte whole", "ééé" + tail, marker + 3, "é" + TruncationMarker},
		{"control chars", "\u0001\u0001" + tail, marker + 6, "\u0001" + TruncationMarker},
		{"line separator", "\u2028x" + tail, marker + 5, "" + TruncationMarker},
	}
	for _, tt := range tests {
		got, cut := promptText(tt.text, tt.budget)
		if got != tt.want || cut != (tt.want != tt.text) {
			t.Errorf("%s: promptText(%q, %d) = %q, %v; want %q", tt.name, tt.text, tt.budget, got, cut, tt.want)
		}
	}
}

// FuzzPromptText: the byte count matches encoding/json, the result fits its
// budget, keeps whole characters of a prefix, and is the longest such prefix.
func FuzzPromptText(f *testing.F) {
	f.Add("hello", 100)
	f.Add(strings.Repeat("é\"\n\u2028<>&\x01", 50), 300)
	f.Add("\xff\xfe", 90)
	f.Fuzz(func(t *testing.T, s string, budget int) {
		if budget < 0 || budget > 1<<16 {
			return
		}
		enc, _ := marshal(s)
		if jsonStringLen(s) != len(enc) {
			t.Fatalf("jsonStringLen(%q) = %d, encoder %d", s, jsonStringLen(s), len(enc))
		}
		got, cut := promptText(s, budget)
		if !cut {
			if got != s || len(enc) > budget {
				t.Fatalf("uncut result differs or exceeds budget")
			}
			return
		}
		if budget < jsonStringLen(TruncationMarker) {
			return
		}
		if n := jsonStringLen(got); n > budget {
			t.Fatalf("result %d encoded bytes, budget %d", n, budget)
		}
		prefix, ok := strings.CutSuffix(got, TruncationMarker)
		if !ok || !strings.HasPrefix(s, prefix) {
			t.Fatalf("result is not prefix+marker")
		}
		if utf8.ValidString(s) && !utf8.ValidString(prefix) {
			t.Fatalf("prefix splits a character")
		}
		if len(prefix) < len(s) {
			_, size := utf8.DecodeRuneInString(s[len(prefix):])
			if jsonStringLen(s[:len(prefix)+size]+TruncationMarker) <= budget {
				t.Fatalf("a longer prefix would fit")
			}
		}
	})
}

// FuzzModelResponse feeds arbitrary model answers through the response
// handling: it must never panic, and whatever it accepts is normalized.
func FuzzModelResponse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"content":"hi"}}]}`))
	f.Add([]byte(`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"memory_get","arguments":"{\"scope\":\"channel\"}"}},{"id":"a","function":{"name":"x","arguments":5}},{"id":7},null,"s"]}}]}`))
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":"nope","content":"  "}}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"choices":[null]}`))
	declared := map[string]bool{"invalid_tool": true, "memory_get": true, "host_x": true}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fuzzWholeTurn(t, raw)
		msg, err := parseModelMessage(json.RawMessage(raw))
		if err != nil {
			return
		}
		if len(msg.toolCalls) == 0 {
			text, err := finalText(msg)
			if err == nil && (text == "" || text != strings.TrimSpace(text) || utf8.RuneCountInString(text) > protocol.MaxReplyChars) {
				t.Fatalf("accepted final text out of bounds")
			}
			return
		}
		used := map[string]bool{"call_0_0": true}
		calls, inputs := normalizeCalls(0, msg.toolCalls, used, func(n string) bool { return declared[n] })
		if len(calls) != len(msg.toolCalls) || len(inputs) != len(calls) {
			t.Fatalf("normalized %d calls from %d", len(calls), len(msg.toolCalls))
		}
		seen := map[string]bool{}
		for i, c := range calls {
			if !protocol.ValidCallID(c.ID) || seen[c.ID] || c.ID == "call_0_0" {
				t.Fatalf("call %d id %q invalid, duplicate or reused", i, c.ID)
			}
			seen[c.ID] = true
			if !declared[c.Function.Name] {
				t.Fatalf("call %d name %q not declared", i, c.Function.Name)
			}
			if c.Function.Arguments != OmittedArguments && jsonStringLen(c.Function.Arguments) > MaxArgumentBytes {
				t.Fatalf("call %d arguments over bound", i)
			}
			if inputs[i] != nil {
				var obj map[string]json.RawMessage
				if json.Unmarshal(inputs[i], &obj) != nil || obj == nil {
					t.Fatalf("call %d input is not an object", i)
				}
			}
			if !used[c.ID] {
				t.Fatalf("call %d id not recorded as used", i)
			}
		}
	})
}

// FuzzHistoryFile: any history.json either fails the load (and is left
// byte-identical) or yields at most 20 user/assistant entries within bounds.
func FuzzHistoryFile(f *testing.F) {
	f.Add([]byte(`[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]`))
	f.Add([]byte(`[{"role":"tool","content":"a"}]`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[{"role":"user","content":"\u0001\u2028"}] `))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, HistoryFile)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		entries, _, err := loadHistory(fd)
		if err != nil {
			if !errors.Is(err, ErrHistory) {
				t.Fatalf("error %v is not ErrHistory", err)
			}
			if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
				t.Fatalf("failed load changed the file")
			}
			return
		}
		if len(entries) > MaxHistoryMessages {
			t.Fatalf("%d entries", len(entries))
		}
		for _, e := range entries {
			if (e.Role != "user" && e.Role != "assistant") || jsonStringLen(e.Content) > MaxHistoryEntryBytes {
				t.Fatalf("entry out of bounds: role %q, %d bytes", e.Role, jsonStringLen(e.Content))
			}
		}
	})
}

// FuzzToolAnswer: whatever a broker answers for a host or MCP tool, the
// worker either refuses it or hands the model compact JSON.
func FuzzToolAnswer(f *testing.F) {
	f.Add([]byte(`{"result":{"a":1}}`), true)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`), false)
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":1}}`), false)
	f.Add([]byte(`{"result":null}`), true)
	f.Fuzz(func(t *testing.T, raw []byte, host bool) {
		b := &fakeBroker{tools: map[string]func([]byte) (json.RawMessage, error){
			"/tools/x": func([]byte) (json.RawMessage, error) { return json.RawMessage(raw), nil },
			"/mcp/s":   func([]byte) (json.RawMessage, error) { return json.RawMessage(raw), nil },
		}}
		tr := &turnRun{broker: b}
		var out string
		var err error
		if host {
			out, err = tr.hostTool(context.Background(), "/tools/x", json.RawMessage(`{}`))
		} else {
			out, err = tr.mcpTool(context.Background(), "/mcp/s", "t", json.RawMessage(`{}`))
		}
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if !json.Valid([]byte(out)) || json.Compact(&buf, []byte(out)) != nil || buf.String() != out {
			t.Fatalf("tool text %q is not compact JSON", out)
		}
	})
}

// fuzzWholeTurn runs a turn whose first model answer is raw: the turn ends
// in a reply or ErrTurn, and any follow-up request is paired and in budget.
func fuzzWholeTurn(t *testing.T, raw []byte) {
	if !json.Valid(raw) {
		return // the transport refuses non-JSON before the loop sees it
	}
	turn := newTurn()
	turn.Tools = []protocol.ToolSpec{{Name: "x", Description: "x", Parameters: json.RawMessage(`{"type":"object"}`)}}
	b := &fakeBroker{
		model: []func(modelRequest) (json.RawMessage, error){answer(string(raw)), textAnswer("done")},
		tools: map[string]func([]byte) (json.RawMessage, error){"/tools/x": func([]byte) (json.RawMessage, error) {
			return json.RawMessage(`{"result":"r"}`), nil
		}},
	}
	r := runTurn(t, t.TempDir(), turn, b)
	if r.err != nil && !errors.Is(r.err, ErrTurn) {
		t.Fatalf("error %v is not ErrTurn", r.err)
	}
	if r.err == nil && (!r.reply.OK || r.reply.Text == "") {
		t.Fatalf("reply %+v", r.reply)
	}
	if len(b.reqs) > 1 {
		req := b.reqs[1]
		if n := size(t, req); n > MaxRequestBytes {
			t.Fatalf("follow-up request %d bytes", n)
		}
		checkNoOrphans(t, 1, req.Messages[2:])
	}
}
