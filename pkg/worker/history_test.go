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

func TestHistoryKeepsTenExchanges(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 13; i++ {
		turn := newTurn()
		turn.Text = fmt.Sprintf("question %d", i)
		b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){textAnswer(fmt.Sprintf("answer %d", i))}}
		mustOK(t, runTurn(t, dir, turn, b))
		// The request carried the stored history between system and user.
		wantHist := 2 * min(i, 10)
		if got := len(b.reqs[0].Messages) - 2; got != wantHist {
			t.Errorf("turn %d: request carried %d history messages, want %d", i, got, wantHist)
		}
	}
	h := readHistory(t, dir)
	if len(h) != MaxHistoryMessages {
		t.Fatalf("history has %d messages, want %d", len(h), MaxHistoryMessages)
	}
	for k, e := range h {
		n := 3 + k/2 // oldest kept exchange is turn 3
		want := historyEntry{"user", fmt.Sprintf(`{"speaker":{"id":"u1","name":"Alice"},"message":"question %d"}`, n)}
		if k%2 == 1 {
			want = historyEntry{"assistant", fmt.Sprintf("answer %d", n)}
		}
		if e != want {
			t.Errorf("history[%d] = %+v, want %+v", k, e, want)
		}
	}
}

func TestHistoryStoresNoToolTranscript(t *testing.T) {
	dir := t.TempDir()
	turn := newTurn()
	turn.Tools = []protocol.ToolSpec{{Name: "lookup", Description: "l", Parameters: json.RawMessage(`{"type":"object"}`)}}
	b := &fakeBroker{
		model: []func(modelRequest) (json.RawMessage, error){
			toolAnswer(call("a", "host_lookup", `{"q":"ARGSECRET"}`)),
			textAnswer("final"),
		},
		tools: map[string]func([]byte) (json.RawMessage, error){"/tools/lookup": func([]byte) (json.RawMessage, error) {
			return json.RawMessage(`{"result":"RESULTSECRET"}`), nil
		}},
	}
	mustOK(t, runTurn(t, dir, turn, b))
	raw := readFile(t, filepath.Join(dir, HistoryFile))
	for _, bad := range []string{"ARGSECRET", "RESULTSECRET", "tool_call", `"tool"`, "host_lookup"} {
		if strings.Contains(raw, bad) {
			t.Errorf("history.json holds %q: %s", bad, raw)
		}
	}
	if h := readHistory(t, dir); len(h) != 2 || h[0].Role != "user" || h[1] != (historyEntry{"assistant", "final"}) {
		t.Errorf("history = %+v", h)
	}
}

func TestHistoryEntriesCapped(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("\"quoted\" ", 3000) // 27,000 chars, more encoded
	turn := newTurn()
	turn.Text = long
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){textAnswer(long)}}
	r := runTurn(t, dir, turn, b)
	mustOK(t, r)
	if r.reply.Text != strings.TrimSpace(long) {
		t.Errorf("reply was truncated: %d chars", len(r.reply.Text))
	}
	for i, e := range readHistory(t, dir) {
		if n := jsonStringLen(e.Content); n > MaxHistoryEntryBytes || !strings.HasSuffix(e.Content, TruncationMarker) {
			t.Errorf("history[%d]: %d encoded bytes, marked %v; want <= %d and marked", i, n, strings.HasSuffix(e.Content, TruncationMarker), MaxHistoryEntryBytes)
		}
	}
	if !strings.Contains(r.logs, `"what":"history entry"`) {
		t.Errorf("truncation not logged: %s", r.logs)
	}
}

func TestResetDropsHistoryKeepsMemory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, HistoryFile), historyJSON(4, func(i int) string { return fmt.Sprintf("OLD%d", i) }))
	mem := `[{"scope":"channel","key":"k","text":"kept note"}]`
	writeFile(t, filepath.Join(dir, "memory.json"), mem)
	turn := newTurn()
	turn.Reset = true
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){textAnswer("fresh")}}
	mustOK(t, runTurn(t, dir, turn, b))
	msgs := b.reqs[0].Messages
	if len(msgs) != 2 {
		t.Errorf("reset request has %d messages, want system+user", len(msgs))
	}
	if !strings.Contains(msgs[0].Content, "kept note") {
		t.Errorf("memory preview missing after reset")
	}
	if h := readHistory(t, dir); len(h) != 2 || strings.Contains(readFile(t, filepath.Join(dir, HistoryFile)), "OLD") {
		t.Errorf("history after reset = %+v", h)
	}
	if got := readFile(t, filepath.Join(dir, "memory.json")); got != mem {
		t.Errorf("memory.json changed by reset: %s", got)
	}
}

