package richproto

import (
	"encoding/json"
	"errors"
	"io"
)

// Bounds of one encoded value of a reply packet, as DecodeResult reads it:
// a file's JSON (its base64 data, its name and type escaped at worst, the
// framing) and any other field's (the text, every character escaped at
// its longest). A packet json.Marshal wrote is far within them.
const (
	maxFileJSON  = (MaxReplyFileBytes+2)/3*4 + 6*(MaxAttachmentName+MaxAttachmentType) + 1<<10
	maxFieldJSON = 12*MaxTextChars + 1<<10
)

// DecodeResult reads one reply packet from r as a stream and validates it:
// at most MaxPacketBytes, the fields of Result exactly (a key twice, an
// unknown key or trailing data refused), each file decoded and checked as
// it comes, so a packet costs its decoded files and one file's encoded
// value, never a copy of the whole packet (DecodeStrict's ReadAll and
// decoder buffer held it twice). Errors name a category, never what the
// packet carried.
func DecodeResult(r io.Reader) (*Result, error) { return decodeResult(r, MaxPacketBytes) }

// decodeResult is DecodeResult with the packet bound max.
func decodeResult(r io.Reader, max int64) (*Result, error) {
	lr := &valueLimit{r: r, total: max, max: max}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	malformed := func(what string) error { return bad("reply packet malformed: %s", what) }
	lr.allow(maxFieldJSON)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, lr.or(err, malformed("not a JSON object"))
	}
	var res Result
	seen := map[string]bool{}
	var sum int
	for dec.More() {
		lr.allow(maxFieldJSON)
		tok, err := dec.Token()
		key, isKey := tok.(string)
		if err != nil || !isKey {
			return nil, lr.or(err, malformed("not a JSON object"))
		}
		if seen[key] {
			return nil, malformed("a key twice")
		}
		seen[key] = true
		var field any
		switch key {
		case "turnId":
			field = &res.TurnID
		case "ok":
			field = &res.OK
		case "text":
			field = &res.Text
		case "cause":
			field = &res.Cause
		case "files":
			if err := decodeFiles(dec, lr, &res, &sum); err != nil {
				return nil, err
			}
			continue
		default:
			return nil, malformed("unknown field")
		}
		if err := dec.Decode(field); err != nil {
			return nil, lr.or(err, malformed("a field of the wrong type"))
		}
	}
	lr.allow(maxFieldJSON)
	if _, err := dec.Token(); err != nil {
		return nil, lr.or(err, malformed("not a JSON object"))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, lr.or(nil, malformed("trailing data after the object"))
	}
	if err := res.Validate(); err != nil {
		return nil, err
	}
	return &res, nil
}

// decodeFiles reads the files array (or null), refusing a file past a
// bound before the next is read.
func decodeFiles(dec *json.Decoder, lr *valueLimit, res *Result, sum *int) error {
	malformed := func(what string) error { return bad("reply packet malformed: %s", what) }
	tok, err := dec.Token()
	if err != nil {
		return lr.or(err, malformed("files is not an array"))
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('[') {
		return malformed("files is not an array")
	}
	res.Files = []File{}
	for dec.More() {
		if len(res.Files) == MaxReplyFiles {
			return bad("at most %d reply files", MaxReplyFiles)
		}
		lr.allow(maxFileJSON)
		var f File
		if err := dec.Decode(&f); err != nil {
			return lr.or(err, malformed("a file that is not {name, type, data}"))
		}
		i := len(res.Files)
		switch {
		case !ValidFileName(f.Name):
			return bad("files[%d].name must be a plain file name of 1 to 255 bytes", i)
		case len(f.Data) > MaxReplyFileBytes:
			return bad("files[%d] is over %d bytes", i, MaxReplyFileBytes)
		case *sum+len(f.Data) > MaxReplyFilesSum:
			return bad("reply files total over %d bytes", MaxReplyFilesSum)
		}
		*sum += len(f.Data)
		res.Files = append(res.Files, f)
	}
	lr.allow(maxFieldJSON)
	if _, err := dec.Token(); err != nil {
		return lr.or(err, malformed("files is not an array"))
	}
	return nil
}

// errValueLimit and errPacketLimit: the packet, or one value of it, is
// over its bound.
var (
	errValueLimit  = errors.New("value over its bound")
	errPacketLimit = errors.New("packet over its bound")
)

// valueLimit bounds what the decoder reads: the whole packet (total), and
// since the last allow, one value's worth, so the decoder's buffer never
// holds more than about two values.
type valueLimit struct {
	r            io.Reader
	total, value int64
	max          int64 // the packet's bound, for the error
	err          error
	eof          bool
}

func (l *valueLimit) allow(n int64) { l.value = n }

func (l *valueLimit) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if l.total <= 0 {
		// One byte more tells a packet at the bound from one over it.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			l.err = errPacketLimit
			return 0, l.err
		}
		if err == io.EOF {
			l.eof = true
		} else if err != nil {
			l.err = err
		}
		return 0, err
	}
	if l.value <= 0 {
		l.err = errValueLimit
		return 0, l.err
	}
	if m := min(l.total, l.value); int64(len(p)) > m {
		p = p[:m]
	}
	n, err := l.r.Read(p)
	l.total -= int64(n)
	l.value -= int64(n)
	switch {
	case err == io.EOF:
		l.eof = true
	case err != nil:
		l.err = err
	}
	return n, err
}

// or is the error of a refused packet: the reading's own failure when
// there was one (a bound, the connection), which says more, "cut short"
// when the decoder's error decErr is the packet's early end, else refusal.
func (l *valueLimit) or(decErr, refusal error) error {
	switch {
	case l.err == nil && l.eof && (decErr == io.EOF || errors.Is(decErr, io.ErrUnexpectedEOF)):
		return bad("reply packet malformed: cut short")
	case l.err == nil:
		return refusal
	case errors.Is(l.err, errPacketLimit):
		return bad("reply packet over %d bytes", l.max)
	case errors.Is(l.err, errValueLimit):
		return bad("reply packet malformed: a value over its bound")
	}
	return &ReadError{Err: l.err}
}

// ReadError: reading the packet failed (the connection, a deadline), not
// its content.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "reply packet read failed: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }
