package anthropic

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCutInputTextAcceptsEveryStart: every start of a JSON value (cut at
// any character, as max_tokens may cut a streamed input) is accepted, and
// what the cut left of a string is decoded.
func TestCutInputTextAcceptsEveryStart(t *testing.T) {
	whole := `{"name": "caf\u00e9 \ud83d\ude00.txt", "lines": ["a\"b", "c\\d", "\/e\n"], "n": -1.5e+3, "ok": true, "x": null, "deep": {"k": [{}, []]}, "é": "🐈"}`
	if _, ok := cutInputText([]byte(whole[:len(whole)-1])); !ok {
		t.Fatalf("the whole value less its brace refused")
	}
	for i := 1; i < len(whole); i++ {
		if !utf8.RuneStart(whole[i]) {
			continue // the upstream's pieces are whole characters
		}
		if _, ok := cutInputText([]byte(whole[:i])); !ok {
			t.Errorf("start %q refused", whole[:i])
		}
	}
	for _, tt := range []struct{ in, want string }{
		{`{"a": "caf\u00e9 au`, "a|café au"},
		{`{"a": "caf\u00`, "a|caf"},
		{`{"a": "x\`, "a|x"},
		{`{"a": "x\ud83d`, "a|x"},
		{`{"a": "x\ud83d\ude`, "a|x"},
		{`{"a": "x\ud83d\ude00`, "a|x😀"},
		{`{"ke`, "ke"},
		{`["a", "b"`, "a|b"},
	} {
		text, ok := cutInputText([]byte(tt.in))
		var got []string
		for _, s := range text {
			got = append(got, s.(string))
		}
		if !ok || strings.Join(got, "|") != tt.want {
			t.Errorf("cutInputText(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}
