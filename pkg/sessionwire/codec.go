package sessionwire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// ErrProtocol is the category of every stream a decoder refuses.
var ErrProtocol = errors.New("session stream protocol violation")

func protocolf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// RequestEncoder writes requests (the host's side). It is safe for
// concurrent use: a put's request and data go out under one lock.
type RequestEncoder struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewRequestEncoder returns an encoder writing to w.
func NewRequestEncoder(w io.Writer) *RequestEncoder { return &RequestEncoder{w: w} }

// Request validates r (not a put: see Put) and writes it.
func (e *RequestEncoder) Request(r Request) error {
	if r.Op == OpPut {
		return errors.New("sessionwire: a put goes through Put")
	}
	return e.write(r, nil)
}

// Put validates r (r.File.Size must be len(data)) and writes it with data.
func (e *RequestEncoder) Put(r Request, data []byte) error {
	if r.Op != OpPut || r.File == nil || r.File.Size != int64(len(data)) {
		return errors.New("sessionwire: a put's size must be its data's")
	}
	return e.write(r, data)
}

func (e *RequestEncoder) write(r Request, data []byte) error {
	if err := r.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) > MaxRequestBytes {
		return invalid(fmt.Sprintf("request over %d bytes encoded", MaxRequestBytes))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf = wire.AppendFrame(e.buf[:0], wire.FrameType(FrameRequest), b)
	if _, err := e.w.Write(e.buf); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), DataChunk)
		e.buf = wire.AppendFrame(e.buf[:0], wire.FrameType(FramePutData), data[:n])
		if _, err := e.w.Write(e.buf); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// RequestDecoder reads requests (the supervisor's side). It is not safe
// for concurrent use. It refuses, wrapping ErrProtocol: a frame type other
// than a request where a request is due, a put data frame anywhere but
// after its put (in DataChunk pieces totalling exactly its size), a
// request over MaxRequestBytes (before reading it), and a stream that ends
// inside a frame or a put's data; a request whose JSON is not one object
// of known fields or that Validate refuses wraps ErrInvalidRequest too.
// A request that Validate refuses, with a valid id (and, for a put, a size
// within the bound), is a *RequestError instead: not sticky. Every other
// error is sticky; io.EOF at a frame boundary is the stream's end.
type RequestDecoder struct {
	r         *bufio.Reader
	err       error
	remaining int64 // put data not yet read
	frameLeft int   // bytes left in the current put data frame
}

