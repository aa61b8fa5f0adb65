package worker

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// TruncationMarker ends every text the worker shortened for context size.
const TruncationMarker = "\n[Truncated for context size; retrieve specific memory entries with memory_get.]"

// marshal encodes v as compact JSON without HTML escaping: the encoding the
// worker sends and the byte count of every budget.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// runeJSONLen is how many bytes encoding/json (HTML escaping off) spends on
// the rune r that took size bytes in the source string.
func runeJSONLen(r rune, size int) int {
	if r < utf8.RuneSelf {
		switch {
		case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
			return 2
		case r < 0x20:
			return 6 // \u00XX
		default:
			return 1
		}
	}
	if r == utf8.RuneError && size == 1 {
		return 6 // invalid byte becomes \ufffd
	}
	if r == '\u2028' || r == '\u2029' {
		return 6
	}
	return size
}

// jsonStringLen is len(json.Marshal(s)) with HTML escaping off, without
// allocating.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += runeJSONLen(r, size)
		i += size
	}
	return n
}

// promptText bounds the JSON-encoded size of text to budget bytes, counting
// escapes and multibyte characters. A shortened text keeps the longest
// prefix (whole characters) that fits together with TruncationMarker. The bool
// reports whether text was shortened.
func promptText(text string, budget int) (string, bool) {
	if jsonStringLen(text) <= budget {
		return text, false
	}
	room := budget - jsonStringLen(TruncationMarker)
	if room < 0 {
		return "", true
	}
	// The encoded length of a prefix grows with every character, so the
	// longest fitting prefix is found in one pass (the same answer as the
	// reference's binary search over encoded prefixes).
	end := 0
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		room -= runeJSONLen(r, size)
		if room < 0 {
			break
		}
		i += size
		end = i
	}
	return text[:end] + TruncationMarker, true
}
