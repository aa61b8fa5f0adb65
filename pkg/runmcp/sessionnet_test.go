package runmcp

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// networkExec is the host's network exec: it waits for an approval of
// exec "x7" (ApproveExec), then runs; without one the fake ends it as
// the host does when its client leaves.
func (f *fakeSessions) networkExec(x apiwire.SessionExec, fn func(apiwire.SessionExecEvent) error) (apiwire.SessionExecResult, error) {
	if err := fn(apiwire.SessionExecEvent{Type: apiwire.ExecApproval, ExecID: "x7"}); err != nil {
		f.mu.Lock()
		f.log = append(f.log, "withdrawn")
		f.mu.Unlock()
		return apiwire.SessionExecResult{}, err
	}
	f.mu.Lock()
	approved := slices.Contains(f.log, "approve x7")
	f.log = append(f.log, "ran "+x.Command)
	f.mu.Unlock()
	if !approved {
		return apiwire.SessionExecResult{}, &client.Error{Status: http.StatusConflict, Reason: "ran without approval"}
	}
	fn(apiwire.SessionExecEvent{Type: apiwire.ExecStdout, Data: []byte("fetched\n")})
	return apiwire.SessionExecResult{}, nil
}

func (f *fakeSessions) ApproveExec(_ context.Context, id, execID string) (apiwire.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.approveErr != nil {
		return apiwire.Session{}, f.approveErr
	}
	f.log = append(f.log, "approve "+execID)
	return apiwire.Session{ID: id}, nil
}

// TestSessionNetworkExecElicits: a network exec asks the human first,
// naming the session, the command and the credentials; declined or
// unanswerable, nothing reaches the host; approved, the server approves
// the exec the host says waits, and the command runs; a host that refuses
// the server's approval (not an admin) leaves the exec withdrawn.
func TestSessionNetworkExecElicits(t *testing.T) {
	id := strings.Repeat("a", 32)
	args := map[string]any{"session_id": id, "command": "curl https://api.github.test", "network": true, "credentials": []string{"gh"}}
	run := func(f *fakeSessions, co *mcp.ClientOptions) string {
		t.Helper()
		cs := connect(t, f, Options{Project: "demo"}, co)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolExec, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return text(t, res)
	}
	// Declined: nothing sent.
	f := &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}, project: "proj"}
	a := &asked{}
	if got := run(f, elicitWith(&mcp.ElicitResult{Action: "decline"}, nil, a)); got != msgExecDeclined {
		t.Errorf("declined: %q", got)
	}
	if len(f.execs) != 0 {
		t.Errorf("a declined exec reached the host: %+v", f.execs)
	}
	msgs := a.Messages()
	if len(msgs) != 1 || !strings.Contains(msgs[0], `Session: "`+id+`"`) || !strings.Contains(msgs[0], `Command: "curl https://api.github.test"`) || !strings.Contains(msgs[0], `"gh"`) {
		t.Errorf("elicitation %q: want the session, the command and the credential", msgs)
	}
	if !strings.Contains(msgs[0], `"gh" in $GH_TOKEN for api.github.test:443`) || !slices.Equal(f.credsFor, []string{"proj"}) {
		t.Errorf("elicitation %q (credentials listed for %q): want the variable and host the session's project offers", msgs, f.credsFor)
	}
	// A credential the host does not list: refused before the human is
	// asked, nothing sent.
	f = &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}}
	f.Creds = []runs.Credential{}
	a = &asked{}
	if got := run(f, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, a)); got != credentialUnavailable("gh", "the command was not run") ||
		len(a.Messages()) != 0 || len(f.execs) != 0 {
		t.Errorf("unlisted credential: %q, asked %q, %d execs", got, a.Messages(), len(f.execs))
	}
	// Accepted without allow: declined.
	f = &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}}
	if got := run(f, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": false}}, nil, &asked{})); got != msgExecDeclined || len(f.execs) != 0 {
		t.Errorf("allow false: %q, %d execs", got, len(f.execs))
	}
	// Approved: the host's waiting exec is approved, then it runs.
	f = &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}}
	got := run(f, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &asked{}))
	if !strings.Contains(got, "fetched") || !slices.Equal(f.log, []string{"show", "approve x7", "ran curl https://api.github.test"}) {
		t.Errorf("approved: %q, host saw %q", got, f.log)
	}
	if len(f.execs) != 1 || !f.execs[0].Network || !slices.Equal(f.execs[0].Credentials, []string{"gh"}) {
		t.Errorf("exec sent %+v", f.execs)
	}
	// The host refuses this user's approval: withdrawn, never run.
	f = &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}, approveErr: client.ErrForbidden}
	if got := run(f, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &asked{})); got != msgExecNeedAdmin ||
		!slices.Equal(f.log, []string{"show", "withdrawn"}) {
		t.Errorf("not admin: %q, host saw %q", got, f.log)
	}
	// A session started without network: refused before the human is
	// asked, nothing sent but the lookup.
	f = &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}, plain: true}
	a = &asked{}
	if got := run(f, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, a)); got != msgExecNoNetwork ||
		len(a.Messages()) != 0 || len(f.execs) != 0 || !slices.Equal(f.log, []string{"show"}) {
		t.Errorf("plain session: %q, asked %q, %d execs, host saw %q", got, a.Messages(), len(f.execs), f.log)
	}
	// TCP: never asked, never sent.
	f = &fakeSessions{fakeRunner: newFake(), files: map[string][]byte{}}
	cs := connect(t, f, Options{TCP: true}, elicitWith(&mcp.ElicitResult{Action: "accept", Content: map[string]any{"allow": true}}, nil, &asked{}))
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolExec, Arguments: args})
	if err != nil || text(t, res) != msgExecTCP || len(f.execs) != 0 {
		t.Errorf("tcp: %v %+v %d", err, res, len(f.execs))
	}
}