// NewRequestDecoder returns a decoder reading r.
func NewRequestDecoder(r io.Reader) *RequestDecoder {
	return &RequestDecoder{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next request. The previous put's data that its caller
// left unread is read and dropped first.
func (d *RequestDecoder) Next() (Request, error) {
	if d.err != nil {
		return Request{}, d.err
	}
	if d.remaining > 0 || d.frameLeft > 0 {
		if _, err := io.Copy(io.Discard, d.Data()); err != nil {
			return Request{}, d.fail(err)
		}
	}
	t, size, err := d.header()
	if err != nil {
		if err == io.EOF {
			d.err = io.EOF
			return Request{}, io.EOF
		}
		return Request{}, d.fail(err)
	}
	if t != FrameRequest {
		return Request{}, d.fail(protocolf("%v frame where a request is due", t))
	}
	if size > MaxRequestBytes {
		return Request{}, d.fail(protocolf("request of %d bytes, over %d", size, MaxRequestBytes))
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(d.r, payload); err != nil {
		return Request{}, d.fail(cut(err))
	}
	var r Request
	if err := wire.StrictJSON(payload, &r); err != nil {
		return Request{}, d.fail(fmt.Errorf("%w: %w: request: %v", ErrProtocol, ErrInvalidRequest, err))
	}
	if err := r.Validate(); err != nil {
		// A refused request whose id and framing can still be trusted
		// is that request's failure, not the stream's: its data (a put
		// within the size bound) is skipped and the stream goes on.
		if !ValidID(r.ID) || r.Op == OpPut && (r.File == nil || r.File.Size < 0 || r.File.Size > MaxPutBytes) {
			return Request{}, d.fail(fmt.Errorf("%w: %w", ErrProtocol, err))
		}
		if r.Op == OpPut {
			d.remaining = r.File.Size
		}
		return Request{}, &RequestError{ID: r.ID, Err: err}
	}
	if r.Op == OpPut {
		d.remaining = r.File.Size
	}
	return r, nil
}

// RequestError is a request Validate refused while the stream stays in
// step: the caller answers ID with an error event and reads on. It wraps
// ErrInvalidRequest, never ErrProtocol.
type RequestError struct {
	ID  string
	Err error
}

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// Data reads the current put's data: exactly its size, then io.EOF. A
// framing error is sticky for the decoder too.
func (d *RequestDecoder) Data() io.Reader { return putData{d} }

type putData struct{ d *RequestDecoder }

func (p putData) Read(b []byte) (int, error) {
	d := p.d
	if d.err != nil {
		return 0, d.err
	}
	if d.frameLeft == 0 {
		if d.remaining == 0 {
			return 0, io.EOF
		}
		t, size, err := d.header()
		if err != nil {
			return 0, d.fail(cut(err))
		}
		if t != FramePutData {
			return 0, d.fail(protocolf("%v frame inside a put's data", t))
		}
		if want := min(d.remaining, DataChunk); int64(size) != want {
			return 0, d.fail(protocolf("put data frame of %d bytes, want %d", size, want))
		}
		d.frameLeft = int(size)
	}
	n, err := d.r.Read(b[:min(len(b), d.frameLeft)])
	d.frameLeft -= n
	d.remaining -= int64(n)
	if err != nil && (n == 0 || err != io.EOF) {
		return n, d.fail(cut(err))
	}
	return n, nil
}

func (d *RequestDecoder) header() (Type, uint32, error) {
	var hdr [HeaderBytes]byte
	n, err := io.ReadFull(d.r, hdr[:])
	if err != nil {
		if n == 0 && err == io.EOF {
			return 0, 0, io.EOF
		}
		return 0, 0, cut(err)
	}
	return Type(hdr[0]), binary.BigEndian.Uint32(hdr[1:]), nil
}

func (d *RequestDecoder) fail(err error) error {
	if d.err == nil {
		d.err = err
	}
	return d.err
}

func cut(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return protocolf("stream ended inside a frame: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// EventEncoder writes events (the supervisor's side). It is safe for
// concurrent use (each call writes whole frames under one lock); the first
// write error is sticky.
type EventEncoder struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// NewEventEncoder returns an encoder writing to w.
func NewEventEncoder(w io.Writer) *EventEncoder { return &EventEncoder{w: w} }

// Event writes one event.
func (e *EventEncoder) Event(ev Event) error { return e.Events(ev) }

// Events writes evs, in order, in one write (one read for the host, one
// pass through the attach stream's copies).
func (e *EventEncoder) Events(evs ...Event) error {
	bs := make([][]byte, len(evs))
	for i, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if len(b) > MaxEventBytes {
			return fmt.Errorf("sessionwire: event over %d bytes", MaxEventBytes)
		}
		bs[i] = b
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf = e.buf[:0]
	for _, b := range bs {
		e.buf = wire.AppendFrame(e.buf, wire.FrameType(FrameEvent), b)
	}
	return e.writeLocked()
}

// Data writes p as request id's data of type t (FrameStdout, FrameStderr
// or FrameFileData), in frames of at most MaxChunk (MaxFileChunk for file
// data). Empty p writes nothing.
func (e *EventEncoder) Data(t Type, id string, p []byte) error {
	if t != FrameStdout && t != FrameStderr && t != FrameFileData {
		return fmt.Errorf("sessionwire: %v is not a data frame", t)
	}
	if !ValidID(id) {
		return errors.New("sessionwire: invalid id")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(p) > 0 {
		n := min(len(p), chunkOf(t))
		e.buf = append(e.buf[:0], byte(t))
		e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(1+len(id)+n))
		e.buf = append(e.buf, byte(len(id)))
		e.buf = append(e.buf, id...)
		e.buf = append(e.buf, p[:n]...)
		if err := e.writeLocked(); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// chunkOf is the most data a frame of type t carries.
func chunkOf(t Type) int {
	if t == FrameFileData {
		return MaxFileChunk
	}
	return MaxChunk
}

func (e *EventEncoder) writeLocked() error {
	if e.err != nil {
		return e.err
	}
	if _, err := e.w.Write(e.buf); err != nil {
		e.err = err
	}
	return e.err
}

// EventFrame is one decoded event stream frame: Event for FrameEvent, ID
// and Data (a fresh slice) for the data frames.
type EventFrame struct {
	Type  Type
	ID    string
	Data  []byte
	Event Event
}

// maxTrackedIDs bounds the ids an EventDecoder counts data for at once.
const maxTrackedIDs = 1024

// EventDecoder reads events (the host's side) from a hostile stream. It is
// not safe for concurrent use. It refuses, wrapping ErrProtocol: an
// unknown type; a payload over its type's bound (before reading it); an
// invalid id; empty data; more than MaxOutputBytes of one stream or
// MaxTarBytes of file data for one id; data for more than 1024 ids whose
// final event has not come; an event that is not one object of known
// fields or whose fields contradict its kind (Event.Validate). Errors are
// sticky and never quote the stream.
type EventDecoder struct {
	r   *bufio.Reader
	err error
	n   map[string]*[3]int64 // stdout, stderr, file data bytes per live id
}

// NewEventDecoder returns a decoder reading r.
func NewEventDecoder(r io.Reader) *EventDecoder {
	return &EventDecoder{r: bufio.NewReaderSize(r, 64<<10), n: map[string]*[3]int64{}}
}

// Next returns the next frame; io.EOF at a frame boundary ends the stream.
func (d *EventDecoder) Next() (EventFrame, error) {
	if d.err != nil {
		return EventFrame{}, d.err
	}
	f, err := d.next()
	if err != nil {
		d.err = err
	}
	return f, err
}

func (d *EventDecoder) next() (EventFrame, error) {
	var hdr [HeaderBytes]byte
	n, err := io.ReadFull(d.r, hdr[:])
	if err != nil {
		if n == 0 && err == io.EOF {
			return EventFrame{}, io.EOF
		}
		return EventFrame{}, cut(err)
	}
	t, size := Type(hdr[0]), binary.BigEndian.Uint32(hdr[1:])
	switch t {
	case FrameEvent:
		if size > MaxEventBytes {
			return EventFrame{}, protocolf("event of %d bytes, over %d", size, MaxEventBytes)
		}
	case FrameStdout, FrameStderr, FrameFileData:
		if size < 3 || size > uint32(1+MaxIDBytes+chunkOf(t)) {
			return EventFrame{}, protocolf("%v frame of %d bytes", t, size)
		}
	default:
		return EventFrame{}, protocolf("unknown frame type %d", byte(t))
	}
	payload := make([]byte, size)
	if _, err := io.ReadFull(d.r, payload); err != nil {
		return EventFrame{}, cut(err)
	}
	if t == FrameEvent {
		var ev Event
		if err := wire.StrictJSON(payload, &ev); err != nil {
			return EventFrame{}, protocolf("event: %v", err)
		}
		if err := ev.Validate(); err != nil {
			return EventFrame{}, protocolf("event: %v", err)
		}
		if ev.Kind != EventStarted && ev.Kind != EventDone && (ev.Kind != EventList || ev.List.Done) {
			delete(d.n, ev.ID) // the request's last event
		}
		return EventFrame{Type: t, ID: ev.ID, Event: ev}, nil
	}
	idLen := int(payload[0])
	if idLen == 0 || 1+idLen >= len(payload) || len(payload)-1-idLen > chunkOf(t) {
		return EventFrame{}, protocolf("%v frame with no id, no data or over %d bytes of data", t, chunkOf(t))
	}
	id := string(payload[1 : 1+idLen])
	if !ValidID(id) {
		return EventFrame{}, protocolf("%v frame with an invalid id", t)
	}
	c, ok := d.n[id]
	if !ok {
		if len(d.n) >= maxTrackedIDs {
			return EventFrame{}, protocolf("data for more than %d requests at once", maxTrackedIDs)
		}
		c = new([3]int64)
		d.n[id] = c
	}
	i, bound := 2, int64(MaxTarBytes)
	switch t {
	case FrameStdout:
		i, bound = 0, MaxOutputBytes
	case FrameStderr:
		i, bound = 1, MaxOutputBytes
	}
	c[i] += int64(len(payload) - 1 - idLen)
	if c[i] > bound {
		return EventFrame{}, protocolf("%v data of one request over %d bytes", t, bound)
	}
	return EventFrame{Type: t, ID: id, Data: payload[1+idLen:]}, nil
}

// Validate refuses an event whose id is invalid, whose kind is unknown or
// whose fields contradict its kind.
func (ev Event) Validate() error {
	if !ValidID(ev.ID) {
		return errors.New("invalid id")
	}
	set := 0
	for _, b := range []bool{ev.Result != nil, ev.File != nil, ev.List != nil, ev.Error != nil} {
		if b {
			set++
		}
	}
	want := 1
	if ev.Kind == EventStarted || ev.Kind == EventDone {
		want = 0
	}
	if set != want {
		return errors.New("fields do not match the kind")
	}
	switch ev.Kind {
	case EventStarted, EventDone:
	case EventResult:
		r := ev.Result
		if r == nil || r.ExitCode < 0 || r.ExitCode > wire.MaxExitCode || r.StdoutDropped < 0 || r.StderrDropped < 0 ||
			r.StartMs < 0 || r.RunMs < 0 || (r.Signal != "" && !ValidSignal(r.Signal) && !printable(r.Signal, 16)) {
			return errors.New("invalid exec result")
		}
	case EventFile:
		if ev.File == nil || ev.File.Size < 0 || ev.File.Size > MaxTarBytes || ev.File.Mode > 0o7777 || ev.File.Skipped < 0 {
			return errors.New("invalid file result")
		}
	case EventList:
		if ev.List == nil || len(ev.List.Entries) > MaxListBatch || ev.List.Truncated && !ev.List.Done {
			return errors.New("invalid list batch")
		}
		for _, e := range ev.List.Entries {
			switch {
			case e.Name == "" || len(e.Name) > MaxNameBytes || strings.ContainsAny(e.Name, "/\x00") || e.Name == "." || e.Name == "..":
				return errors.New("invalid list entry name")
			case e.Type != EntryFile && e.Type != EntryDir && e.Type != EntrySymlink && e.Type != EntryOther:
				return errors.New("invalid list entry type")
			case e.Size < 0 || e.Mode > 0o7777:
				return errors.New("invalid list entry")
			}
		}
	case EventError:
		if ev.Error == nil || !KnownErrorCode(ev.Error.Code) || !printable(ev.Error.Message, MaxErrorBytes) {
			return errors.New("invalid error event")
		}
	default:
		return errors.New("unknown kind")
	}
	return nil
}

func printable(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
