package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrProtocol is the category of every stream the Decoder refuses.
var ErrProtocol = errors.New("run stream protocol violation")

// ArtifactChunk is the size of every artifact data frame but an
// artifact's last (which carries the rest): the Decoder refuses any other
// split, so artifact framing costs a bounded number of frames.
const ArtifactChunk = 256 << 10

// Limits bound what a Decoder accepts. LimitsFor derives them from a Job.
type Limits struct {
	// MaxOutputBytes bounds stdout and stderr each, setup and main together.
	MaxOutputBytes int
	// MaxArtifacts bounds artifact headers; MaxArtifactBytes one
	// artifact's size; MaxArtifactTotalBytes their sizes together.
	MaxArtifacts          int
	MaxArtifactBytes      int64
	MaxArtifactTotalBytes int64
	// Setup is the job's number of setup commands.
	Setup int
	// MaxTotalBytes bounds the whole stream, framing included; 0 derives
	// it from the other limits (output framed in 1-byte chunks, the worst
	// legitimate case, included).
	MaxTotalBytes int64
}

// LimitsFor returns the limits a stream answering j must keep.
func LimitsFor(j Job) Limits {
	return Limits{
		MaxOutputBytes:        j.MaxOutputBytes,
		MaxArtifacts:          len(j.Artifacts),
		MaxArtifactBytes:      j.MaxArtifactBytes,
		MaxArtifactTotalBytes: j.MaxArtifactTotalBytes,
		Setup:                 len(j.Setup),
	}
}

func (l Limits) valid() error {
	if l.MaxOutputBytes <= 0 || l.MaxArtifacts < 0 || l.MaxArtifactBytes <= 0 || l.MaxArtifactTotalBytes <= 0 ||
		l.Setup < 0 || l.MaxTotalBytes < 0 {
		return fmt.Errorf("wire: invalid decoder limits %+v", l)
	}
	return nil
}

func (l Limits) maxTotal() int64 {
	if l.MaxTotalBytes > 0 {
		return l.MaxTotalBytes
	}
	out := 2 * int64(l.MaxOutputBytes) * (HeaderBytes + 2) // every byte its own frame
	art := l.MaxArtifactTotalBytes + (l.MaxArtifactTotalBytes/ArtifactChunk+int64(l.MaxArtifacts)+1)*HeaderBytes
	meta := int64(l.Setup+l.MaxArtifacts+2) * (HeaderBytes + MaxMetaBytes)
	return out + art + meta
}

// Frame is one decoded frame. Which fields are set depends on Type.
type Frame struct {
	Type FrameType
	// Phase is PhaseSetup or PhaseMain (FrameStdout, FrameStderr).
	Phase string
	// Data is output (FrameStdout, FrameStderr) or artifact data
	// (FrameArtifactData); a fresh slice the caller may keep.
	Data []byte
	// PhaseEnd is set for FramePhase.
	PhaseEnd PhaseEnd
	// Artifact is the header (FrameArtifact) or the artifact the data
	// belongs to (FrameArtifactData).
	Artifact ArtifactHeader
	// Result is set for FrameResult.
	Result Result
}

// Decoder reads frames from a hostile stream (the host's side). It is not
// safe for concurrent use. Its errors never quote what the stream sent (an
// artifact path, a phase name, a JSON key): the host logs them.
//
// It refuses, with an error wrapping ErrProtocol: an unknown type; a payload
// over MaxFrame or over its type's bound; more output per stream than
// MaxOutputBytes (excess is refused, not truncated: the supervisor never
// sends it); a frame out of order (setup output or phase ends out of
// sequence, main output before every setup command succeeded or after the
// main phase ended, an artifact before the main phase ended, artifact data
// not exactly its header's size in ArtifactChunk pieces, anything between an
// artifact's header and its last data frame); more than MaxArtifacts
// headers; an artifact over MaxArtifactBytes or the sizes over
// MaxArtifactTotalBytes; an invalid artifact path or unknown artifact error;
// JSON that is not exactly one object of known fields; a result that
// contradicts the phase ends; more than MaxTotalBytes; the end of the stream
// before the result; and anything after the result. Read errors of the
// underlying reader are returned as they are. Every error is sticky.
type Decoder struct {
	r     *bufio.Reader
	l     Limits
	max   int64
	total int64
	err   error

	out         [2]int // stdout, stderr bytes
	setupEnded  int    // last setup index that ended
	setupFailed int    // index of the setup command that exited non-zero
	setupExit   int
	mainStarted bool // main output seen
	mainEnded   bool
	mainExit    int
	artifacts   int
	artTotal    int64
	cur         ArtifactHeader // artifact whose data is due
	remaining   int64
	done        bool // result returned
}

// NewDecoder returns a Decoder reading r within l.
func NewDecoder(r io.Reader, l Limits) *Decoder {
	d := &Decoder{r: bufio.NewReaderSize(r, 64<<10), l: l}
	if err := l.valid(); err != nil {
		d.err = err
	}
	d.max = l.maxTotal()
	return d
}

