package anthropic

import (
	"bytes"
	"encoding/json"
	"io"
	"unicode/utf8"

	"github.com/roundtable-sandbox/sandbox/pkg/strictjson"
)

// A tool input that max_tokens cut short is not JSON (the
// fine-grained-tool-streaming beta streams it unbuffered, and Anthropic
// documents that it may end invalid). FilterStream still checks it whole:
// cutInputText decodes what there is of it, and its content_block_stop
// passes only if the message then ends at max_tokens.

// cutInputText returns the decoded text of data, the start of one JSON value
// cut short: every string (keys included) in order, and the decoded start of
// the string the cut split. ok is false when data is not the start of
// exactly one JSON value, nests deeper than strictjson.MaxDepth, or holds
// what strictjson refuses (invalid UTF-8, an unpaired surrogate escape), so
// the check sees exactly the text a reader of the input would.
func cutInputText(data []byte) (text []any, ok bool) {
	if !utf8.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	depth, values := 0, 0
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		switch err {
		case nil:
		case io.EOF:
			// Cut between tokens: a start only while a value is open (or
			// before the first one).
			return text, (depth > 0 || values == 0) && !strictjson.UnpairedSurrogate(data)
		case io.ErrUnexpectedEOF:
			// Cut inside a string, number or literal that starts after
			// the last whole token (and its separator).
			if strictjson.UnpairedSurrogate(data[:off]) {
				return nil, false
			}
			tail := bytes.TrimLeft(data[off:], " \t\r\n,:")
			if len(tail) > 0 && tail[0] == '"' {
				s, ok := cutString(tail[1:])
				if !ok {
					return nil, false
				}
				text = append(text, s)
			}
			return text, true
		default:
			return nil, false // not the start of a JSON value
		}
		if d, isDelim := tok.(json.Delim); isDelim && (d == '}' || d == ']') {
			depth--
			continue
		}
		if depth == 0 {
			if values > 0 {
				return nil, false // a second value
			}
			values++
		}
		switch t := tok.(type) {
		case json.Delim:
			if depth++; depth > strictjson.MaxDepth {
				return nil, false
			}
		case string:
			text = append(text, t)
		}
	}
}

// cutString decodes body, a JSON string's content after its opening quote
// with its end cut off: an escape the cut split, and a high surrogate whose
// low half it cut, are dropped; anything else strictjson refuses is refused.
func cutString(body []byte) (string, bool) {
	// The starts of the last two escapes.
	prev, last := -1, -1
	for j := 0; j < len(body); j++ {
		if body[j] != '\\' {
			continue
		}
		prev, last = last, j
		if j+1 < len(body) && body[j+1] == 'u' {
			j += 5
		} else {
			j++
		}
	}
	escEnd := func(s int) int {
		if s+1 < len(body) && body[s+1] == 'u' {
			return s + 6
		}
		return s + 2
	}
	end := len(body)
	if last >= 0 && escEnd(last) > end {
		end, last = last, prev
	}
	if last >= 0 && escEnd(last) == end && end-last == 6 {
		if r, ok := hexRune(body[last+2 : end]); ok && r >= 0xD800 && r <= 0xDBFF {
			end = last
		}
	}
	quoted := make([]byte, 0, end+2)
	quoted = append(append(append(quoted, '"'), body[:end]...), '"')
	v, err := strictjson.Decode(quoted)
	s, isString := v.(string)
	return s, err == nil && isString
}

// hexRune reads four hex digits.
func hexRune(h []byte) (rune, bool) {
	var r rune
	for _, c := range h {
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
	return r, len(h) == 4
}
