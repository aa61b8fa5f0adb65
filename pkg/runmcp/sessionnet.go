package runmcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/client"
)

// A session's network exec (docs/sessions.md, Network execs): the human
// behind the MCP client approves this one exec through elicitation, then
// the server approves it on the host (the admin role) when the host says
// it waits; without elicitation nothing runs.

// Tool errors of a network exec. Each says that the command did not run.
const (
	msgExecNoNetwork = "this session was started without network (sandbox_session_start with network: true); the command was not run"
	msgExecCannotAsk = "network needs a human's approval and this client cannot ask for it; the command was not run"
	msgExecDeclined  = "the human did not approve network for this command; it was not run"
	msgExecNoAnswer  = "no answer to the network approval question in time; the command was not run"
	msgExecAskFailed = "the network approval question failed; the command was not run"
	msgExecTCP       = "network is not offered by an MCP server on a TCP port (every local user can reach it and could answer the approval question); the command was not run"
	msgExecNeedAdmin = "network was approved by the human, but granting it needs the host's admin role, which this MCP server's user lacks; the command was not run"
	msgExecApprove   = "network was approved by the human, but the host did not take the approval; the command was not run"
	msgExecUnlisted  = "the host did not list the credentials a session may ask for; the command was not run"
)

// execApprovalSchema is a network exec's yes/no question (allowSchema).
var execApprovalSchema = allowSchema("Allow network for this command",
	"Allow once: this command only, through the host's egress proxy and its allow list, with exactly the credentials named above.")

// execApprovalMessage names the session and what would run with network.
// creds is credentialsShown's text for in.Credentials.
func execApprovalMessage(session string, in execIn, creds string) string {
	var b strings.Builder
	b.WriteString("A sandbox session asks for NETWORK access for one command.\n")
	fmt.Fprintf(&b, "Session: %s\n", strconv.Quote(truncate(session, 64)))
	if in.Executable != "" || in.Command == "" {
		argv := append([]string{in.Executable}, in.Args...)
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&b, "Executable: %s\n", truncate(strings.Join(q, " "), maxShownCommand))
	} else {
		fmt.Fprintf(&b, "Command: %s\n", truncate(strconv.Quote(in.Command), maxShownCommand))
	}
	if in.Root {
		b.WriteString("As root (a package installer's capabilities)\n")
	}
	t := in.TimeoutSeconds
	if t == 0 {
		t = 120
	}
	fmt.Fprintf(&b, "Timeout: %d s\n", t)
	fmt.Fprintf(&b, "Processes this command leaves behind lose network when it ends.\n")
	if len(in.Credentials) == 0 {
		b.WriteString("Credentials: none\nAllow network for this one command?")
		return b.String()
	}
	fmt.Fprintf(&b, "Credentials the host adds to this command's requests to their hosts (the command sees only a placeholder in each variable, never the value): %s\n", creds)
	b.WriteString("Allow network with these credentials for this one command?")
	return b.String()
}

// approveExec asks the client's human; "" means approved, anything else is
// the tool error to return (nothing has been sent to the host).
// project is the session's, whose credentials the host lists.
func (s *server) approveExec(ctx context.Context, ss *mcp.ServerSession, in execIn, project string) string {
	if s.o.TCP {
		return msgExecTCP
	}
	if !canElicit(ss) {
		return msgExecCannotAsk
	}
	var creds string
	if len(in.Credentials) > 0 {
		var msg string
		var ok bool
		if creds, msg, ok = s.credentialsShown(ctx, project, in.Credentials, msgExecUnlisted, "the command was not run"); !ok {
			return msg
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.ApprovalTimeout)
	defer cancel()
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{
		Mode:            "form",
		Message:         execApprovalMessage(in.SessionID, in, creds),
		RequestedSchema: execApprovalSchema,
	})
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		s.logf.Info("session network approval: no answer in time", "session", in.SessionID, "timeout", s.o.ApprovalTimeout)
		return msgExecNoAnswer
	case err != nil:
		s.logf.Info("session network approval: elicitation failed", "session", in.SessionID, "err", err)
		return msgExecAskFailed
	case res.Action != "accept":
		return msgExecDeclined
	}
	if allow, ok := res.Content["allow"].(bool); !ok || !allow {
		return msgExecDeclined
	}
	return ""
}

// errApproval ends following an exec whose host approval failed: the
// connection's end withdraws the exec, which never started.
type errApproval struct{ msg string }

func (e *errApproval) Error() string { return e.msg }

// hostApprove approves exec on the host once it says the exec waits.
func (s *server) hostApprove(ctx context.Context, r SessionRunner, session, exec string) error {
	if _, err := r.ApproveExec(ctx, session, exec); err != nil {
		if errors.Is(err, client.ErrForbidden) {
			s.logf.Warn("session network approval refused by the host: this user lacks the admin role", "session", session)
			return &errApproval{msgExecNeedAdmin}
		}
		s.logf.Error("session network approval failed", "session", session, "exec", exec, "err", err)
		return &errApproval{msgExecApprove}
	}
	s.logf.Info("session network exec approved through elicitation", "session", session, "exec", exec)
	return nil
}
