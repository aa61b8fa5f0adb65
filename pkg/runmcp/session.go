package runmcp

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
)

// The session tools (docs/api.md, Sessions): a sandbox that lives across
// calls, beside the disposable sandbox_run.
const (
	ToolSessionStart = "sandbox_session_start"
	ToolExec         = "sandbox_exec"
	ToolWriteFile    = "sandbox_write_file"
	ToolReadFile     = "sandbox_read_file"
	ToolSessionClose = "sandbox_session_close"
)

// SessionRunner is the part of the host API the session tools drive
// (pkg/client). A Runner that is one gets them beside sandbox_run.
type SessionRunner interface {
	CreateSession(ctx context.Context, p apiwire.SessionCreate) (apiwire.Session, error)
	Session(ctx context.Context, id string) (apiwire.Session, error)
	Exec(ctx context.Context, id string, x apiwire.SessionExec, fn func(apiwire.SessionExecEvent) error) (apiwire.SessionExecResult, error)
	PutFile(ctx context.Context, id, path string, mode uint32, data []byte) (apiwire.SessionFile, error)
	GetFile(ctx context.Context, id, path string, tar bool) (apiwire.SessionFile, error)
	CloseSession(ctx context.Context, id string) (apiwire.Session, error)
	ApproveExec(ctx context.Context, id, execID string) (apiwire.Session, error)
}

type sessionStartIn struct {
	TTLSeconds  int      `json:"ttl_seconds,omitempty" jsonschema:"remove the session after this many seconds (default and most: the host's sessions.ttlSeconds)"`
	Network     bool     `json:"network,omitempty" jsonschema:"let the session's commands ask for network later (each one approved by the human)"`
	Credentials []string `json:"credentials,omitempty" jsonschema:"credential names (the host's egress.credentials) its network commands may ask for; with network"`
}

