package credential

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

// wrap inserts sep every n characters, as MIME base64 does at 76 columns.
func wrap(s string, n int, sep string) string {
	var b strings.Builder
	for i := 0; i < len(s); i += n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s[i:min(i+n, len(s))])
	}
	return b.String()
}

func rev(s string) string { return reverse(s) }

func decodeDoc(t *testing.T, doc string) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return v
}

// The transformations an upstream was seen to answer 200 with before
// normalisation, and their neighbours: each must be refused.
func TestReflectedTransformed(t *testing.T) {
	s := NewSecret(secretValue) // 31 bytes: pieces of 16 count
	half1, half2 := secretValue[:15], secretValue[15:]
	long := strings.Repeat("lorem ipsum ", 9) // pushes the secret across a 76-column break
	b64 := func(p string) string { return base64.StdEncoding.EncodeToString([]byte(p + secretValue + " tail")) }
	cases := map[string]string{
		"split across two strings in an array":   `{"a":[` + mustJSON(half1) + `,` + mustJSON(half2) + `]}`,
		"split across two members":               `{"a":` + mustJSON(half1) + `,"b":` + mustJSON(half2) + `}`,
		"split, second half first":               `{"a":` + mustJSON(half2) + `,"b":` + mustJSON(half1) + `}`,
		"split across MCP content items":         `{"content":[{"type":"text","text":` + mustJSON("x "+half1) + `},{"type":"text","text":` + mustJSON(half2+" y") + `}]}`,
		"split across a key and its value":       `{` + mustJSON(half1) + `:` + mustJSON(half2) + `}`,
		"upper-cased":                            `{"a":` + mustJSON("key: "+strings.ToUpper(secretValue)) + `}`,
		"lower-cased":                            `{"a":` + mustJSON(strings.ToLower(secretValue)) + `}`,
		"reversed":                               `{"a":` + mustJSON("x"+rev(secretValue)+"y") + `}`,
		"reversed and upper-cased":               `{"a":` + mustJSON(strings.ToUpper(rev(secretValue))) + `}`,
		"base64 wrapped at 76, LF":               `{"a":` + mustJSON(wrap(b64(long), 76, "\n")) + `}`,
		"base64 wrapped at 76, CRLF, offset 1":   `{"a":` + mustJSON(wrap(b64(long+"x"), 76, "\r\n")) + `}`,
		"base64 wrapped at 76, offset 2":         `{"a":` + mustJSON(wrap(b64(long+"xy"), 76, "\n")) + `}`,
		"base64 wrapped at 4":                    `{"a":` + mustJSON(wrap(b64(""), 4, " ")) + `}`,
		"base64 upper-cased":                     `{"a":` + mustJSON(strings.ToUpper(b64(""))) + `}`,
		"base64 of the reversed secret":          `{"a":` + mustJSON(base64.StdEncoding.EncodeToString([]byte(rev(secretValue)))) + `}`,
		"base64 split across strings":            `{"a":[` + mustJSON(b64("")[:20]) + `,` + mustJSON(b64("")[20:]) + `]}`,
		"hex spaced":                             `{"a":` + mustJSON(wrap(hex.EncodeToString([]byte(secretValue)), 2, " ")) + `}`,
		"hex upper, wrapped":                     `{"a":` + mustJSON(wrap(strings.ToUpper(hex.EncodeToString([]byte(secretValue))), 16, "\n")) + `}`,
		"one piece of 16 bytes, rest elsewhere":  `{"a":` + mustJSON("see "+secretValue[:16]+" and") + `}`,
		"one piece of 16 bytes in the middle":    `{"a":` + mustJSON(secretValue[8:24]) + `}`,
		"spaces inside the raw secret":           `{"a":` + mustJSON(wrap(secretValue, 5, " ")) + `}`,
		"secret inside a number and string pair": `{"a":[` + mustJSON(half1) + `,` + mustJSON(half2) + `,1]}`,
	}
	for name, doc := range cases {
		if !Reflected(decodeDoc(t, doc), s) {
			t.Errorf("%s: not detected in %s", name, doc)
		}
	}
}

// What is not refused, by design: pieces under PieceBytes of a long secret,
// pieces of a secret under PieceBytes, transformations outside the list.
func TestReflectedNotDetected(t *testing.T) {
	s := NewSecret(secretValue)
	short := NewSecret("abcdefgh1234") // 12 bytes: whole only
	for name, c := range map[string]struct {
		doc    string
		secret Secret
	}{
		"15-byte piece":              {`{"a":` + mustJSON(secretValue[:15]) + `}`, s},
		"two 15-byte pieces apart":   {`{"a":` + mustJSON(secretValue[:15]) + `,"b":"gap","c":` + mustJSON(secretValue[15:30]) + `}`, s},
		"short secret, 11 bytes":     {`{"a":"abcdefgh123"}`, short},
		"short secret split, apart":  {`{"a":"abcdef","b":"gap","c":"gh1234"}`, short},
		"clean prose":                {`{"a":"The quick brown fox jumps over the lazy dog"}`, s},
		"prefix only":                {`{"sk-test":"REAL"}`, s},
		"every other character":      {`{"a":` + mustJSON(strings.Join(strings.Split(secretValue, ""), "_")) + `}`, s},
		"base64 of the upper-cased":  {`{"a":` + mustJSON(base64.StdEncoding.EncodeToString([]byte(strings.ToUpper(secretValue)))) + `}`, s},
		"hex separated by colons":    {`{"a":` + mustJSON(wrap(hex.EncodeToString([]byte(secretValue)), 2, ":")) + `}`, s},
		"escaped line break as text": {`{"a":` + mustJSON(wrap(secretValue, 8, `\n`)) + `}`, s},
	} {
		if Reflected(decodeDoc(t, c.doc), c.secret) {
			t.Errorf("%s: refused %s, want it passed (the documented limit moved: update docs/threat-model.md)", name, c.doc)
		}
	}
	// The short secret is still found whole, in any case, reversed, split
	// across adjacent strings.
	for _, doc := range []string{`{"a":"xABCDEFGH1234y"}`, `{"a":"4321hgfedcba"}`, `{"a":["abcdef","gh1234"]}`} {
		if !Reflected(decodeDoc(t, doc), short) {
			t.Errorf("short secret not detected in %s", doc)
		}
	}
	// Every non-empty secret is checked, even one character long.
	if !Reflected(decodeDoc(t, `{"a":"xQy"}`), NewSecret("q")) {
		t.Error("one-character secret not detected")
	}
}

