package credential

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
)

// ErrReflected: an answer reflects a secret; it was cut where found.
var ErrReflected = errors.New("credential: the answer reflects a credential")

// HeaderReflects reports whether a header block (names and values, in any
// order) reflects a secret, by Reflected's rules. Every field is
// normalised once into one text: a form inside a field is inside the text,
// and one split across fields is found too in the order the map gives.
// Its percent-decoded views are each field decoded on its own (an escape
// never runs into the next field) and the text decoded whole. One pass in
// the common case (no '%'): an intercepted request's headers and a small
// answer with its body are read once (issue 37's per-request cost).
func (m *Matcher) HeaderReflects(h http.Header) bool {
	if m.m.empty() {
		return false
	}
	sc := headerScratch.Get().(*headerText)
	defer headerScratch.Put(sc)
	text, ends := sc.text[:0], sc.ends[:0]
	defer func() { sc.text, sc.ends = shrink(text), shrink(ends) }()
	for k, vs := range h {
		text = normalize(text, k)
		ends = append(ends, len(text))
		for _, v := range vs {
			text = normalize(text, v)
			ends = append(ends, len(text))
		}
	}
	if m.m.match(text) {
		return true
	}
	if bytes.IndexByte(text, '%') < 0 {
		return false
	}
	dec := sc.dec[:0]
	defer func() { sc.dec = shrink(dec) }()
	start := 0
	for _, end := range ends {
		dec = percentDecode(dec, text[start:end])
		start = end
	}
	if m.m.match(dec) {
		return true
	}
	dec = percentDecode(dec[:0], text)
	return m.m.match(dec)
}

// TextReflects is HeaderReflects of a block of one field, text, under
// the empty name (what normalises to nothing): one value checked on its
// own, as an intercepted request's declared header is, without the
// block's pooled scratch and map walk (issue 37's per-request cost; twice
// a request). A text up to textOnStack bytes is normalised on the stack.
func (m *Matcher) TextReflects(text string) bool {
	if m.m.empty() {
		return false
	}
	var norm, dec [textOnStack]byte
	t := normalize(norm[:0], text)
	if m.m.match(t) {
		return true
	}
	if bytes.IndexByte(t, '%') < 0 {
		return false
	}
	// One field: its own decoded view and the whole text's are the same.
	return m.m.match(percentDecode(dec[:0], t))
}

// textOnStack is how long a text TextReflects reads without allocating
// (a header value's scheme and the like; longer ones still work).
const textOnStack = 256

// headerText is HeaderReflects' scratch, reused across calls (one per
// intercepted request's header pass; issue 37's per-request cost). It
// never leaves HeaderReflects, and holds no more than the garbage slices
// it replaces would until the collector reused them.
type headerText struct {
	text, dec []byte
	ends      []int
}

var headerScratch = sync.Pool{New: func() any { return new(headerText) }}

// shrink keeps a scratch slice for reuse unless it grew past what a
// header block needs (a small answer's body rides in it too).
func shrink[T any](s []T) []T {
	if cap(s) > 64<<10 {
		return nil
	}
	return s[:0]
}

// Guard returns a reader of src that fails with ErrReflected, and hands
// out nothing more, as soon as the text read so far reflects a secret
// (Stream's matching: any form, reversed, any PieceBytes run, split across
// reads). It holds back the last bytes read until enough text follows
// them that no reflection can start in what it hands out, so no run of a
// secret that counts ever leaves; at the end of src it hands out the rest.
func (m *Matcher) Guard(src io.Reader) io.Reader {
	s := m.Stream()
	return &guard{src: src, s: s, keep: s.keep, buf: make([]byte, 32<<10)}
}

type guard struct {
	src  io.Reader
	s    *Stream
	keep int    // normalised characters held back
	pend []byte // read and checked; pend[off:rel] may be handed out, pend[rel:] is held
	off  int
	rel  int
	buf  []byte
	err  error
}

func (g *guard) Read(p []byte) (int, error) {
	for g.off == g.rel {
		if g.err != nil {
			return 0, g.err
		}
		// Drained: move what is held to the front, reusing the buffer.
		g.pend = g.pend[:copy(g.pend, g.pend[g.off:])]
		g.off, g.rel = 0, 0
		n, err := g.src.Read(g.buf)
		if n > 0 {
			if g.s.reflectsBytes(g.buf[:n]) {
				g.pend, g.off, g.rel, g.err = nil, 0, 0, ErrReflected
				return 0, g.err
			}
			g.pend = append(g.pend, g.buf[:n]...)
		}
		if err != nil {
			g.err = err
			g.rel = len(g.pend) // the text is whole and clean
			if g.rel == 0 {
				return 0, err
			}
			break
		}
		g.rel = releasable(g.pend, g.keep)
	}
	n := copy(p, g.pend[g.off:g.rel])
	g.off += n
	return n, nil
}

// releasable is the largest r such that pend[r:] holds at least keep
// normalised (non-whitespace) bytes: pend[:r] can hold no start of a
// reflection found later.
func releasable(pend []byte, keep int) int {
	if keep == 0 {
		return len(pend)
	}
	seen := 0
	for i := len(pend) - 1; i >= 0; i-- {
		if c := pend[i]; !(c == ' ' || ('\t' <= c && c <= '\r')) {
			seen++
		}
		if seen >= keep {
			return i
		}
	}
	return 0
}
