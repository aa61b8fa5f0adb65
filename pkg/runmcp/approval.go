package runmcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// Tool errors of the network flow. Each says that nothing ran.
const (
	msgCannotAsk = "network needs a human's approval and this client cannot ask for it; the run was not started"
	msgDeclined  = "the human did not approve network for this run; the run was not started"
	msgNoAnswer  = "no answer to the network approval question in time; the run was not started"
	msgAskFailed = "the network approval question failed; the run was not started"
	msgTCP       = "network is not offered by an MCP server on a TCP port (every local user can reach it and could answer the approval question); the run was not started"
	msgNeedAdmin = "network was approved by the human, but granting it needs the host's admin role, which this MCP server's user lacks; the run was cancelled before it started"
	// The human is shown each credential's variable and host, as the host
	// lists them; without that list nobody is asked.
	msgCredsUnlisted = "the host did not list the credentials a run may ask for; the run was not started"
)

// credentialUnavailable is the tool error of a credential the host does not
// offer this client and project: refused before the human is asked, as the
// host would refuse the run after.
func credentialUnavailable(name, what string) string {
	return fmt.Sprintf("credential %s is not available to this client or project (the host's egress.credentials); %s", truncate(strconv.Quote(name), 80), what)
}

// credentialsShown names each of names for the approval question: the
// variable its placeholder arrives in and the host it reaches, as the host
// lists them for project (GET /v1/credentials). ok false: msg is the tool
// error to return and nobody is asked.
func (s *server) credentialsShown(ctx context.Context, project string, names []string, unlisted, what string) (shown, msg string, ok bool) {
	listed, err := s.r.Credentials(ctx, project)
	if err != nil {
		s.logf.Error("network approval: the host did not list the credentials", "err", err)
		return "", unlisted, false
	}
	byName := make(map[string]runs.Credential, len(listed))
	for _, c := range listed {
		byName[c.Name] = c
	}
	q := make([]string, len(names))
	for i, n := range names {
		c, found := byName[n]
		if !found {
			return "", credentialUnavailable(n, what), false
		}
		q[i] = fmt.Sprintf("%s in $%s for %s", truncate(strconv.Quote(n), 80), c.Variable, net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
	}
	return strings.Join(q, ", "), "", true
}

// canElicit reports whether the client declared form elicitation at
// initialize (an empty elicitation capability means form, as the spec and
// the SDK read it).
func canElicit(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return false
	}
	e := ip.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil
}

// allowSchema asks one yes/no question: only accept with allow=true
// approves.
func allowSchema(title, description string) map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"allow": map[string]any{"type": "boolean", "title": title, "description": description, "default": false},
		},
		"required": []string{"allow"},
	}
}

var approvalSchema = allowSchema("Allow network for this run",
	"Allow once: this run only, through the host's egress proxy and its allow list, with exactly the credentials named above.")

// Bounds of the approval message: the command is the model's text, shown
// quoted so that newlines or control characters cannot pose as our words.
const (
	maxShownCommand = 600
	maxShownSetup   = 5
)

// approvalMessage names what would run with network.
// creds is credentialsShown's text for p.Credentials.
func approvalMessage(p runs.Params, project, creds string) string {
	var b strings.Builder
	b.WriteString("A sandbox run asks for NETWORK access (this run only).\n")
	if p.Executable != "" || p.Command == "" {
		argv := append([]string{p.Executable}, p.Args...)
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&b, "Executable: %s\n", truncate(strings.Join(q, " "), maxShownCommand))
	} else {
		fmt.Fprintf(&b, "Command: %s\n", truncate(strconv.Quote(p.Command), maxShownCommand))
	}
	for i, s := range p.Setup {
		if i == maxShownSetup {
			fmt.Fprintf(&b, "... and %d more setup commands\n", len(p.Setup)-i)
			break
		}
		fmt.Fprintf(&b, "Setup as root %d: %s\n", i+1, truncate(strconv.Quote(s), maxShownCommand))
	}
	if project != "" {
		fmt.Fprintf(&b, "Project (read-only): %s\n", strconv.Quote(project))
	} else {
		b.WriteString("Project: none\n")
	}
	t := p.TimeoutSeconds
	if t == 0 {
		t = runs.DefaultTimeoutSeconds
	}
	fmt.Fprintf(&b, "Timeout: %d s\n", t)
	if len(p.Credentials) == 0 {
		b.WriteString("Credentials: none\n")
		b.WriteString("Allow network for this one run?")
		return b.String()
	}
	fmt.Fprintf(&b, "Credentials the host adds to this run's requests to their hosts (the run sees only a placeholder in each variable, never the value): %s\n", creds)
	b.WriteString("Allow network with these credentials for this one run?")
	return b.String()
}

// approve asks the client's human; "" means approved, anything else is the
// tool error to return (nothing has been started).
func (s *server) approve(ctx context.Context, ss *mcp.ServerSession, p runs.Params) string {
	if s.o.TCP {
		return msgTCP
	}
	if !canElicit(ss) {
		return msgCannotAsk
	}
	var creds string
	if len(p.Credentials) > 0 {
		var msg string
		var ok bool
		if creds, msg, ok = s.credentialsShown(ctx, p.Project, p.Credentials, msgCredsUnlisted, "the run was not started"); !ok {
			return msg
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.ApprovalTimeout)
	defer cancel()
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{
		Mode:            "form",
		Message:         approvalMessage(p, s.o.Project, creds),
		RequestedSchema: approvalSchema,
	})
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		s.logf.Info("network approval: no answer in time", "timeout", s.o.ApprovalTimeout)
		return msgNoAnswer
	case err != nil:
		s.logf.Info("network approval: elicitation failed", "err", err)
		return msgAskFailed
	case res.Action != "accept":
		return msgDeclined
	}
	if allow, ok := res.Content["allow"].(bool); !ok || !allow {
		return msgDeclined
	}
	return ""
}