// Nesting deeper than encoding/json accepts is refused, not walked.
func TestReflectedTooDeep(t *testing.T) {
	var v any = "x"
	for range 10_002 {
		v = []any{v}
	}
	if !Reflected(v, NewSecret("unrelated-secret")) {
		t.Error("over-deep value passed")
	}
}

func FuzzReflected(f *testing.F) {
	f.Add(`{"a":"hello"}`, "sk-abcdefghijklmnop")
	f.Add(`{"a":["sk-abcdefg","hijklmnop"]}`, "sk-abcdefghijklmnop")
	f.Fuzz(func(t *testing.T, doc, secret string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		got := Reflected(v, NewSecret(secret))
		// Embedding the secret anywhere must always be found (an
		// all-whitespace secret has no raw form left after normalising).
		if len(normalize(nil, secret)) > 0 && !Reflected(map[string]any{"x": v, "y": "<" + secret + ">"}, NewSecret(secret)) {
			t.Fatalf("secret %q embedded in %s not found", secret, doc)
		}
		_ = got
	})
}

// TestMatcherAgreesWithNaive: the matcher reports a text exactly when a
// naive search finds some run of min characters of some pattern in it,
// for runs placed at every offset of the text and of the form, one
// character short of min and at min (the stride's edge cases).
func TestMatcherAgreesWithNaive(t *testing.T) {
	secrets := []Secret{NewSecret("rtsbx_ph_0123456789abcdef0123456789abcdef"), NewSecret("short-tok-12"), NewSecret("Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe")}
	m := newMatcher(secrets)
	naive := func(text []byte) bool {
		for _, p := range m.short {
			if bytes.Contains(text, []byte(p.form)) {
				return true
			}
		}
		for _, p := range m.pats {
			for s := 0; s+p.min <= len(p.form); s++ {
				if bytes.Contains(text, []byte(p.form[s:s+p.min])) {
					return true
				}
			}
		}
		return false
	}
	filler := strings.Repeat("q", 40)
	n := 0
	for _, p := range append(append([]pattern(nil), m.pats...), m.short...) {
		for _, l := range []int{p.min - 1, p.min} {
			for s := 0; s+l <= len(p.form); s += 3 {
				for lead := range 11 {
					text := []byte(filler[:lead] + p.form[s:s+l] + filler[:7])
					if got, want := m.match(text), naive(text); got != want {
						t.Fatalf("%q: match %v, naive %v", text, got, want)
					}
					n++
				}
			}
		}
	}
	if n < 1000 {
		t.Fatalf("only %d cases", n)
	}
}

// normalizeBytewise is normalize one byte at a time: the reference the
// word-at-a-time loop must match.
func normalizeBytewise(s []byte) []byte {
	var out []byte
	for _, c := range s {
		if c == ' ' || ('\t' <= c && c <= '\r') {
			continue
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out = append(out, c)
	}
	return out
}

// TestNormalizeWordAtATime: every byte value in every lane of a word, next
// to capitals, whitespace and non-ASCII bytes, normalises as byte by byte.
func TestNormalizeWordAtATime(t *testing.T) {
	for _, fill := range []byte{'x', 'Q', ' ', 0x80, 0xff, '\r'} {
		for lane := range 9 {
			for c := range 256 {
				in := bytes.Repeat([]byte{fill}, 19)
				in[lane] = byte(c)
				in[lane+8] = byte(c)
				if got, want := normalize([]byte("prefix"), in), append([]byte("prefix"), normalizeBytewise(in)...); !bytes.Equal(got, want) {
					t.Fatalf("fill %#x lane %d byte %#x: got %q, want %q", fill, lane, c, got, want)
				}
				if got, want := normalize(nil, string(in)), normalizeBytewise(in); !bytes.Equal(got, want) {
					t.Fatalf("string: fill %#x lane %d byte %#x: got %q, want %q", fill, lane, c, got, want)
				}
			}
		}
	}
}

func FuzzNormalize(f *testing.F) {
	f.Add([]byte("Bearer ABCdef\t0123456789 \x80\xffZ@[`{"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if got, want := normalize(nil, in), normalizeBytewise(in); !bytes.Equal(got, want) {
			t.Fatalf("normalize(%q) = %q, want %q", in, got, want)
		}
	})
}
