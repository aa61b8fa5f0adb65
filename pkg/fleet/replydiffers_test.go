package fleet

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestStoredReplyThatDiffersIsSaid: a reply is create-only, so a box
// storing a turn's reply over another one (a box that gave up on the turn
// stored "failed" first) keeps the first, and says so in its log, rather
// than taking the key's existence for its own reply (found in review).
// Its own reply stored again is silent.
func TestStoredReplyThatDiffersIsSaid(t *testing.T) {
	r := newRig(t, 1, 1)
	ctx := r.ctx()
	f, _ := r.fleet("a")
	var logs bytes.Buffer // the box is not started: it logs on this goroutine
	log := slog.New(slog.NewTextHandler(&logs, nil))
	b, err := NewBox(f, BoxOptions{Name: "a", Executor: newRecorder(), AckWait: testAckWait, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	id := newTurn("chan-differs", "x").ID
	failed := Reply{TurnID: id, Error: ErrorFailed, Box: "b", Seq: 1}
	if err := f.putReply(ctx, failed); err != nil {
		t.Fatal(err)
	}
	ours := Reply{TurnID: id, OK: true, Text: "done", Box: "a", Generation: 1, Seq: 1}
	if err := b.publishReply(ctx, ours, log); err != nil {
		t.Fatalf("publishReply over another reply = %v, want nil (the first stands)", err)
	}
	if got := logs.String(); !strings.Contains(got, "another reply stored") {
		t.Errorf("log %q: want a line saying another reply stands", got)
	}
	if got, err := f.Reply(ctx, id); err != nil || got.OK || got.Box != "b" {
		t.Errorf("stored reply %+v, %v: want the first (failed, box b)", got, err)
	}
	if replyCount(t, f, id) != 1 {
		t.Errorf("the reply key was written twice")
	}

	own := newTurn("chan-own", "x").ID
	mine := Reply{TurnID: own, OK: true, Text: "done", Box: "a", Generation: 1, Seq: 1}
	if err := f.putReply(ctx, mine); err != nil {
		t.Fatal(err)
	}
	before := logs.String()
	if err := b.publishReply(ctx, mine, log); err != nil {
		t.Fatalf("publishReply of its own stored reply = %v", err)
	}
	if after := logs.String(); after != before {
		t.Errorf("its own reply stored again was logged: %q", strings.TrimPrefix(after, before))
	}
}
