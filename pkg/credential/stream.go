package credential

// Stream finds a secret in one text that arrives in pieces (a streamed
// answer's text deltas): each piece is checked with the end of the text
// before it, so a secret split across pieces is found as if the text had
// come whole. It keeps only that end (the longest normalised form of any
// secret, less one character), never the whole text. Matching is Reflected's
// (normalised text, every Form, reversed, any PieceBytes run).
type Stream struct {
	m       *matcher
	tail    []byte
	keep    int
	buf     []byte
	decoded []byte // the percent-decoded view of buf, reused
}

// NewStream returns a Stream for secrets (none: it never reports).
func NewStream(secrets ...Secret) *Stream { return newStream(newMatcher(secrets)) }

// Stream returns a Stream over m's secrets, sharing m's prepared forms.
func (m *Matcher) Stream() *Stream { return newStream(m.m) }

func newStream(m *matcher) *Stream {
	keep := 0
	for _, p := range m.pats {
		keep = max(keep, len(p.form))
	}
	for _, p := range m.short {
		keep = max(keep, len(p.form))
	}
	return &Stream{m: m, keep: max(keep-1, 0)}
}

// Reflects appends piece to the text and reports whether the text, so far,
// reflects a secret.
func (s *Stream) Reflects(piece string) bool { return reflectsPiece(s, piece) }

// reflectsBytes is Reflects without copying piece into a string.
func (s *Stream) reflectsBytes(piece []byte) bool { return reflectsPiece(s, piece) }

func reflectsPiece[T string | []byte](s *Stream, piece T) bool {
	if s.m.empty() {
		return false
	}
	s.buf = normalize(append(s.buf[:0], s.tail...), piece)
	var found bool
	if found, s.decoded = s.m.reflects(s.buf, s.decoded); found {
		return true
	}
	if len(s.buf) > s.keep {
		s.tail = append(s.tail[:0], s.buf[len(s.buf)-s.keep:]...)
	} else {
		s.tail = append(s.tail[:0], s.buf...)
	}
	return false
}

// Matcher is Reflected with its secrets' forms prepared once, for checking
// many values (a stream's events) against the same secrets.
type Matcher struct{ m *matcher }

// NewMatcher prepares secrets for Reflected.
func NewMatcher(secrets ...Secret) *Matcher { return &Matcher{newMatcher(secrets)} }

// Reflected is the package's Reflected with m's secrets.
func (m *Matcher) Reflected(v any) bool {
	if m.m.empty() {
		return false
	}
	text, tooDeep := appendText(nil, v, 0)
	if tooDeep {
		return true
	}
	found, _ := m.m.reflects(text, nil)
	return found
}