// Next returns the next frame. After the result frame it returns io.EOF if
// the stream ends there and an ErrProtocol error if anything follows.
func (d *Decoder) Next() (Frame, error) {
	if d.err != nil {
		return Frame{}, d.err
	}
	f, err := d.next()
	if err != nil {
		d.err = err
	}
	return f, err
}

func protocolf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

func (d *Decoder) next() (Frame, error) {
	var hdr [HeaderBytes]byte
	n, err := io.ReadFull(d.r, hdr[:])
	switch {
	case d.done && n == 0 && err == io.EOF:
		return Frame{}, io.EOF
	case d.done && n > 0:
		return Frame{}, protocolf("data after the result frame")
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return Frame{}, protocolf("stream ended before the result frame: %w", io.ErrUnexpectedEOF)
	case err != nil:
		return Frame{}, err
	}
	t := FrameType(hdr[0])
	size := binary.BigEndian.Uint32(hdr[1:])
	if size > MaxFrame {
		return Frame{}, protocolf("%v frame of %d bytes, over %d", t, size, MaxFrame)
	}
	d.total += HeaderBytes + int64(size)
	if d.total > d.max {
		return Frame{}, protocolf("stream over %d bytes", d.max)
	}
	// Each type's bound is checked before its payload is read.
	switch t {
	case FrameStdout, FrameStderr:
		if size < 2 || size > 1+MaxChunk {
			return Frame{}, protocolf("%v frame of %d bytes: want a phase byte and 1 to %d bytes", t, size, MaxChunk)
		}
	case FramePhase, FrameArtifact, FrameResult:
		if size > MaxMetaBytes {
			return Frame{}, protocolf("%v frame of %d bytes, over %d", t, size, MaxMetaBytes)
		}
	case FrameArtifactData:
		if d.remaining == 0 {
			return Frame{}, protocolf("artifact data without an artifact expecting it")
		}
		if want := min(d.remaining, ArtifactChunk); int64(size) != want {
			return Frame{}, protocolf("artifact data frame of %d bytes, want %d", size, want)
		}
	default:
		return Frame{}, protocolf("unknown frame type %d", byte(t))
	}
	if d.remaining > 0 && t != FrameArtifactData {
		return Frame{}, protocolf("%v frame before the artifact received its %d remaining bytes", t, d.remaining)
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(d.r, payload); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Frame{}, protocolf("stream ended inside a %v frame: %w", t, io.ErrUnexpectedEOF)
		}
		return Frame{}, err
	}
	switch t {
	case FrameStdout, FrameStderr:
		return d.output(t, payload)
	case FramePhase:
		return d.phase(payload)
	case FrameArtifact:
		return d.artifact(payload)
	case FrameArtifactData:
		d.remaining -= int64(size)
		return Frame{Type: t, Data: payload, Artifact: d.cur}, nil
	default: // FrameResult
		return d.result(payload)
	}
}

func (d *Decoder) output(t FrameType, payload []byte) (Frame, error) {
	if d.mainEnded {
		return Frame{}, protocolf("%v output after the main phase ended", t)
	}
	var phase string
	switch payload[0] {
	case phaseByteSetup:
		phase = PhaseSetup
		if d.setupFailed > 0 || d.setupEnded >= d.l.Setup || d.mainStarted {
			return Frame{}, protocolf("%v setup output with no setup command running", t)
		}
	case phaseByteMain:
		phase = PhaseMain
		if d.setupFailed > 0 || d.setupEnded < d.l.Setup {
			return Frame{}, protocolf("%v main output before every setup command succeeded", t)
		}
		d.mainStarted = true
	default:
		return Frame{}, protocolf("%v frame with unknown phase byte %d", t, payload[0])
	}
	i := 0
	if t == FrameStderr {
		i = 1
	}
	d.out[i] += len(payload) - 1
	if d.out[i] > d.l.MaxOutputBytes {
		return Frame{}, protocolf("%v output over %d bytes", t, d.l.MaxOutputBytes)
	}
	return Frame{Type: t, Phase: phase, Data: payload[1:]}, nil
}

func (d *Decoder) phase(payload []byte) (Frame, error) {
	var p PhaseEnd
	if err := StrictJSON(payload, &p); err != nil {
		return Frame{}, protocolf("phase frame: %v", err)
	}
	if p.ExitCode < 0 || p.ExitCode > MaxExitCode {
		return Frame{}, protocolf("phase exit code %d out of 0..%d", p.ExitCode, MaxExitCode)
	}
	if d.setupFailed > 0 || d.mainEnded {
		return Frame{}, protocolf("phase frame after the last command ended")
	}
	switch p.Phase {
	case PhaseSetup:
		if d.mainStarted || p.Index != d.setupEnded+1 || p.Index > d.l.Setup {
			return Frame{}, protocolf("setup phase end %d out of sequence (%d of %d ended)", p.Index, d.setupEnded, d.l.Setup)
		}
		d.setupEnded = p.Index
		if p.ExitCode != 0 {
			d.setupFailed, d.setupExit = p.Index, p.ExitCode
		}
	case PhaseMain:
		if p.Index != 0 || d.setupEnded != d.l.Setup {
			return Frame{}, protocolf("main phase end out of sequence (index %d, %d of %d setup commands ended)", p.Index, d.setupEnded, d.l.Setup)
		}
		d.mainEnded, d.mainExit = true, p.ExitCode
	default:
		return Frame{}, protocolf("unknown phase")
	}
	return Frame{Type: FramePhase, PhaseEnd: p}, nil
}

