package strictjson

// CountTokens is a cheap pass over data, before any decoding, that refuses a
// body of more than maxTokens JSON tokens (each of { } [ ], each string, each
// number or literal) or nested deeper than MaxDepth, stopping at the first
// token over the budget. It allocates nothing and validates nothing else:
// Decode still does. A guest can send 2 tokens in 3 bytes ("[],"), and every
// token costs the decoder far more than the bytes cost the guest, so the
// count goes first.
func CountTokens(data []byte, maxTokens int) error {
	tokens, depth := 0, 0
	inString, escaped, inScalar := false, false, false
	for _, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString, inScalar = true, false
			tokens++
		case '{', '[':
			if depth++; depth > MaxDepth {
				return fail("nesting too deep")
			}
			tokens++
			inScalar = false
		case '}', ']':
			depth--
			tokens++
			inScalar = false
		case ',', ':', ' ', '\t', '\r', '\n':
			inScalar = false
		default:
			if !inScalar {
				tokens++
				inScalar = true
			}
		}
		if tokens > maxTokens {
			return fail("too many JSON tokens")
		}
	}
	return nil
}
