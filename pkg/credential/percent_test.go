package credential

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// escapeSome %XX-escapes the bytes of s that keep does not keep plain; hex
// digits upper, lower or alternating ("mixed").
func escapeSome(s string, keep func(c byte) bool, hexCase string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		digits := "0123456789ABCDEF"
		if hexCase == "lower" || hexCase == "mixed" && n%2 == 1 {
			digits = "0123456789abcdef"
		}
		n++
		b.WriteString("%" + digits[c>>4:c>>4+1] + digits[c&15:c&15+1])
	}
	return b.String()
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Escapers as echo servers run them: every byte; JavaScript's
// encodeURIComponent; Python's quote (safe "/"); only the reserved bytes.
var (
	escapeNone = func(byte) bool { return false }
	escapeJS   = func(c byte) bool { return alnum(c) || strings.IndexByte("-_.!~*'()", c) >= 0 }
	escapePy   = func(c byte) bool { return alnum(c) || strings.IndexByte("-_.~/", c) >= 0 }
)

// TestReflectedPercentEscaped: a secret with any of its bytes %XX-escaped,
// in any hex case, is found in a JSON value (the model route) and by the
// guard at any read size (the credentialed route); a run under PieceBytes
// and text that only looks escaped are not.
func TestReflectedPercentEscaped(t *testing.T) {
	s := NewSecret(secretValue) // "sk-test-REAL/secret+value=42?&x": reserved bytes inside
	for _, c := range []struct {
		name string
		text string
		want bool
	}{
		{"every byte, upper hex", escapeSome(secretValue, escapeNone, "upper"), true},
		{"every byte, lower hex", escapeSome(secretValue, escapeNone, "lower"), true},
		{"every byte, mixed hex", escapeSome(secretValue, escapeNone, "mixed"), true},
		{"encodeURIComponent", escapeSome(secretValue, escapeJS, "upper"), true},
		{"Python quote", escapeSome(secretValue, escapePy, "lower"), true},
		{"a piece of 16, every byte", "x" + escapeSome(secretValue[5:5+PieceBytes], escapeNone, "mixed") + "y", true},
		{"reversed, every byte", escapeSome(rev(secretValue), escapeNone, "lower"), true},
		{"a piece of 15, every byte", "x" + escapeSome(secretValue[5:5+PieceBytes-1], escapeNone, "upper") + "y", false},
		{"percent signs of prose", "100% sure: %zz %4 %%41%", false},
	} {
		doc, _ := json.Marshal(map[string]string{"echo": "Authorization: Bearer " + c.text})
		if got := Reflected(decodeDoc(t, string(doc)), s); got != c.want {
			t.Errorf("%s: Reflected %v, want %v (%s)", c.name, got, c.want, c.text)
		}
		m := NewMatcher(s)
		for _, one := range []bool{false, true} {
			var src io.Reader = strings.NewReader(strings.Repeat("padding ", 100) + c.text + " tail")
			if one {
				src = iotest.OneByteReader(src)
			}
			_, err := io.ReadAll(m.Guard(src))
			if got := errors.Is(err, ErrReflected); got != c.want {
				t.Errorf("%s (one byte a read %v): guard err %v, want reflected %v", c.name, one, err, c.want)
			}
		}
	}
}

// FuzzGuardPercentEscaped: a secret with any choice of its bytes escaped
// (always '%', as every escaper does), in either hex case, between any two
// texts, read in any chunk size, is found by the guard.
func FuzzGuardPercentEscaped(f *testing.F) {
	f.Add("padding before ", " after", secretValue, uint64(0), false, uint8(0))
	f.Add("", "", secretValue, ^uint64(0), true, uint8(7))
	f.Add("x%", "%4", "glpat-0123456789abcdef", uint64(0xAAAA), false, uint8(2))
	f.Add("Authorization: Bearer ", "\r\n", "s", uint64(1), true, uint8(1))
	f.Fuzz(func(t *testing.T, before, after, secret string, mask uint64, upper bool, chunk uint8) {
		if len(normalize(nil, secret)) == 0 || len(secret) > 256 {
			return // nothing left to find after normalising, or past the test's interest
		}
		digits := "0123456789abcdef"
		if upper {
			digits = "0123456789ABCDEF"
		}
		var esc strings.Builder
		for i := 0; i < len(secret); i++ {
			c := secret[i]
			if c != '%' && mask&(1<<(i%64)) == 0 {
				esc.WriteByte(c)
				continue
			}
			esc.WriteString("%" + digits[c>>4:c>>4+1] + digits[c&15:c&15+1])
		}
		// '<' and '>' are not hex digits: the texts around cannot take the
		// escaped secret's first bytes into an escape of their own.
		body := before + "<" + esc.String() + ">" + after
		src := iotest.HalfReader(strings.NewReader(body))
		if chunk > 0 {
			src = &chunkReader{r: strings.NewReader(body), n: int(chunk)}
		}
		if _, err := io.ReadAll(NewMatcher(NewSecret(secret)).Guard(src)); !errors.Is(err, ErrReflected) {
			t.Fatalf("secret %q escaped as %q not found: %v", secret, esc.String(), err)
		}
	})
}

// chunkReader reads at most n bytes at a time.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }
