package apiwire

import "time"

// The sessions' bodies (/v1/sessions, DESIGN.md section 18; package
// livesession serves them).

// Session states.
const (
	SessionStarting = "starting"
	SessionRunning  = "running"
	SessionPaused   = "paused"
	SessionClosing  = "closing"
)

// SessionCreate is POST /v1/sessions. Every field is optional: no
// project (an empty /workspace), sessions.memoryMb, sessions.ttlSeconds.
// Network gives the session a broker that a network exec may be granted
// (each such exec still waits for a human's approval); Credentials are the
// egress.credentials names its execs may later ask for (only with Network).
type SessionCreate struct {
	Project     string   `json:"project,omitempty"`
	MemoryMb    int      `json:"memoryMb,omitempty"`
	TTLSeconds  int      `json:"ttlSeconds,omitempty"`
	Network     bool     `json:"network,omitempty"`
	Credentials []string `json:"credentials,omitempty"`
}

// Session is a session's status.
type Session struct {
	ID        string    `json:"id"`
	State     string    `json:"state"`
	OwnerUID  int       `json:"ownerUid"`
	Project   string    `json:"project,omitempty"`
	MemoryMb  int       `json:"memoryMb"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	LastUsed  time.Time `json:"lastUsedAt"`
	// Execs are running now; ExecsTotal ever started; Resumes the times
	// it was thawed.
	Execs      int `json:"execs"`
	ExecsTotal int `json:"execsTotal"`
	Resumes    int `json:"resumes"`
	// Network: the session has a broker for network execs; Credentials
	// are the names declared at create; NetworkExec is the exec that
	// holds the session's network now (awaiting approval or running);
	// Approvals are the execs waiting for a human's decision.
	Network     bool              `json:"network,omitempty"`
	Credentials []string          `json:"credentials,omitempty"`
	NetworkExec string            `json:"networkExec,omitempty"`
	Approvals   []SessionApproval `json:"approvals,omitempty"`
}

// SessionApproval is a network exec waiting for an admin's approve or
// deny (POST /v1/sessions/{session}/execs/{exec}/approve|deny): what it
// would run, with which credentials, until when it waits.
type SessionApproval struct {
	ExecID         string   `json:"execId"`
	Command        string   `json:"command,omitempty"`
	Executable     string   `json:"executable,omitempty"`
	Args           []string `json:"args,omitempty"`
	Root           bool     `json:"root,omitempty"`
	TimeoutSeconds int      `json:"timeoutSeconds"`
	Credentials    []string `json:"credentials,omitempty"`
	// CredentialVariables names, per credential, the variable the exec
	// sees its placeholder in (docs/credentialed-egress.md).
	CredentialVariables map[string]string `json:"credentialVariables,omitempty"`
	Deadline            time.Time         `json:"deadline"`
}

// SessionList is GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// SessionExec is POST /v1/sessions/{session}/exec: exactly one of Command
// (through /bin/sh -c) or Executable with Args. Env names follow
// sessionwire.ValidEnvName. Network (with Credentials among those
// declared at create) waits for a human's approval of this exec; its first
// event is then "approval" naming the exec id to approve.
type SessionExec struct {
	Command        string            `json:"command,omitempty"`
	Executable     string            `json:"executable,omitempty"`
	Args           []string          `json:"args,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          []byte            `json:"stdin,omitempty"`
	TimeoutSeconds int               `json:"timeoutSeconds,omitempty"`
	Root           bool              `json:"root,omitempty"`
	Network        bool              `json:"network,omitempty"`
	Credentials    []string          `json:"credentials,omitempty"`
}

// Exec event types (the NDJSON lines of an exec).
const (
	ExecApproval = "approval"
	ExecStarted  = "started"
	ExecStdout   = "stdout"
	ExecStderr   = "stderr"
	ExecResult   = "result"
	ExecError    = "error"
)

// SessionExecEvent is one NDJSON line of an exec: for a network exec
// first approval (ExecID, waiting for a human's decision), started (ExecID), a
// chunk of stdout or stderr (Data), then exactly one result or error.
type SessionExecEvent struct {
	Type   string             `json:"type"`
	ExecID string             `json:"execId"`
	Data   []byte             `json:"data,omitempty"`
	Result *SessionExecResult `json:"result,omitempty"`
	Error  string             `json:"error,omitempty"`
}

// SessionExecResult ends an exec: its exit code (128 + the signal's
// number when a signal ended it), whether its timeout or a cancel killed
// it, what was cut of its output, and its durations.
type SessionExecResult struct {
	ExitCode        int    `json:"exitCode"`
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	Cancelled       bool   `json:"cancelled,omitempty"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	StdoutDropped   int64  `json:"stdoutDropped,omitempty"`
	StderrDropped   int64  `json:"stderrDropped,omitempty"`
	StartMs         int64  `json:"startMs"`
	RunMs           int64  `json:"runMs"`
}

// SessionCancel is POST /v1/sessions/{session}/cancel: the running exec
// to kill (its process group).
type SessionCancel struct {
	ExecID string `json:"execId"`
}

// SessionDecision is POST /v1/sessions/{session}/approve or deny (the
// admin role): the network exec the decision is for.
type SessionDecision struct {
	ExecID string `json:"execId"`
}

// SessionPath names a session path (relative: under /work; or under
// /output or /tmp) for files/get, files/list and files/tar.
type SessionPath struct {
	Path string `json:"path"`
}

// SessionPut is POST /v1/sessions/{session}/files/put: Data written
// atomically at Path with Mode (0: 0644).
type SessionPut struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode,omitempty"`
	Data []byte `json:"data"`
}

// SessionFile is a file put (Size, no Data) or got (Data; a tar for
// files/tar). Changed: the file changed while it was read.
type SessionFile struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode,omitempty"`
	Changed bool   `json:"changed,omitempty"`
	Skipped int    `json:"skipped,omitempty"`
	Data    []byte `json:"data,omitempty"`
}

// SessionEntry is one name of a listed directory (a symlink is listed,
// never followed).
type SessionEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// SessionListing is POST /v1/sessions/{session}/files/list.
type SessionListing struct {
	Path      string         `json:"path"`
	Entries   []SessionEntry `json:"entries"`
	Truncated bool           `json:"truncated,omitempty"`
}
