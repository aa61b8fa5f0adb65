package credential

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// PieceBytes is the shortest run of a secret that counts as reflected when it
// is not the whole secret: an answer holding any PieceBytes consecutive
// bytes of a secret (in any form Reflected knows, measured in that form's
// characters) is refused, so a secret split into pieces is caught when one
// piece is this long. A secret shorter than PieceBytes counts only whole.
// There is no minimum secret length: every non-empty secret is checked.
const PieceBytes = 16

// Forms returns the encodings of a secret that Reflected looks for: raw,
// URL query and path escaped, every byte percent-escaped, base64 standard
// and URL alphabets with and without padding, hex in lower and upper case,
// and the base64 runs of the secret at the two other byte alignments (a
// secret embedded in a longer base64 text). Duplicates are removed. (The
// matcher also reads a text percent-decoded, so any other mix of escaped
// and plain bytes is found too; the every-byte form sets how much text a
// stream keeps for it.)
func Forms(s Secret) []string {
	v := s.v
	if v == "" {
		return nil
	}
	b := []byte(v)
	forms := []string{
		v,
		url.QueryEscape(v),
		url.PathEscape(v),
		percentAll(v),
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b),
		strings.ToUpper(hex.EncodeToString(b)),
	}
	// Unaligned base64: encode k filler bytes plus the secret and keep only
	// the characters fully determined by the secret's bits.
	if len(b) >= 6 {
		for k := 1; k <= 2; k++ {
			padded := append(make([]byte, k), b...)
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				e := enc.EncodeToString(padded)
				first := (8*k + 5) / 6
				last := (8 * (k + len(b))) / 6
				if last > len(e) {
					last = len(e)
				}
				if first < last {
					forms = append(forms, e[first:last])
				}
			}
		}
	}
	seen := make(map[string]bool, len(forms))
	out := forms[:0]
	for _, f := range forms {
		if f != "" && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// percentAll escapes every byte of s as %XX (upper-case hex; the matcher
// folds case).
func percentAll(s string) string {
	const digits = "0123456789ABCDEF"
	b := make([]byte, 0, 3*len(s))
	for i := 0; i < len(s); i++ {
		b = append(b, '%', digits[s[i]>>4], digits[s[i]&15])
	}
	return string(b)
}

// Reflected reports whether the decoded JSON value v (what json.Unmarshal
// produces into an any, with or without UseNumber) reflects any of the
// secrets. It joins every object key, string and number literal in the
// order json.Marshal writes them (object keys sorted) into one text,
// lower-cases its ASCII letters and deletes its ASCII whitespace; the
// Forms of each secret and of the secret reversed are normalised the same
// way. The answer reflects a secret when the text, as it is or
// percent-decoded once, holds a whole form or, for a secret of at least
// PieceBytes bytes, any run of a form that encodes PieceBytes bytes of it.
// So a secret is found upper-cased, reversed, split across adjacent
// strings or with one piece of PieceBytes anywhere, with any of its bytes
// %XX-escaped (in any hex case), and in base64 or hex wrapped or spaced by
// whitespace. Detection is defence in
// depth for trusted upstreams, not a guarantee against every encoding (see
// docs/threat-model.md, Credential reflection, for what is not detected).
func Reflected(v any, secrets ...Secret) bool {
	m := newMatcher(secrets)
	if m.empty() {
		return false
	}
	text, tooDeep := appendText(nil, v, 0)
	if tooDeep {
		return true
	}
	found, _ := m.reflects(text, nil)
	return found
}

// normalize lower-cases ASCII letters and drops ASCII whitespace. It maps
// each byte on its own, so a form inside a text stays inside the
// normalised text.
func normalize[T string | []byte](dst []byte, s T) []byte {
	dst = slices.Grow(dst, len(s))
	n := len(dst)
	dst = dst[:n+len(s)]
	i := 0
	// Eight bytes at a time while a word holds no whitespace: its
	// capitals lower-cased at once, the word written whole (the guard's
	// hot loop: every byte of an intercepted answer passes here, issue
	// 37's 1 MiB cost). Each byte is tested in its own lane: its low
	// seven bits plus a bias stay below 0x100, so no carry crosses into
	// the next byte; a byte with its top bit set (not ASCII) is never a
	// capital or whitespace.
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	for ; i+8 <= len(s); i += 8 {
		w := load64(s[i : i+8])
		a := w &^ high                                          // each byte's low seven bits
		ascii := ^w & high                                      // top bit set where the byte is ASCII
		ctl := (a + ones*(0x80-0x09)) &^ (a + ones*(0x80-0x0e)) // top bit: \t \n \v \f \r
		sp := ^((a ^ ones*0x20) + ones*0x7f)                    // top bit: ' '
		if (ctl|sp)&ascii == 0 {
			upper := (a + ones*(0x80-'A')) &^ (a + ones*(0x80-'Z'-1)) & ascii
			binary.LittleEndian.PutUint64(dst[n:], w|upper>>2) // 0x80>>2 is 0x20, the case bit
			n += 8
			continue
		}
		// Branch-free: every byte is written, whitespace is then
		// overwritten (n does not advance past it).
		for j := i; j < i+8; j++ {
			c := s[j]
			dst[n] = lowerTab[c]
			n += int(keepTab[c])
		}
	}
	for ; i < len(s); i++ {
		c := s[i]
		dst[n] = lowerTab[c]
		n += int(keepTab[c])
	}
	return dst[:n]
}

// load64 is eight bytes as a little-endian word.
func load64[T string | []byte](b T) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// lowerTab lower-cases an ASCII letter; keepTab is 0 for ASCII whitespace
// (space, \t \n \v \f \r), which normalize drops, and 1 otherwise.
var lowerTab, keepTab = func() (l, k [256]byte) {
	for i := range 256 {
		c := byte(i)
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		l[i], k[i] = c, 1
		if c == ' ' || ('\t' <= c && c <= '\r') {
			k[i] = 0
		}
	}
	return l, k
}()

// appendText appends v's normalised text in json.Marshal order. It reports
// true for nesting deeper than encoding/json accepts (refused as reflecting:
// such a value was not decoded by encoding/json).
func appendText(dst []byte, v any, depth int) ([]byte, bool) {
	if depth > 10_000 {
		return dst, true
	}
	switch x := v.(type) {
	case string:
		dst = normalize(dst, x)
	case json.Number:
		dst = normalize(dst, string(x))
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dst = normalize(dst, k)
			var deep bool
			if dst, deep = appendText(dst, x[k], depth+1); deep {
				return dst, true
			}
		}
	case []any:
		for _, e := range x {
			var deep bool
			if dst, deep = appendText(dst, e, depth+1); deep {
				return dst, true
			}
		}
	}
	return dst, false
}

