// Package runs is the run API's contract (DESIGN.md section 12), shared by
// the host, the CLI, the MCP server and the Go client: a run's parameters
// and their refusals, artifact path rules, the status and event documents,
// and the sentinel errors. The run record, its approval state machine and
// the registry are the code-run kind's own state (pkg/coderun).
// Guarantee: a Params that passed Validate names exactly one mode, only
// relative artifact paths under /output, and a timeout within bounds; every
// refusal wraps exactly one sentinel and never echoes the refused value.
package runs

import (
	"fmt"
	"strings"
	"time"
)

// Modes of a run.
const (
	ModeShell = "shell" // Params.Command through /bin/sh -c
	ModeArgv  = "argv"  // Params.Executable with Params.Args, no shell
)

// States of a run, in order. A run moves forward only.
const (
	StateAwaitingApproval = "awaiting_approval" // network runs only
	StateQueued           = "queued"            // waiting for a concurrency slot
	StateRunning          = "running"
	StateFinished         = "finished"
)

// Results of a finished run.
const (
	ResultOK        = "ok"        // the main command exited 0
	ResultFailed    = "failed"    // a setup or the main command exited non-zero
	ResultTimeout   = "timeout"   // killed at timeoutSeconds
	ResultCancelled = "cancelled" // cancelled by its owner or an admin, or the host stopped
	ResultDenied    = "denied"    // network refused by a human, or the approval timed out
	ResultError     = "error"     // the system failed (image missing, Docker error, ...)
)

// Params is the body of POST /v1/runs: the seed's sandbox_run parameters
// (timeout_seconds is timeoutSeconds here, as every key of the API), plus
// the project's name.
type Params struct {
	Project        string   `json:"project,omitempty"`
	Command        string   `json:"command,omitempty"`
	Executable     string   `json:"executable,omitempty"`
	Args           []string `json:"args,omitempty"`
	Setup          []string `json:"setup,omitempty"`
	Network        bool     `json:"network,omitempty"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"` // 0: DefaultTimeoutSeconds
	Artifacts      []string `json:"artifacts,omitempty"`
	// Credentials names the operator's credentialed destinations
	// (egress.credentials) the run asks to carry; only with Network, and
	// shown in the approval (docs/credentialed-egress.md).
	Credentials []string `json:"credentials,omitempty"`
}

// Status is a run as the API shows it. Stdout and Stderr are text: bytes that
// are not UTF-8 are replaced (the event stream carries the raw bytes).
type Status struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Result   string `json:"result,omitempty"`
	Mode     string `json:"mode"`
	Project  string `json:"project,omitempty"`
	Network  bool   `json:"network,omitempty"`
	OwnerUID int    `json:"ownerUid"`
	// Credentials are the credentialed destinations the run asked for:
	// what an approval grants besides the network.
	Credentials []string `json:"credentials,omitempty"`
	// CredentialVariables names, per credential that has one, the variable
	// the run sees its placeholder in (docs/credentialed-egress.md).
	CredentialVariables map[string]string `json:"credentialVariables,omitempty"`

	CreatedAt  time.Time  `json:"createdAt"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	// ApprovalDeadline is set while the run awaits approval.
	ApprovalDeadline *time.Time `json:"approvalDeadline,omitempty"`
	// ApprovedBy is the uid that approved network for this run.
	ApprovedBy *int `json:"approvedBy,omitempty"`

	// Standby: a run standby served the run (its container was made and
	// started before the run was admitted).
	Standby bool `json:"standby,omitempty"`

	ExitCode   *int  `json:"exitCode,omitempty"`
	DurationMs int64 `json:"durationMs,omitempty"`
	// FailedSetup is the 1-based index of the setup command that failed.
	FailedSetup int    `json:"failedSetup,omitempty"`
	Stdout      string `json:"stdout,omitempty"`
	Stderr      string `json:"stderr,omitempty"`
	// StdoutTruncated and StderrTruncated: the stream passed
	// runs.maxOutputBytes and was cut there; StdoutDroppedBytes and
	// StderrDroppedBytes count what was dropped (as the supervisor counted
	// it: a run that timed out or was cancelled has no count).
	StdoutTruncated    bool       `json:"stdoutTruncated,omitempty"`
	StderrTruncated    bool       `json:"stderrTruncated,omitempty"`
	StdoutDroppedBytes int64      `json:"stdoutDroppedBytes,omitempty"`
	StderrDroppedBytes int64      `json:"stderrDroppedBytes,omitempty"`
	Artifacts          []Artifact `json:"artifacts,omitempty"`
	// Error is a generic reason for results other than ok and failed.
	Error string `json:"error,omitempty"`
}

// Artifact is one requested file under /output. Data is set only when Error
// is empty.
type Artifact struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Data  []byte `json:"data,omitempty"`
	Error string `json:"error,omitempty"` // "missing", "not a regular file", "over the size bound", ...
}

// Event types of GET /v1/runs/{id}/events (one JSON object per line).
const (
	EventState  = "state"  // State changed
	EventOutput = "output" // Data from Stream in Phase
	EventResult = "result" // the last event: Status is the finished run
)

// Streams and phases of output events.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	PhaseSetup   = "setup"
	PhaseMain    = "main"
)

// Event is one line of a run's event stream. Seq starts at 1 and has no gaps
// unless Dropped says how many events the bounded history lost.
type Event struct {
	Seq     int64   `json:"seq"`
	Type    string  `json:"type"`
	State   string  `json:"state,omitempty"`
	Stream  string  `json:"stream,omitempty"`
	Phase   string  `json:"phase,omitempty"`
	Data    []byte  `json:"data,omitempty"`
	Dropped int64   `json:"dropped,omitempty"`
	Status  *Status `json:"status,omitempty"`
}

// CutNote says which output streams passed runs.maxOutputBytes and were
// cut, with the bytes dropped when known ("stdout cut at the host's output
// bound, 314572800 bytes dropped"); "" when nothing was cut. The CLI and
// the MCP server show it so that a cut never passes for the whole output.
func (s Status) CutNote() string {
	var parts []string
	for _, c := range []struct {
		name    string
		cut     bool
		dropped int64
	}{{StreamStdout, s.StdoutTruncated, s.StdoutDroppedBytes}, {StreamStderr, s.StderrTruncated, s.StderrDroppedBytes}} {
		switch {
		case !c.cut:
		case c.dropped > 0:
			parts = append(parts, fmt.Sprintf("%s cut at the host's output bound, %d bytes dropped", c.name, c.dropped))
		default:
			parts = append(parts, c.name+" cut at the host's output bound")
		}
	}
	return strings.Join(parts, "; ")
}

// Credential is one credentialed destination as a client sees it (GET
// /v1/credentials): what a run or a network exec may ask for, the variable
// its placeholder arrives in and the host it reaches; never the value or
// the file that holds it (docs/credentialed-egress.md).
type Credential struct {
	Name     string `json:"name"`
	Variable string `json:"variable"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
}

// CredentialList is GET /v1/credentials.
type CredentialList struct {
	Credentials []Credential `json:"credentials"`
}
