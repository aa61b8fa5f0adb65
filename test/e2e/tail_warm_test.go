package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// TestConversationStaysWarm: 20 turns to one channel, each sent as soon as
// the previous reply came back, the model answering in 1.5 s (the OVERLAP
// rule). The host prepares the channel's next standby as soon as a turn
// runs, so most of them bind a standby; before that change none did (the
// next standby came only after cleanup, when the next message was already
// waiting). A turn counts as warm when the host's "turn done" line for its
// turn id says standby=true: the host's own record, not a timing.
//
// How many is a race of the preparation against the model's 1.5 s: 19 of
// 20 on a quiet box, 16 at load (issue 25's goal of 18 is measured by make
// bench, not asserted). The test asserts at least half: a turn that finds
// its standby still preparing runs cold and the one after binds it, so only
// preparations slower than two turns could go below, while the old path
// gave none.
func TestConversationStaysWarm(t *testing.T) {
	diagnose(t)
	const ch = "e2e-conversation"
	const turns, want = 20, 10
	channelOn(t, ch)
	since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
	var turnIDs []string
	start := time.Now()
	for i := 0; i < turns; i++ {
		r := turn(ch, "alice", fmt.Sprintf("OVERLAP conversation %d", i))
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("turn %d: %s", i, r)
		}
		id, _ := r.Body["turnId"].(string)
		if id == "" {
			t.Fatalf("turn %d has no turn id: %s", i, r)
		}
		turnIDs = append(turnIDs, id)
	}
	took := time.Since(start)
	// A turn's "turn done" line comes after its cleanup, so after its reply.
	var warm []bool
	msg := eventually(30*time.Second, func() string {
		lines := strings.Split(journal("-u", layout.HostService, "--since", since, "-g", "turn done", "-o", "cat"), "\n")
		warm = warm[:0]
		for _, id := range turnIDs {
			found := ""
			for _, l := range lines {
				if strings.Contains(l, "turn="+id) {
					found = l
				}
			}
			if found == "" {
				return "no \"turn done\" line for turn " + id
			}
			warm = append(warm, strings.Contains(found, "standby=true"))
		}
		return ""
	})
	if msg != "" {
		t.Fatal(msg)
	}
	hits, seen := 0, make(map[string]bool)
	for i, w := range warm {
		if w {
			hits++
		}
		if seen[turnIDs[i]] {
			t.Errorf("turn id %s served two turns", turnIDs[i])
		}
		seen[turnIDs[i]] = true
	}
	t.Logf("back-to-back conversation: %d of %d turns on a standby (%v), %v in all", hits, turns, warm, took)
	if hits < want {
		t.Errorf("%d of %d back-to-back turns used a standby, want at least %d", hits, turns, want)
	}
	assertNothingLeft(t, "after the conversation")
}
