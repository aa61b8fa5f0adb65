package strictjson

import (
	"bytes"
	"encoding/json"
	"math"
)

// Reading a decoded value and writing a rebuilt one, as every rebuild of a
// guest request does (the Chat Completions and the Anthropic Messages
// rebuilds): numbers are json.Number (Decode keeps their literal text).

// Integer is v as an int64 when it is a number literal of one.
func Integer(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

// Number is v as a finite float64 when it is a number literal.
func Number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
}

// Only reports whether every member of m is one of allowed.
func Only(m map[string]any, allowed map[string]bool) bool {
	for k := range m {
		if !allowed[k] {
			return false
		}
	}
	return true
}

// Encode writes v as JSON without HTML escaping and without a newline: a
// rebuilt body holds the guest's text byte for byte.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