type execIn struct {
	SessionID      string   `json:"session_id" jsonschema:"the id sandbox_session_start returned"`
	Command        string   `json:"command,omitempty" jsonschema:"Shell command (mutually exclusive with executable)"`
	Executable     string   `json:"executable,omitempty" jsonschema:"Executable to run without a shell"`
	Args           []string `json:"args,omitempty" jsonschema:"Arguments for the executable (argv mode)"`
	Cwd            string   `json:"cwd,omitempty" jsonschema:"Working directory, relative to /work (default) or under /output or /tmp"`
	Stdin          string   `json:"stdin,omitempty" jsonschema:"Standard input (at most 256 KiB)"`
	TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"Timeout in seconds (default 120, max 3600)"`
	Root           bool     `json:"root,omitempty" jsonschema:"Run as root with a package installer's capabilities"`
	Network        bool     `json:"network,omitempty" jsonschema:"Network for this command only (a session started with network): the human is asked to approve it"`
	Credentials    []string `json:"credentials,omitempty" jsonschema:"Credential names declared at the session's start that this command's requests carry (with network)"`
}

type writeFileIn struct {
	SessionID string `json:"session_id" jsonschema:"the id sandbox_session_start returned"`
	Path      string `json:"path" jsonschema:"relative to /work, or under /output or /tmp"`
	Content   string `json:"content,omitempty" jsonschema:"the file's text"`
	Base64    string `json:"content_base64,omitempty" jsonschema:"the file's bytes, base64 (instead of content)"`
	Mode      uint32 `json:"mode,omitempty" jsonschema:"permission bits, default 0644 (420)"`
}

type readFileIn struct {
	SessionID string `json:"session_id" jsonschema:"the id sandbox_session_start returned"`
	Path      string `json:"path" jsonschema:"relative to /work, or under /output or /tmp"`
}

type sessionCloseIn struct {
	SessionID string `json:"session_id" jsonschema:"the id sandbox_session_start returned"`
}

// addSessionTools adds the session tools backed by r.
func (s *server) addSessionTools(srv *mcp.Server, r SessionRunner) {
	mcp.AddTool(srv, &mcp.Tool{Name: ToolSessionStart, Description: "Start a sandbox session: an offline toolbox container that keeps its files (/work) and background processes across sandbox_exec calls, until sandbox_session_close or its time to live. The project is read-only at /workspace. Returns the session id."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sessionStartIn) (*mcp.CallToolResult, any, error) {
			st, err := r.CreateSession(ctx, apiwire.SessionCreate{Project: s.o.Project, TTLSeconds: in.TTLSeconds,
				Network: in.Network, Credentials: in.Credentials})
			if err != nil {
				return s.sessionError("start the session", err), nil, nil
			}
			s.logf.Info("session started", "session", st.ID)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("session %s started; it is removed at %s unless closed before",
				st.ID, st.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))}}, StructuredContent: st}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: ToolExec, Description: "Run a command in a sandbox session, as its unprivileged user (root: true for package installation). Files and background processes stay for the next call. Returns stdout, stderr and the exit code."},
		func(ctx context.Context, req *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, any, error) {
			if in.Network || len(in.Credentials) > 0 {
				// A session made without network can never run one: say so
				// rather than ask the human a question for nothing.
				st, err := r.Session(ctx, in.SessionID)
				if err != nil {
					return s.sessionError("read the session", err), nil, nil
				}
				if !st.Network {
					return toolError(msgExecNoNetwork), nil, nil
				}
				if msg := s.approveExec(ctx, req.Session, in, st.Project); msg != "" { // sessionnet.go
					return toolError(msg), nil, nil
				}
			}
			x := apiwire.SessionExec{Command: in.Command, Executable: in.Executable, Args: in.Args, Cwd: in.Cwd,
				TimeoutSeconds: in.TimeoutSeconds, Root: in.Root, Network: in.Network, Credentials: in.Credentials}
			if in.Stdin != "" {
				x.Stdin = []byte(in.Stdin)
			}
			var out, errOut strings.Builder
			res, err := r.Exec(ctx, in.SessionID, x, func(ev apiwire.SessionExecEvent) error {
				switch ev.Type {
				case apiwire.ExecStdout:
					out.Write(ev.Data)
				case apiwire.ExecStderr:
					errOut.Write(ev.Data)
				case apiwire.ExecApproval:
					return s.hostApprove(ctx, r, in.SessionID, ev.ExecID)
				}
				return nil
			})
			if ae := (*errApproval)(nil); errors.As(err, &ae) {
				return toolError(ae.msg), nil, nil
			}
			if err != nil {
				return s.sessionError("run the command", err), nil, nil
			}
			var b strings.Builder
			switch {
			case res.TimedOut:
				fmt.Fprintf(&b, "timed out and killed (exit code %d)\n", res.ExitCode)
			case res.Signal != "":
				fmt.Fprintf(&b, "killed by signal %s (exit code %d)\n", res.Signal, res.ExitCode)
			default:
				fmt.Fprintf(&b, "exit code %d\n", res.ExitCode)
			}
			cut := func(t bool, n int64) string {
				if t {
					return fmt.Sprintf("output cut: %d bytes dropped", n)
				}
				return ""
			}
			section(&b, "stdout", out.String(), cut(res.StdoutTruncated, res.StdoutDropped))
			section(&b, "stderr", errOut.String(), cut(res.StderrTruncated, res.StderrDropped))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}, IsError: res.ExitCode != 0}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: ToolWriteFile, Description: "Write a file in a sandbox session (atomically; parent directories must exist)."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in writeFileIn) (*mcp.CallToolResult, any, error) {
			data := []byte(in.Content)
			if in.Base64 != "" {
				if in.Content != "" {
					return toolError("give content or content_base64, not both"), nil, nil
				}
				var err error
				if data, err = base64.StdEncoding.DecodeString(in.Base64); err != nil {
					return toolError("content_base64 is not base64"), nil, nil
				}
			}
			f, err := r.PutFile(ctx, in.SessionID, in.Path, in.Mode, data)
			if err != nil {
				return s.sessionError("write the file", err), nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("wrote %d bytes", f.Size)}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: ToolReadFile, Description: "Read a file of a sandbox session: its text, or base64 when it is not UTF-8."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in readFileIn) (*mcp.CallToolResult, any, error) {
			f, err := r.GetFile(ctx, in.SessionID, in.Path, false)
			if err != nil {
				return s.sessionError("read the file", err), nil, nil
			}
			if utf8.Valid(f.Data) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(f.Data)}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
				Text: "base64 (not UTF-8):\n" + base64.StdEncoding.EncodeToString(f.Data)}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: ToolSessionClose, Description: "Close a sandbox session: its container, files and processes are removed."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in sessionCloseIn) (*mcp.CallToolResult, any, error) {
			if _, err := r.CloseSession(ctx, in.SessionID); err != nil {
				return s.sessionError("close the session", err), nil, nil
			}
			s.logf.Info("session closed", "session", in.SessionID)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "session closed"}}}, nil, nil
		})
}

// sessionError is a session call's failure as a tool error: the host's
// reason for what the caller can fix (4xx), a generic one otherwise.
func (s *server) sessionError(what string, err error) *mcp.CallToolResult {
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500 && ce.Status != http.StatusForbidden:
		reason := strings.ReplaceAll(ce.Reason, "timeoutSeconds", "timeout_seconds")
		return toolError("the sandbox host could not " + what + ": " + truncate(reason, 500))
	case errors.As(err, &ce) && ce.Status == http.StatusNotImplemented:
		return toolError("the sandbox host could not " + what + ": " + truncate(ce.Reason, 200))
	case errors.Is(err, client.ErrForbidden):
		s.logf.Warn("the host refused this user a session call", "err", err)
		return toolError(msgForbidden)
	}
	s.logf.Error("a session call failed", "what", what, "err", err)
	return toolError("the sandbox host could not " + what + "; its log has details")
}
