// Package strictjson decodes guest JSON under the broker's rules: exactly one
// JSON value, no trailing data, no duplicate object keys at any depth, a
// bounded nesting depth, numbers kept as their literal text, and text that is
// valid Unicode: invalid UTF-8 and unpaired UTF-16 surrogate escapes (which
// encoding/json would silently replace with U+FFFD) are refused, never
// repaired, so what a guest sent is exactly what was checked. A value it
// returns is what every later check and the rebuilt upstream body see, so a
// duplicate key can never show one value to a check and another upstream.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"
)

// MaxDepth bounds nesting of objects and arrays.
const MaxDepth = 64

// ErrInvalid is the category of every refusal. Messages never quote input.
var ErrInvalid = errors.New("invalid JSON")

type wrapped struct{ msg string }

func (w wrapped) Error() string { return "strictjson: " + w.msg }
func (w wrapped) Unwrap() error { return ErrInvalid }

func fail(msg string) error { return wrapped{msg} }

// Decode parses exactly one JSON value. Objects become map[string]any,
// arrays []any, numbers json.Number.
func Decode(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, fail("invalid UTF-8")
	}
	if UnpairedSurrogate(data) {
		return nil, fail("unpaired surrogate escape")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := value(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail("trailing data after the JSON value")
	}
	return v, nil
}

// DecodeObject is Decode for input that must be one JSON object.
func DecodeObject(data []byte) (map[string]any, error) {
	// Refuse arrays and scalars before any work, so a batch is never parsed.
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fail("not a JSON object")
	}
	v, err := Decode(data)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fail("not a JSON object")
	}
	return m, nil
}

func value(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fail("malformed JSON")
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return nil, fail("nesting too deep")
		}
		switch t {
		case '{':
			m := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fail("malformed JSON")
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fail("malformed JSON")
				}
				if _, dup := m[k]; dup {
					return nil, fail("duplicate object key")
				}
				v, err := value(dec, depth+1)
				if err != nil {
					return nil, err
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, fail("malformed JSON")
			}
			return m, nil
		case '[':
			a := []any{}
			for dec.More() {
				v, err := value(dec, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fail("malformed JSON")
			}
			return a, nil
		}
		return nil, fail("malformed JSON")
	default:
		return t, nil // string, json.Number, bool, nil
	}
}

// UnpairedSurrogate reports whether a string of data holds a \uD800-\uDFFF
// escape that is not a high surrogate directly followed by a low one. It
// only scans; malformed input is left to the decoder.
func UnpairedSurrogate(data []byte) bool {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 >= len(data) {
				return false
			}
			if data[i+1] != 'u' {
				i++ // skip the escaped character, which may be a quote
				continue
			}
			r, ok := hex4(data, i+2)
			if !ok {
				return false
			}
			i += 5
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return true
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(data) || data[i+1] != '\\' || data[i+2] != 'u' {
					return true
				}
				lo, ok := hex4(data, i+3)
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 6
			}
		}
	}
	return false
}

// hex4 reads four hex digits at data[at:].
func hex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
