package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/richroute"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
	"github.com/roundtable-sandbox/sandbox/pkg/sessions"
)

// The compactor's routes through a rich channel broker's socket; the
// compactor's own rules are tested in pkg/broker/richroute (compact_test.go),
// whose request and compactor helpers these repeat.

const (
	compactSecretText = "PAYLOAD-never-logged-7f3a" // in every request message and summary
	compactorKey      = "compactor-REAL-bearer-9q8w7e6r5t4y"
	compactTurnID     = "0123456789abcdef0123456789abcdef"
)

// compactBody is a valid request whose messages carry compactSecretText.
func compactBody(t *testing.T) []byte {
	t.Helper()
	prev := "previous " + compactSecretText
	b, err := json.Marshal(sessions.CompactRequest{
		Reason: sessions.ReasonThreshold, TokensBefore: 310_000, FirstKeptEntryID: "k1",
		MessagesToSummarize: []json.RawMessage{json.RawMessage(`{"role":"user","content":"` + compactSecretText + `"}`)},
		TurnPrefixMessages:  []json.RawMessage{}, KeptMessages: []json.RawMessage{},
		PreviousSummary: &prev, ReadFiles: []string{"/workspace/" + compactSecretText}, ModifiedFiles: []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const goodCompaction = `{"summary":"summary of ` + compactSecretText + `","firstKeptEntryId":"k1","tokensBefore":310000,"estimatedTokensAfter":9000,"details":{"engine":"spoofed","kept":2}}`

func script(t *testing.T, body string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "compactor")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{p}
}

func execCompactor(t *testing.T, body string) *policy.Compactor {
	return &policy.Compactor{Kind: policy.CompactorExec, Argv: script(t, body)}
}

// TestRichCompactRoutes: the routes through a rich channel broker's socket:
// refused outside a bound turn, answered inside it, 404 without a compactor.
func TestRichCompactRoutes(t *testing.T) {
	h := newRichHarness(t, os.Getuid())
	cfg := execCompactor(t, "cat >/dev/null; printf '%s' '"+goodCompaction+"'")
	cfg.Engine = "jev"
	h.pol.Rich.Compactor = cfg // read on the compactor's first use
	body := string(compactBody(t))
	rep := `{"event":"compacted","trigger":"threshold","engine":"jev","tokensBefore":310000,"tokensAfter":9000,"contextAfter":12000,"nextCompactionAt":300000}`
	if code, _, _ := h.do(richroute.RouteCompact, body); code != http.StatusUnauthorized {
		t.Fatalf("/compact outside a bound turn: %d, want 401", code)
	}
	if code, _, _ := h.do(richroute.RouteCompactReport, rep); code != http.StatusUnauthorized {
		t.Fatalf("/compact/report outside a bound turn: %d, want 401", code)
	}
	h.announce(t)
	got := h.control(context.Background(), h.bind("medium"))
	if code, out, _ := h.do(richproto.RouteNext, ""); code != http.StatusOK {
		t.Fatalf("poll: %d %s", code, out)
	}
	code, out, _ := h.do(richroute.RouteCompact, body)
	var a sessions.CompactAnswer
	if code != http.StatusOK || json.Unmarshal([]byte(out), &a) != nil || a.Compaction == nil || a.Compaction.Engine() != "jev" {
		t.Fatalf("/compact in the turn: %d %s", code, out)
	}
	if code, out, _ := h.do(richroute.RouteCompactReport, rep); code != http.StatusOK {
		t.Fatalf("/compact/report in the turn: %d %s", code, out)
	}
	if code, _, _ := h.do(richproto.RouteResult, resultJSON(richTurnID, "done")); code != http.StatusOK {
		t.Fatalf("result: %d", code)
	}
	<-got
	h.waitUnbound(t)
	if code, _, _ := h.do(richroute.RouteCompact, body); code != http.StatusUnauthorized {
		t.Fatalf("/compact after revoke: %d, want 401", code)
	}
	logs := h.logs.String()
	for _, w := range []string{`"msg":"compaction by the host compactor"`, `"engine":"jev"`, `"msg":"conversation compacted (worker report)"`, `"turn":"` + richTurnID + `"`} {
		if !strings.Contains(logs, w) {
			t.Errorf("log lacks %s", w)
		}
	}
	if strings.Contains(logs, compactSecretText) {
		t.Error("a payload reached the log")
	}

	none := newRichHarness(t, os.Getuid())
	none.control(context.Background(), none.bind("medium"))
	none.waitBound(t)
	if code, _, _ := none.do(richroute.RouteCompact, body); code != http.StatusNotFound {
		t.Fatalf("/compact without a compactor: %d, want 404", code)
	}
	if code, _, _ := none.do(richroute.RouteCompactReport, rep); code != http.StatusOK {
		t.Fatalf("/compact/report without a compactor: %d, want 200", code)
	}
}
