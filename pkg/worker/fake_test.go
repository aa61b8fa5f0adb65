package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// recorded is one call the fake broker received.
type recorded struct {
	route string
	body  []byte
}

// fakeBroker scripts model answers and tool answers behind the Broker interface.
type fakeBroker struct {
	mu    sync.Mutex
	model []func(req modelRequest) (json.RawMessage, error)
	// repeat answers every model call after the script runs out (nil: fail).
	repeat func(req modelRequest) (json.RawMessage, error)
	tools  map[string]func(body []byte) (json.RawMessage, error)
	calls  []recorded
	reqs   []modelRequest
}

func (f *fakeBroker) Call(_ context.Context, route string, body any) (json.RawMessage, error) {
	data, err := marshal(body)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, recorded{route, data})
	if route != "/model" {
		h := f.tools[route]
		if h == nil {
			return nil, &RefusedError{Status: 403}
		}
		return h(data)
	}
	var req modelRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, err
	}
	f.reqs = append(f.reqs, req)
	if len(f.model) > 0 {
		next := f.model[0]
		f.model = f.model[1:]
		return next(req)
	}
	if f.repeat != nil {
		return f.repeat(req)
	}
	return nil, &RefusedError{Status: 429}
}

func (f *fakeBroker) toolCalls() []recorded {
	var out []recorded
	for _, c := range f.calls {
		if c.route != "/model" {
			out = append(out, c)
		}
	}
	return out
}

func answer(raw string) func(modelRequest) (json.RawMessage, error) {
	return func(modelRequest) (json.RawMessage, error) { return json.RawMessage(raw), nil }
}

func textAnswer(text string) func(modelRequest) (json.RawMessage, error) {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": text}}}})
	return answer(string(b))
}

// call builds one tool call; id, name or args may be any JSON value.
func call(id, name, args any) map[string]any {
	return map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}
}

func toolAnswer(calls ...map[string]any) func(modelRequest) (json.RawMessage, error) {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": calls}}}})
	return answer(string(b))
}

func newTurn() *protocol.Turn {
	return &protocol.Turn{
		Text:     "hello there",
		Speaker:  protocol.Speaker{ID: "u1", Name: "Alice"},
		Model:    "test-model",
		Prompt:   "You are a helpful guest assistant.",
		TimeZone: "UTC",
	}
}

type result struct {
	reply protocol.Reply
	err   error
	logs  string
}

func runTurn(t *testing.T, dir string, turn *protocol.Turn, b Broker) result {
	t.Helper()
	if err := turn.Validate(); err != nil {
		t.Fatalf("test turn invalid: %v", err)
	}
	var logs bytes.Buffer
	reply, err := Run(context.Background(), turn, Options{
		Broker:    b,
		Workspace: dir,
		Logger:    slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:       func() time.Time { return time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC) },
	})
	return result{reply, err, logs.String()}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readHistory(t *testing.T, dir string) []historyEntry {
	t.Helper()
	var h []historyEntry
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, HistoryFile))), &h); err != nil {
		t.Fatalf("history.json: %v", err)
	}
	return h
}

func mustOK(t *testing.T, r result) {
	t.Helper()
	if r.err != nil || !r.reply.OK {
		t.Fatalf("turn: reply %+v err %v\nlogs:\n%s", r.reply, r.err, r.logs)
	}
}

func mustFail(t *testing.T, r result, want string) {
	t.Helper()
	if !errors.Is(r.err, ErrTurn) {
		t.Fatalf("turn: reply %+v err %v, want ErrTurn", r.reply, r.err)
	}
	if want != "" && !strings.Contains(r.err.Error(), want) {
		t.Errorf("error %q does not say %q", r.err, want)
	}
}

func historyJSON(n int, content func(i int) string) string {
	var h []historyEntry
	for i := 0; i < n; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		h = append(h, historyEntry{Role: role, Content: content(i)})
	}
	b, _ := marshal(h)
	return string(b)
}

func size(t *testing.T, v any) int {
	t.Helper()
	b, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

var _ = fmt.Sprintf
