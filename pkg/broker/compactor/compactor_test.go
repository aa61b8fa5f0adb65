package compactor

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

func request(t *testing.T) *sessions.CompactRequest {
	t.Helper()
	body, _ := json.Marshal(sessions.CompactRequest{Reason: sessions.ReasonThreshold, TokensBefore: 310_000, FirstKeptEntryID: "k1",
		MessagesToSummarize: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
		TurnPrefixMessages:  []json.RawMessage{}, KeptMessages: []json.RawMessage{}, ReadFiles: []string{}, ModifiedFiles: []string{}})
	req, err := sessions.ParseCompactRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestSlotFreeOnceAnswered: a call's answer is given only after its slot is
// free, so the worker's next request (sent once it has the answer) never
// meets its own finished call as busy. Before, the runner's goroutine
// handed the answer over first and freed the slot after.
func TestSlotFreeOnceAnswered(t *testing.T) {
	cfg := &policy.Compactor{Kind: policy.CompactorExec, Argv: []string{"/bin/true"}, Engine: "test_engine"}
	run := func(context.Context, []byte, Turn) ([]byte, error) { return []byte("null"), nil }
	c := New(cfg, run, func(any) bool { return false }, slog.New(slog.DiscardHandler), time.Now)
	req := request(t)
	for i := 0; i < 2000; i++ {
		turn := Turn{ID: fmt.Sprintf("%032x", i), Deadline: time.Now().Add(10 * time.Minute), Length: 10 * time.Minute}
		call := c.Begin(turn)
		if !call.Acquire() {
			t.Fatalf("request %d: busy, but the call before it was answered", i+1)
		}
		out, err := call.Compact(context.Background(), req, turn)
		call.Release()
		var a sessions.CompactAnswer
		if err != nil || json.Unmarshal(out, &a) != nil || a.Fallback != sessions.FallbackUndefined {
			t.Fatalf("request %d: %s, %v; want fallback undefined", i+1, out, err)
		}
	}
}