func TestCorruptFilesFailAndStayByteIdentical(t *testing.T) {
	big := "[" + strings.Repeat(" ", MaxHistoryFileBytes) + "]"
	tests := []struct{ name, file, content string }{
		{"history not json", HistoryFile, "[{"},
		{"history object", HistoryFile, `{"role":"user"}`},
		{"history null", HistoryFile, `null`},
		{"history tool role", HistoryFile, `[{"role":"tool","content":"x"}]`},
		{"history system role", HistoryFile, `[{"role":"system","content":"x"}]`},
		{"history content not string", HistoryFile, `[{"role":"user","content":1}]`},
		{"history extra field", HistoryFile, `[{"role":"assistant","content":"x","tool_calls":[]}]`},
		{"history too many", HistoryFile, historyJSON(21, func(int) string { return "x" })},
		{"history oversized", HistoryFile, big},
		{"memory not json", "memory.json", "[[["},
		{"memory wrong shape", "memory.json", `[{"scope":"channel","key":"k"}]`},
		{"memory oversized", "memory.json", "[" + strings.Repeat(" ", 512<<10) + "]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tt.file)
			writeFile(t, p, tt.content)
			b := &fakeBroker{repeat: textAnswer("ok")}
			r := runTurn(t, dir, newTurn(), b)
			mustFail(t, r, tt.file)
			if got := readFile(t, p); got != tt.content {
				t.Errorf("%s changed", tt.file)
			}
			if len(b.calls) != 0 {
				t.Errorf("model called %d times on a corrupt workspace", len(b.calls))
			}
			if !strings.Contains(r.logs, `"msg":"turn failed"`) || !strings.Contains(r.logs, tt.file) {
				t.Errorf("no clear log line naming %s: %s", tt.file, r.logs)
			}
		})
	}
}

func TestSymlinksNeverFollowedOutOfWorkspace(t *testing.T) {
	outsideDir := t.TempDir()
	outside := filepath.Join(outsideDir, "target.json")
	orig := `[{"role":"user","content":"outside"}]`
	for _, tt := range []struct {
		name  string
		file  string
		reset bool
		ok    bool
	}{
		{"history read", HistoryFile, false, false},
		{"history replaced on reset", HistoryFile, true, true},
		{"memory read", "memory.json", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, outside, orig)
			dir := t.TempDir()
			link := filepath.Join(dir, tt.file)
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			turn := newTurn()
			turn.Reset = tt.reset
			b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){toolAnswer(call("a", "memory_set", `{"scope":"channel","key":"k","text":"v"}`)), textAnswer("ok")}}
			r := runTurn(t, dir, turn, b)
			if tt.ok {
				mustOK(t, r)
				if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("%s is not a regular file after the write: %v", tt.file, err)
				}
			} else {
				mustFail(t, r, tt.file)
			}
			if got := readFile(t, outside); got != orig {
				t.Errorf("outside file changed through the %s symlink: %s", tt.file, got)
			}
		})
	}
	// A workspace that is itself a symlink is refused.
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(outsideDir, ws); err != nil {
		t.Fatal(err)
	}
	mustFail(t, runTurn(t, ws, newTurn(), &fakeBroker{repeat: textAnswer("ok")}), "open workspace")
}

func TestWritesAtomicNoTempLeft(t *testing.T) {
	dir := t.TempDir()
	b := &fakeBroker{model: []func(modelRequest) (json.RawMessage, error){toolAnswer(call("a", "memory_set", `{"scope":"channel","key":"k","text":"v"}`)), textAnswer("ok")}}
	mustOK(t, runTurn(t, dir, newTurn(), b))
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	if got := strings.Join(names, ","); got != "history.json,memory.json" {
		t.Errorf("workspace holds %s, want only history.json,memory.json", got)
	}
}
