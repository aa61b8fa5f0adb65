// Package sandbox is the lifecycle every kind of sealed container shares
// (sealed turns and their standbys, code runs, rich sessions, prechecks,
// delegated jobs): the turn directory and policy file, the broker units over
// the Units interface, the container through the Containers interface, the
// labels the reaper reads, phase timings, and the bounded cleanup with its
// removal retries. It knows no kind: a kind fills a Handle and drives it.
// Guarantee: Cleanup undoes exactly what a Handle records as tried (the
// container killed and force-removed with bounded retries, the broker units
// stopped, the turn directory and policy file removed), never through a
// caller's context that may be over, and when something is left it returns
// ErrCleanup after one log line naming each object an operator must inspect.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Errors the lifecycle reports and every kind shares.
var (
	// ErrCleanup: something a handle made could not be removed.
	ErrCleanup = errors.New("turn cleanup failed")
	// ErrShuttingDown is the cause of every context the host ends when it
	// stops.
	ErrShuttingDown = errors.New("host is shutting down")
	// ErrClientGone: the caller that waited for a sandbox left.
	ErrClientGone = errors.New("client disconnected")
	// ErrChannelHeld: a channel's previous sandbox could not be cleaned
	// up, so its next turn is refused (HeldError).
	ErrChannelHeld = errors.New("channel held: its previous turn's cleanup failed")
)

// HeldError refuses a channel's turn while the cleanup of its previous
// turn has failed and a retry failed again: its container or broker units
// may still exist, and a channel's next turn never starts beside them
// (docs/sealed-turns.md, "When the cleanup fails"). It names the channel
// and that turn, never the cleanup's own error (the host's log has it).
type HeldError struct {
	Channel, TurnID string
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("channel %q is held: the cleanup of its turn %s failed; sandbox-reaper, or an operator removing what the host's log names, clears it, and the channel's next turn retries the cleanup first", e.Channel, e.TurnID)
}

func (e *HeldError) Unwrap() error { return ErrChannelHeld }

// ContainerSpec mirrors container.Spec (DESIGN.md section 4).
type ContainerSpec struct {
	Name, Image           string
	UID, GID              int
	WorkspaceDir, TurnDir string
	MemoryMB              int
	CPUs                  float64
	Pids                  int64
	TmpfsMB               int
	Runtime               string
	LogTag                string
	Labels                map[string]string
	// Run makes it a code run's container (container.RunOptions).
	Run *RunContainer
	// Precheck makes it a precheck's container (container.Spec.Precheck).
	Precheck bool
	// Rich makes it a rich channel's long-lived container (container.Spec.Rich).
	Rich bool
	// SkillsDir is a rich container's read-only skills tree (container.Spec.SkillsDir).
	SkillsDir string
	// Session makes it a session's long-lived toolbox container
	// (container.SessionOptions).
	Session *SessionContainer
}

// SessionContainer mirrors container.SessionOptions.
type SessionContainer struct {
	WorkMB, OutputMB int
	Command          []string
}

// SessionContainers is what a session (DESIGN.md section 18) needs of the
// Docker driver beyond Containers: a started container whose stdin stays
// open for framed requests while its stdout and stderr are copied to the
// caller's writers, and the cgroup freezer (docker pause and unpause).
type SessionContainers interface {
	// Attach attaches to the container and starts it; its output goes to
	// stdout and stderr as it comes (a Write error ends the copy).
	Attach(ctx context.Context, id string, stdout, stderr io.Writer) (SessionStream, error)
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
}

// SessionStream is an attached session container: Write is its stdin;
// Done ends when its output copy ended (the container exited or the
// connection broke), with the copy's error; Close drops the connection.
type SessionStream interface {
	io.Writer
	Done() <-chan error
	Close()
}

// RunContainer mirrors container.RunOptions.
type RunContainer struct {
	Setup    bool
	GateDir  string // with Setup: the project's gate (container.RunOptions.GateDir)
	OutputMB int
	Command  []string
}

// RunContainers is what a code run needs of the Docker driver beyond
// Containers: attach, start, write stdin, copy stdout and stderr to the
// writers as they come (a Write error kills the container), wait; and Ping,
// to tell a daemon that went away from a container that misbehaved.
type RunContainers interface {
	Stream(ctx context.Context, id string, stdin []byte, stdout, stderr io.Writer) (int64, error)
	Ping(ctx context.Context) error
}

