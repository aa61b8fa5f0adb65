package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
)

// TestBrokerNotStartedTwice: a turn's broker budgets (calls, refusals) live
// in its memory, so a broker that dies mid-turn (killed here; in life an
// exec tool past MemoryMax stops the whole unit) must not be started again by
// its socket with fresh budgets. The unit starts once a turn
// (StartLimitBurst=1): the worker's next call fails instead of being served.
func TestBrokerNotStartedTwice(t *testing.T) {
	diagnose(t)
	c := baseConfig()
	c.Image = hostileImage
	withConfig(t, c)
	const ch = "e2e-broker-once"
	channelOn(t, ch)
	ws, _ := layout.WorkspaceDir(layout.WorkspaceRoot, ch)
	_ = os.Remove(filepath.Join(ws, "called"))
	_ = os.Remove(filepath.Join(ws, "release"))

	done := make(chan apiResult, 1)
	go func() { done <- turn(ch, "alice", "RESTART check") }()
	waitContainer(t, ch, 20*time.Second)
	release := func() { _ = os.WriteFile(filepath.Join(ws, "release"), nil, 0o644) }
	defer release()
	if msg := eventually(30*time.Second, func() string {
		if _, err := os.Stat(filepath.Join(ws, "called")); err != nil {
			return "the worker never made its first call"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	var turnID string
	for _, tt := range activeTurns(t) {
		// Not the channel's next standby, prepared while this turn runs.
		if tt.ChannelTag == ids.ChannelTag(ch) && tt.Standby == "" {
			turnID = tt.ID
		}
	}
	if turnID == "" {
		t.Fatalf("the turn is not listed in /v1/turns")
	}
	unit := "sandbox-broker@" + turnID + ".service"
	systemctl(t, "kill", "--signal=SIGKILL", unit)
	if msg := eventually(10*time.Second, func() string {
		if s := unitActive(unit); s == "active" || s == "deactivating" {
			return unit + " is still " + s + " after SIGKILL"
		}
		return ""
	}); msg != "" {
		t.Fatal(msg)
	}
	release()
	var r apiResult
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the turn did not end after its release")
	}
	if r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("turn: %s", r)
	}
	var calls struct {
		First, Second struct {
			Status int    `json:"status"`
			Error  string `json:"error"`
		}
	}
	if err := json.Unmarshal([]byte(replyText(r)), &calls); err != nil {
		t.Fatalf("the reply is not the worker's report: %v: %s", err, r.Raw)
	}
	t.Logf("first call %d %s; after the broker was killed: %d %s", calls.First.Status, calls.First.Error, calls.Second.Status, calls.Second.Error)
	if calls.First.Status != http.StatusOK {
		t.Errorf("the first call got %d %s, want 200", calls.First.Status, calls.First.Error)
	}
	if calls.Second.Status != 0 {
		t.Errorf("after its broker was killed the worker's call got HTTP %d: a second broker served the turn", calls.Second.Status)
	}
	out, _ := run("journalctl", "-u", unit, "-o", "cat", "--no-pager")
	if n := strings.Count(out, "broker ready"); n != 1 {
		t.Errorf("%s logged 'broker ready' %d times, want once:\n%s", unit, n, out)
	}
	assertNothingLeft(t, "after the broker-restart turn")
}
