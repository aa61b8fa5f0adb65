package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Framing: every frame is one type byte, a uint32 big-endian payload
// length, then the payload.
const (
	HeaderBytes = 5
	// MaxFrame bounds one frame's payload.
	MaxFrame = 1 << 20
	// MaxChunk bounds the data of one output frame (after its phase byte).
	MaxChunk = 32 << 10
	// MaxMetaBytes bounds a JSON payload (phase, artifact header, result).
	MaxMetaBytes = 64 << 10
	// MaxErrorBytes bounds Result.Error; it is printable ASCII.
	MaxErrorBytes = 256
	// MaxExitCode is the largest exit code (128 + a signal number fits).
	MaxExitCode = 255
)

// FrameType is a frame's first byte.
type FrameType byte

// Frame types, in the order a stream uses them: output chunks and phase ends
// while commands run, then each artifact's header and data, then one result.
const (
	// FrameStdout and FrameStderr carry a phase byte ('s' setup, 'm'
	// main) then 1 to MaxChunk bytes of output.
	FrameStdout FrameType = 1
	FrameStderr FrameType = 2
	// FramePhase carries a PhaseEnd: one command finished.
	FramePhase FrameType = 3
	// FrameArtifact carries an ArtifactHeader; when its Error is empty,
	// FrameArtifactData frames follow, totalling exactly its Size.
	FrameArtifact     FrameType = 4
	FrameArtifactData FrameType = 5
	// FrameResult carries the Result; nothing follows it.
	FrameResult FrameType = 6
)

func (t FrameType) String() string {
	switch t {
	case FrameStdout:
		return "stdout"
	case FrameStderr:
		return "stderr"
	case FramePhase:
		return "phase"
	case FrameArtifact:
		return "artifact"
	case FrameArtifactData:
		return "artifact data"
	case FrameResult:
		return "result"
	}
	return fmt.Sprintf("unknown(%d)", byte(t))
}

// Phases (the same words as package runs' PhaseSetup and PhaseMain).
const (
	PhaseSetup = "setup"
	PhaseMain  = "main"
)

// Phase bytes of output frames.
const (
	phaseByteSetup = 's'
	phaseByteMain  = 'm'
)

// Artifact errors: the only values ArtifactHeader.Error takes besides "".
const (
	ArtifactMissing    = "missing"
	ArtifactNotRegular = "not a regular file" // symlink, fifo, device, directory, socket
	ArtifactOverSize   = "over the size bound"
	ArtifactOverTotal  = "over the total bound"
	ArtifactChanged    = "changed while read" // grew or shrank
	ArtifactUnreadable = "unreadable"         // any other error opening or reading it
)

func knownArtifactError(s string) bool {
	switch s {
	case ArtifactMissing, ArtifactNotRegular, ArtifactOverSize, ArtifactOverTotal, ArtifactChanged, ArtifactUnreadable:
		return true
	}
	return false
}

// PhaseEnd is one finished command: a setup command (Index 1-based) or the
// main command (Index 0). ExitCode is the exit status, or 128 + the signal
// number that killed it.
type PhaseEnd struct {
	Phase    string `json:"phase"`
	Index    int    `json:"index"`
	ExitCode int    `json:"exitCode"`
}

// ArtifactHeader announces one requested artifact: Size bytes of data
// follow when Error is empty; otherwise Size is 0 and no data follows.
type ArtifactHeader struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Error string `json:"error,omitempty"`
}

// ErrorStopped is Result.Error when a signal stopped the supervisor (docker
// stop, or the Docker daemon stopping its containers): the host asks Docker
// before it blames anything else.
const ErrorStopped = "stopped by a signal"

// Result ends a stream. ExitCode is the main command's, or the failed setup
// command's when FailedSetup (1-based) is set, or -1 when Error says the
// supervisor could not run the job (Error is short, generic, printable
// ASCII; it never carries output). StdoutTruncated and StderrTruncated say
// that a stream reached Job.MaxOutputBytes and more was dropped;
// StdoutDropped and StderrDropped count the dropped bytes.
type Result struct {
	ExitCode        int    `json:"exitCode"`
	FailedSetup     int    `json:"failedSetup,omitempty"`
	Error           string `json:"error,omitempty"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	StdoutDropped   int64  `json:"stdoutDropped,omitempty"`
	StderrDropped   int64  `json:"stderrDropped,omitempty"`
}

// AppendFrame appends one frame (header and payload) to dst.
func AppendFrame(dst []byte, t FrameType, payload []byte) []byte {
	dst = append(dst, byte(t))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// ErrEncoderClosed is returned by an Encoder after its Result was written.
var ErrEncoderClosed = errors.New("wire: result already written")

// Encoder writes frames (the container's side). It is safe for concurrent
// use: each call writes whole frames under one lock, so stdout and stderr
// pumps may share it. The first write error is sticky.
type Encoder struct {
	mu   sync.Mutex
	w    io.Writer
	buf  []byte
	err  error
	done bool
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Output frames p as output of stream (FrameStdout or FrameStderr) in phase
// (PhaseSetup or PhaseMain), in chunks of at most MaxChunk. Empty p writes
// nothing.
func (e *Encoder) Output(stream FrameType, phase string, p []byte) error {
	if stream != FrameStdout && stream != FrameStderr {
		return fmt.Errorf("wire: %v is not an output stream", stream)
	}
	pb, err := phaseByte(phase)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), MaxChunk)
		e.buf = append(e.buf[:0], byte(stream))
		e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n+1))
		e.buf = append(e.buf, pb)
		e.buf = append(e.buf, p[:n]...)
		if err := e.writeLocked(); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func phaseByte(phase string) (byte, error) {
	switch phase {
	case PhaseSetup:
		return phaseByteSetup, nil
	case PhaseMain:
		return phaseByteMain, nil
	}
	return 0, fmt.Errorf("wire: unknown phase %q", phase)
}

// PhaseEnd writes one finished command.
func (e *Encoder) PhaseEnd(p PhaseEnd) error {
	return e.meta(FramePhase, p)
}

// Artifact writes one artifact's header and, when h.Error is empty, data
// (len(data) must equal h.Size) in frames of ArtifactChunk bytes, all under
// one lock so no other frame comes between them.
func (e *Encoder) Artifact(h ArtifactHeader, data []byte) error {
	if h.Error != "" && (h.Size != 0 || len(data) != 0) {
		return errors.New("wire: an artifact with an error carries no data")
	}
	if int64(len(data)) != h.Size {
		return fmt.Errorf("wire: artifact size %d but %d bytes of data", h.Size, len(data))
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.frameLocked(FrameArtifact, b); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), ArtifactChunk)
		if err := e.frameLocked(FrameArtifactData, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Result writes the last frame; every later call returns ErrEncoderClosed.
func (e *Encoder) Result(r Result) error {
	if err := e.meta(FrameResult, r); err != nil {
		return err
	}
	e.mu.Lock()
	e.done = true
	e.mu.Unlock()
	return nil
}

func (e *Encoder) meta(t FrameType, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.frameLocked(t, b)
}

func (e *Encoder) frameLocked(t FrameType, payload []byte) error {
	e.buf = AppendFrame(e.buf[:0], t, payload)
	return e.writeLocked()
}

func (e *Encoder) writeLocked() error {
	if e.err != nil {
		return e.err
	}
	if e.done {
		return ErrEncoderClosed
	}
	if _, err := e.w.Write(e.buf); err != nil {
		e.err = err
		return err
	}
	return nil
}