// RunResult mirrors container.Result.
type RunResult struct {
	Stdout    []byte
	ExitCode  int64
	Truncated bool
	// StderrRefused: stderr passed its bound and the worker was killed.
	StderrRefused bool
	// Framed: the run returned at the worker's final frame (FramedContainers):
	// Stdout is that frame, the exit status is unknown (ExitCode -1) and the
	// container may still be running until the caller's Cleanup.
	Framed bool
	// Tail, when set (Framed only), waits until the worker's streams are
	// read to their end after the frame (bounded) and says what came after
	// it that does not belong. The stderr writer is written until it
	// returns: close it, and kill the container, only after Tail.
	Tail func() error
}

// Containers is what a turn needs of the Docker driver.
type Containers interface {
	Create(ctx context.Context, spec ContainerSpec) (id string, err error)
	// Run attaches and starts the container; then, when ready is not nil,
	// calls it and writes stdin only once it returned nil (an error kills
	// the container and is returned wrapped). It then closes stdin, reads at
	// most maxStdout bytes of stdout and waits; on ctx end it kills the
	// container. It never removes it.
	// The worker's stderr is copied to stderr; a Write error from it kills
	// the container and sets StderrRefused.
	Run(ctx context.Context, id string, stdin []byte, maxStdout int64, ready func(context.Context) error, stderr io.Writer) (RunResult, error)
	Kill(ctx context.Context, id string) error
	// Remove force-removes; not found is success.
	Remove(ctx context.Context, id string) error
}

// FramedContainers is what Containers may also do for a worker whose last
// act is one final frame on stdout (a sealed turn's reply line,
// pkg/protocol): RunFramed is Run that returns as soon as stdout is exactly
// one line and accept takes it, Framed, without waiting for the worker's
// exit or Docker's wait; anything else is Run. The reply then leaves before
// the cleanup (docs/sealed-turns.md). A Containers without it runs to the
// exit.
type FramedContainers interface {
	RunFramed(ctx context.Context, id string, stdin []byte, maxStdout int64, ready func(context.Context) error, stderr io.Writer, accept func(frame []byte) bool) (RunResult, error)
}

// FramedStarted is FramedContainers for a standby: Finish that returns at
// the accepted final frame.
type FramedStarted interface {
	FinishFramed(ctx context.Context, stdin []byte, maxStdout int64, stderr io.Writer, accept func(frame []byte) bool) (RunResult, error)
}

// WarmContainers is what standbys need of the Docker driver beyond
// Containers. A Containers without it runs every turn on the cold path.
type WarmContainers interface {
	// Start attaches to the container and starts it; its worker then
	// waits for stdin.
	Start(ctx context.Context, id string) (StartedContainer, error)
	// Running reports whether the container is running now.
	Running(ctx context.Context, id string) (bool, error)
}

// StartedContainer is a started container whose worker waits for stdin
// (container.Started).
type StartedContainer interface {
	// Finish is the rest of Containers.Run: stdin, stdout, stderr, wait.
	Finish(ctx context.Context, stdin []byte, maxStdout int64, stderr io.Writer) (RunResult, error)
	// Close drops the attach connection.
	Close()
}

// StreamStarted is a started code-run container (container.Started) whose
// supervisor waits for its job on stdin: a run standby. Stream is the rest
// of RunContainers.Stream (stdin written and closed, stdout and stderr to
// the caller's writers as they arrive, the exit status); it may be called
// once.
type StreamStarted interface {
	StartedContainer
	Stream(ctx context.Context, stdin []byte, stdout, stderr io.Writer) (int64, error)
}

// Units is what a turn needs of systemd: its broker's units.
type Units interface {
	// StartBroker starts sandbox-broker@<turn>.service (its socket and
	// credential set come with it) and waits until the broker is ready.
	StartBroker(ctx context.Context, turnID string) error
	// StartBrokerService starts sandbox-broker@<turn>.service and waits for
	// the job (a standby's broker must run before a turn binds it).
	StartBrokerService(ctx context.Context, turnID string) error
	// StopBroker stops the socket and service units of the turn.
	StopBroker(ctx context.Context, turnID string) error
}

// UnitExplainer is what Units may also do: say why a sandbox's broker units
// failed (systemd's Result properties; nil when none failed). A kind asks
// after a failed run, before Cleanup stops and so unloads the units.
type UnitExplainer interface {
	ExplainBroker(ctx context.Context, turnID string) error
}

// ExitMeaning reads a container's exit status.
func ExitMeaning(status int64) string {
	switch {
	case status == 1:
		return "turn failed"
	case status == 2:
		return "worker crashed"
	case status == 128+9:
		return "killed by SIGKILL: memory limit or forced stop"
	case status == 128+15:
		return "stopped by SIGTERM"
	case status > 128 && status <= 128+64:
		return fmt.Sprintf("killed by signal %d", status-128)
	case status < 0:
		return "status unknown"
	}
	return "unexpected status"
}