// seedLen is the length of the windows the matcher indexes.
const seedLen = 8

// pattern is one normalised form and the shortest run of it that counts.
type pattern struct {
	form string
	min  int
}

// seed is one indexed window of a pattern; next chains the seeds of the
// same window (-1 ends), so indexing every window allocates one slice
// rather than one per window.
type seed struct{ pat, off, next int32 }

// matcher finds, in one pass over a text, any run of at least min
// characters of any pattern. Each pattern of seedLen or more characters
// contributes every one of its seedLen-windows, and the text is read only
// at positions that are multiples of stride, the least min-seedLen+1 of
// the patterns: a run of min characters spans min-seedLen+1 consecutive
// window starts, one of which is such a position, and its window is
// indexed whatever the run's offset in the pattern. A window found in the
// text is extended both ways to the longest common run. bloom filters the
// windows before the map lookup. (Indexing every window and striding over
// the text, rather than the reverse, reads a 16-byte piece's text at a
// ninth of the positions: issue 37's guard throughput.)
type matcher struct {
	short  []pattern // under seedLen characters: whole match only
	pats   []pattern
	heads  map[uint64]int32 // a window's first seed in list, plus one
	list   []seed
	stride int
	bloom  [1 << 10]uint64
}

func windowHash(w uint64) uint32 { return uint32((w * 0x9E3779B97F4A7C15) >> 48) }