func (d *Decoder) artifact(payload []byte) (Frame, error) {
	var h ArtifactHeader
	if err := StrictJSON(payload, &h); err != nil {
		return Frame{}, protocolf("artifact frame: %v", err)
	}
	if !d.mainEnded {
		return Frame{}, protocolf("artifact before the main phase ended")
	}
	d.artifacts++
	if d.artifacts > d.l.MaxArtifacts {
		return Frame{}, protocolf("more than %d artifacts", d.l.MaxArtifacts)
	}
	if err := ValidArtifactPath(h.Path); err != nil {
		return Frame{}, protocolf("artifact path: %v", err)
	}
	switch {
	case h.Error != "" && !knownArtifactError(h.Error):
		return Frame{}, protocolf("unknown artifact error")
	case h.Error != "" && h.Size != 0:
		return Frame{}, protocolf("an artifact has an error and a size")
	case h.Size < 0 || h.Size > d.l.MaxArtifactBytes:
		return Frame{}, protocolf("an artifact of %d bytes, outside 0..%d", h.Size, d.l.MaxArtifactBytes)
	case d.artTotal+h.Size > d.l.MaxArtifactTotalBytes:
		return Frame{}, protocolf("artifacts over %d bytes together", d.l.MaxArtifactTotalBytes)
	}
	d.artTotal += h.Size
	d.cur, d.remaining = h, h.Size
	return Frame{Type: FrameArtifact, Artifact: h}, nil
}

func (d *Decoder) result(payload []byte) (Frame, error) {
	var r Result
	if err := StrictJSON(payload, &r); err != nil {
		return Frame{}, protocolf("result frame: %v", err)
	}
	if r.ExitCode < -1 || r.ExitCode > MaxExitCode {
		return Frame{}, protocolf("result exit code %d out of -1..%d", r.ExitCode, MaxExitCode)
	}
	if r.FailedSetup < 0 || r.FailedSetup > d.l.Setup {
		return Frame{}, protocolf("result failedSetup %d out of 0..%d", r.FailedSetup, d.l.Setup)
	}
	if len(r.Error) > MaxErrorBytes {
		return Frame{}, protocolf("result error over %d bytes", MaxErrorBytes)
	}
	for i := 0; i < len(r.Error); i++ {
		if c := r.Error[i]; c < 0x20 || c > 0x7e {
			return Frame{}, protocolf("result error is not printable ASCII")
		}
	}
	// A cut stream is one that reached its bound (the supervisor drops
	// only past it), and dropped bytes mean a cut. A cut without a count
	// is a toolbox built before the count: the cut is still reported.
	for i, c := range []struct {
		truncated bool
		dropped   int64
	}{{r.StdoutTruncated, r.StdoutDropped}, {r.StderrTruncated, r.StderrDropped}} {
		switch {
		case c.dropped < 0:
			return Frame{}, protocolf("result counts negative dropped bytes")
		case c.dropped > 0 && !c.truncated:
			return Frame{}, protocolf("result's truncation flag and dropped bytes disagree")
		case c.truncated && d.out[i] != d.l.MaxOutputBytes:
			return Frame{}, protocolf("result says a stream was cut below its bound (%d of %d bytes)", d.out[i], d.l.MaxOutputBytes)
		}
	}
	if r.Error == "" {
		// A result without an error states what the phase ends said.
		switch {
		case r.FailedSetup > 0:
			if r.FailedSetup != d.setupFailed || r.ExitCode != d.setupExit {
				return Frame{}, protocolf("result names setup %d exit %d, the phase ends said setup %d exit %d", r.FailedSetup, r.ExitCode, d.setupFailed, d.setupExit)
			}
		case !d.mainEnded || r.ExitCode != d.mainExit:
			return Frame{}, protocolf("result exit code %d without a main phase end saying so", r.ExitCode)
		}
	} else if r.FailedSetup > 0 && r.FailedSetup != d.setupFailed {
		return Frame{}, protocolf("result names setup %d, the phase ends said %d", r.FailedSetup, d.setupFailed)
	}
	d.done = true
	return Frame{Type: FrameResult, Result: r}, nil
}

// StrictJSON decodes exactly one JSON object of known fields; its errors
// never quote the input (pkg/sessionwire's frames use it too).
func StrictJSON(b []byte, v any) error {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// encoding/json's message may quote the sender's field names or
		// values; the host logs these errors, so only the category is kept.
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return errors.New("unknown field")
		}
		return errors.New("not one object of the known fields and types")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the object")
	}
	return nil
}
