package rich

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/anthropic/anthropictest"
	"github.com/roundtable-sandbox/sandbox/pkg/policy"
	"github.com/roundtable-sandbox/sandbox/pkg/richproto"
)

// controlAs binds a turn for principal with the lookup tool and returns
// the control route's status and body.
func (p *realPeers) controlAs(text, principal string) (int, string) {
	p.t.Helper()
	turn := newTurn(text)
	turn.Thinking = "off"
	turn.MaxOutputTokens = p.pol.Rich.MaxOutputTokens
	turn.Tools = []richproto.ToolSpec{{Name: "lookup", Description: "look up", Parameters: json.RawMessage(`{"type":"object"}`)}}
	bind := policy.Bind{Turn: *turn, Identity: policy.Identity{Channel: p.pol.Identity.Channel, ChannelTag: p.pol.Identity.ChannelTag,
		SpeakerID: "u-" + principal, SpeakerName: principal, PrincipalID: principal}}
	data, _ := json.Marshal(bind)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", p.sock)
	}}}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://broker"+policy.RouteControlTurn, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestPrivateResultThroughRealBroker: a real exec host tool answers the
// private envelope for p1; the real broker checks it and passes privateTo
// to the worker (which declared both capabilities); p1's own next request
// carries the result, p2's turn reaches the upstream with placeholders
// only, and the session file keeps the result tagged.
func TestPrivateResultThroughRealBroker(t *testing.T) {
	p := newRealPeers(t,
		anthropictest.Reply{Events: anthropictest.ThinkingToolStream("claude-test", "host_lookup", `{"who":"ARG-OF-P1"}`)},
		anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "Found it.")},
		anthropictest.Reply{Events: anthropictest.TextStream("claude-test", "Hello p2.")},
	)
	script := filepath.Join(t.TempDir(), "lookup.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat >/dev/null\necho '{\"privateTo\":\"'\"$SANDBOX_PRINCIPAL_ID\"'\",\"result\":\"SECRET-OF-P1\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.stopB()
	p.pol.Tools = append(p.pol.Tools, policy.Tool{Name: "lookup", Kind: policy.KindExec, Argv: []string{"/bin/sh", script}, TimeoutMs: 5000})
	p.startBroker()
	// The worker announced itself to the stopped broker; its next poll may
	// reach the new one first, which refuses it until it announces again
	// (it must not run the turn as a worker without capabilities). The
	// bind waits for that: the first turn is answered.
	if code, body := p.controlAs("hello", "p1"); code != 200 {
		t.Fatalf("p1's turn on the new broker: %d %s; logs:\n%s", code, body, p.logs.String())
	}
	got := p.upstream.Requests()
	if len(got) != 2 || !strings.Contains(string(got[1].Body), "SECRET-OF-P1") {
		t.Fatalf("p1's own second request lacks its private result (%d requests); logs:\n%s", len(got), p.logs.String())
	}
	if code, body := p.controlAs("what did p1 get?", "p2"); code != 200 {
		t.Fatalf("p2's turn: %d %s", code, body)
	}
	got = p.upstream.Requests()
	last := string(got[len(got)-1].Body)
	if strings.Contains(last, "SECRET") || strings.Contains(last, "ARG-OF-P1") {
		t.Fatalf("p2's request carries p1's private exchange: %s", last)
	}
	if !strings.Contains(last, "toolu_01T1x1fJ34qAmk2tNTrN7Up6") || !strings.Contains(last, "Private tool result for another participant.") {
		t.Errorf("p2's request lost the call's pairing or its placeholder: %s", last)
	}
	files := sessionFiles(t, filepath.Dir(p.sock))
	data, _ := os.ReadFile(files[0])
	if !strings.Contains(string(data), `"privateTo":"p1"`) || !strings.Contains(string(data), `"type":"readers"`) {
		t.Errorf("session file lacks the tagged result or the reader records:\n%s", data)
	}
}