func newMatcher(secrets []Secret) *matcher {
	m := &matcher{heads: map[uint64]int32{}}
	seen := map[string]bool{"": true}
	for _, s := range secrets {
		if s.v == "" {
			continue
		}
		for _, variant := range []Secret{s, {v: reverse(s.v)}} {
			for _, f := range Forms(variant) {
				n := string(normalize(nil, f))
				if seen[n] {
					continue
				}
				seen[n] = true
				min := len(n)
				if len(s.v) >= PieceBytes {
					// The characters of this form that encode PieceBytes bytes.
					if p := (PieceBytes*len(n) + len(s.v) - 1) / len(s.v); p < min {
						min = p
					}
				}
				m.add(pattern{form: n, min: max(min, 1)})
			}
		}
	}
	return m
}

func (m *matcher) add(p pattern) {
	if p.min < seedLen {
		// A run shorter than a window: look for the whole form (its
		// runs are only used when the form is long enough to index).
		m.short = append(m.short, pattern{form: p.form, min: len(p.form)})
		if len(p.form) < seedLen {
			return
		}
		p.min = seedLen
	}
	idx := int32(len(m.pats))
	m.pats = append(m.pats, p)
	if step := p.min - seedLen + 1; m.stride == 0 || step < m.stride {
		m.stride = step
	}
	for off := 0; off+seedLen <= len(p.form); off++ {
		w := binary.LittleEndian.Uint64([]byte(p.form[off : off+seedLen]))
		h := windowHash(w)
		m.bloom[h>>6] |= 1 << (h & 63)
		m.list = append(m.list, seed{pat: idx, off: int32(off), next: m.heads[w] - 1})
		m.heads[w] = int32(len(m.list))
	}
}

func (m *matcher) empty() bool { return len(m.short) == 0 && len(m.pats) == 0 }

// reflects reports whether the normalised text holds a counted run of a
// form, as it is or percent-decoded once (every byte escaped, or only
// those an escaper chose: JavaScript's, Python's and PHP's escapers keep
// different bytes plain). scratch is reused for the decoded view and
// returned; a text without '%' costs one byte scan more.
func (m *matcher) reflects(text, scratch []byte) (bool, []byte) {
	if m.match(text) {
		return true, scratch
	}
	if bytes.IndexByte(text, '%') < 0 {
		return false, scratch
	}
	scratch = percentDecode(scratch[:0], text)
	return m.match(scratch), scratch
}

// percentDecode appends text with each %XX replaced by its byte,
// normalised as normalize does; a '%' without two hex digits stays. text is
// normalised, so its hex digits are lower case.
func percentDecode(dst, text []byte) []byte {
	dst = slices.Grow(dst, len(text))
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c == '%' && i+2 < len(text) {
			if hi, lo := unhex(text[i+1]), unhex(text[i+2]); hi < 16 && lo < 16 {
				c = hi<<4 | lo
				i += 2
				switch {
				case c == ' ' || ('\t' <= c && c <= '\r'):
					continue
				case 'A' <= c && c <= 'Z':
					c += 'a' - 'A'
				}
			}
		}
		dst = append(dst, c)
	}
	return dst
}

// unhex is a lower-case hex digit's value, or 16.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 16
}

func (m *matcher) match(text []byte) bool {
	for _, p := range m.short {
		if bytes.Contains(text, []byte(p.form)) {
			return true
		}
	}
	if len(m.pats) == 0 {
		return false
	}
	for i := 0; i+seedLen <= len(text); i += m.stride {
		w := binary.LittleEndian.Uint64(text[i:])
		h := windowHash(w)
		if m.bloom[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		for j := m.heads[w] - 1; j >= 0; j = m.list[j].next {
			sd := m.list[j]
			p := m.pats[sd.pat]
			off := int(sd.off)
			back := 0
			for back < off && back < i && text[i-back-1] == p.form[off-back-1] {
				back++
			}
			fwd := seedLen
			for off+fwd < len(p.form) && i+fwd < len(text) && text[i+fwd] == p.form[off+fwd] {
				fwd++
			}
			if back+fwd >= p.min {
				return true
			}
		}
	}
	return false
}

// reverse reverses s by runes when it is valid UTF-8, by bytes otherwise.
func reverse(s string) string {
	if !utf8.ValidString(s) {
		b := []byte(s)
		slices.Reverse(b)
		return string(b)
	}
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}
