package anthropic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// MaxEventBytes bounds one server-sent event's data (a delta is small; a
// message_start carries no content).
const MaxEventBytes = 8 << 20

// StreamReader reads server-sent events: "event:" and "data:" fields (data
// lines joined by "\n"), comments and id/retry fields ignored, an event
// dispatched at a blank line, lines ended by "\n" or "\r\n". An event's data
// over MaxEventBytes is an error, so memory stays bounded whatever the peer
// sends.
type StreamReader struct {
	r    *bufio.Reader
	name []byte
	data []byte
}

// NewStreamReader reads events from r.
func NewStreamReader(r io.Reader) *StreamReader {
	return &StreamReader{r: bufio.NewReaderSize(r, 64<<10)}
}

var errEventTooLarge = &refusal{"event over the limit", ErrStream}

// NextRaw returns the next event's name and data, valid until the next
// call. It returns io.EOF at a clean end (no partial event pending) and
// io.ErrUnexpectedEOF when the stream ends inside an event.
func (s *StreamReader) NextRaw() (name string, data []byte, err error) {
	s.name, s.data = s.name[:0], s.data[:0]
	hasData, pending := false, false
	for {
		line, err := s.line()
		if err != nil {
			if err == io.EOF && pending {
				return "", nil, io.ErrUnexpectedEOF
			}
			return "", nil, err
		}
		if len(line) == 0 {
			if hasData {
				return string(s.name), s.data, nil
			}
			s.name, pending = s.name[:0], false // an event without data is not dispatched
			continue
		}
		pending = true
		if line[0] == ':' {
			continue // comment
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		switch string(field) {
		case "event":
			if len(value) > 64 {
				return "", nil, errEventTooLarge
			}
			s.name = append(s.name[:0], value...)
		case "data":
			if hasData {
				s.data = append(s.data, '\n')
			}
			if len(s.data)+len(value) > MaxEventBytes {
				return "", nil, errEventTooLarge
			}
			s.data = append(s.data, value...)
			hasData = true
		}
	}
}

// line returns one line without its end, bounded by MaxEventBytes.
func (s *StreamReader) line() ([]byte, error) {
	var long []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if err == nil {
			if long != nil {
				frag = append(long, frag...)
			}
			frag = frag[:len(frag)-1]
			return bytes.TrimSuffix(frag, []byte("\r")), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err == io.EOF && (len(frag) > 0 || long != nil) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(long)+len(frag) > MaxEventBytes+64 {
			return nil, errEventTooLarge
		}
		long = append(long, frag...)
	}
}

// Next returns the next event decoded. An error event comes back as an
// event of Type "error" (not as an error): the caller decides.
func (s *StreamReader) Next() (StreamEvent, error) {
	_, data, err := s.NextRaw()
	if err != nil {
		return StreamEvent{}, err
	}
	var ev StreamEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return StreamEvent{}, &refusal{"event data is not JSON", ErrStream}
	}
	return ev, nil
}
