package coderun

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// jsonChunk is how many bytes of output or artifact data an answer copies
// out of a run at a time: what a client that stops reading holds.
const jsonChunk = 16 << 10

// WriteStatusJSON writes the run as json.Marshal(r.Status()) would (the
// same fields and values; the big ones last), without building it: stdout,
// stderr and artifact data are copied out of the run jsonChunk bytes at a
// time, so an answer being written holds one chunk, never a copy of the
// run nor a reference to its bytes. A run pruned meanwhile ends the answer
// with ErrNotFound.
func (r *Run) WriteStatusJSON(w io.Writer) error {
	done, err := r.read() // not pruned while being written
	if err != nil {
		return err
	}
	defer done()
	r.mu.Lock()
	head := cloneStatus(r.st, false)
	n := [2]int{len(r.out[0]), len(r.out[1])}
	sizes := make([]int, len(r.st.Artifacts))
	for i, a := range r.st.Artifacts {
		sizes[i] = len(a.Data)
	}
	r.mu.Unlock()

	arts := head.Artifacts
	head.Artifacts = nil
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	sw := &stickyWriter{w: w}
	sw.Write(b[:len(b)-1]) // without its closing brace
	buf := make([]byte, jsonChunk)
	// chunk copies the next piece of what get selects, under the run's lock.
	chunk := func(off, end int, get func() []byte) ([]byte, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.released {
			return nil, fmt.Errorf("%w (pruned while being written)", runs.ErrNotFound)
		}
		return buf[:copy(buf, get()[off:end])], nil
	}
	for i, key := range []string{"stdout", "stderr"} {
		if n[i] == 0 || sw.err != nil {
			continue
		}
		sw.Write([]byte(`,"` + key + `":"`))
		t := textWriter{w: sw}
		for off := 0; off < n[i] && sw.err == nil; off += jsonChunk {
			p, err := chunk(off, min(off+jsonChunk, n[i]), func() []byte { return r.out[i] })
			if err != nil {
				return err
			}
			t.write(p, false)
		}
		t.write(nil, true)
		sw.Write([]byte{'"'})
	}
	if len(arts) > 0 {
		sw.Write([]byte(`,"artifacts":[`))
		for i, a := range arts {
			if i > 0 {
				sw.Write([]byte{','})
			}
			b, err := json.Marshal(a) // Data left out: Summary has none
			if err != nil {
				return err
			}
			sw.Write(b[:len(b)-1])
			if sizes[i] > 0 {
				sw.Write([]byte(`,"data":"`))
				enc := base64.NewEncoder(base64.StdEncoding, sw)
				for off := 0; off < sizes[i] && sw.err == nil; off += jsonChunk {
					p, err := chunk(off, min(off+jsonChunk, sizes[i]), func() []byte { return r.st.Artifacts[i].Data })
					if err != nil {
						return err
					}
					enc.Write(p)
				}
				enc.Close()
				sw.Write([]byte{'"'})
			}
			sw.Write([]byte{'}'})
		}
		sw.Write([]byte{']'})
	}
	sw.Write([]byte{'}'})
	return sw.err
}

// WriteEventJSON writes ev (from Subscribe) as one JSON line, as
// json.Encoder.Encode would; a result event carries the whole finished run
// (WriteStatusJSON), not the Summary Subscribe handed out.
func (r *Run) WriteEventJSON(w io.Writer, ev runs.Event) error {
	if ev.Type != runs.EventResult {
		return json.NewEncoder(w).Encode(ev)
	}
	ev.Status = nil
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	sw := &stickyWriter{w: w}
	sw.Write(b[:len(b)-1])
	sw.Write([]byte(`,"status":`))
	if sw.err != nil {
		return sw.err
	}
	if err := r.WriteStatusJSON(sw); err != nil {
		return err
	}
	sw.Write([]byte("}\n"))
	return sw.err
}

// stickyWriter keeps the first write error and writes nothing after it.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// textWriter writes raw output, piece by piece, as the inside of the JSON
// string json.Marshal(strings.ToValidUTF8(raw, "\uFFFD")) makes: each run of
// invalid bytes becomes one U+FFFD (across pieces too), a rune split between
// pieces is carried to the next, and each valid piece is escaped as
// encoding/json escapes it (escaping is per rune, so pieces cut between
// runes escape as the whole does).
type textWriter struct {
	w       io.Writer
	carry   []byte // the start of a rune the next piece completes
	invalid bool   // the last byte was in a run of invalid ones
	valid   []byte
}

func (t *textWriter) write(p []byte, final bool) {
	data := p
	if len(t.carry) > 0 {
		data = append(t.carry, p...)
		t.carry = nil
	}
	t.valid = t.valid[:0]
	for i := 0; i < len(data); {
		if !final && len(data)-i < utf8.UTFMax && !utf8.FullRune(data[i:]) {
			t.carry = append([]byte(nil), data[i:]...)
			break
		}
		c, size := utf8.DecodeRune(data[i:])
		if c == utf8.RuneError && size == 1 {
			if !t.invalid {
				t.invalid = true
				t.valid = append(t.valid, "\uFFFD"...)
			}
			i++
			continue
		}
		t.invalid = false
		t.valid = append(t.valid, data[i:i+size]...)
		i += size
	}
	if len(t.valid) == 0 {
		return
	}
	b, _ := json.Marshal(string(t.valid)) // a string always marshals
	t.w.Write(b[1 : len(b)-1])            // inside its quotes
}
