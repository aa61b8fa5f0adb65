package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeObject(t *testing.T) {
	cases := []struct {
		in string
		ok bool
	}{
		{`{}`, true},
		{` {"a":[1,{"b":null}],"c":1.5e3} `, true},
		{`{"a":1,"b":{"a":2}}`, true},
		{`{"a":1,"a":2}`, false},
		{`{"a":{"b":1,"b":1}}`, false},
		{`[{}]`, false},
		{`"x"`, false},
		{``, false},
		{`{}{}`, false},
		{`{} x`, false},
		{`{"a":}`, false},
		{strings.Repeat(`{"a":`, MaxDepth+1) + `1` + strings.Repeat(`}`, MaxDepth+1), false},
		{strings.Repeat(`{"a":`, MaxDepth-1) + `1` + strings.Repeat(`}`, MaxDepth-1), true},
		// Text must be valid Unicode: refused, never repaired to U+FFFD.
		{"{\"a\":\"x\xffy\"}", false},
		{"{\"a\xc3\":1}", false},
		{"{\"a\":\"\xed\xa0\x80\"}", false}, // a surrogate encoded as UTF-8
		{"{\"a\":\"\xc0\xaf\"}", false},     // overlong encoding
		{`{"a":"\ud800"}`, false},
		{`{"a":"\udc00"}`, false},
		{`{"a":"\ud800x"}`, false},
		{`{"a":"\ud800\u0041"}`, false},
		{`{"a":"\uDBFF\uDBFF"}`, false},
		{`{"\ud800":1}`, false},
		{`{"a":"\ud83d\ude00"}`, true},
		{`{"a":"\\ud800"}`, true}, // an escaped backslash, then text
		{`{"a":"\"\ud800"}`, false},
		{`{"a":"\ufffd \u00e9"}`, true},
		{"{\"a\":\"\u00e9 \xef\xbf\xbd \xf0\x9f\x98\x80\"}", true},
	}
	for _, c := range cases {
		_, err := DecodeObject([]byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("DecodeObject(%.40q) = %v, want ok=%v", c.in, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("error %v not ErrInvalid", err)
		}
		if err != nil && strings.Contains(err.Error(), `"a"`) {
			t.Errorf("error quotes input: %v", err)
		}
	}
	v, _ := DecodeObject([]byte(`{"n":12345678901234567890}`))
	if v["n"] != json.Number("12345678901234567890") {
		t.Errorf("number not kept literally: %v", v["n"])
	}
}

// FuzzDecode: Decode never panics; whatever it accepts was valid UTF-8, and
// no U+FFFD appears in a decoded string unless the input carried one, so
// nothing was repaired; the value re-encodes and decodes to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,{"b":null}],"c":"x"}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`,
		`{"a":"\\ud800"}`, "{\"k\xc3\":1}", `{"a":"\ufffd"}`, `{"a":1,"a":2}`, `[1,2]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v not ErrInvalid", err)
			}
			return
		}
		if !utf8.Valid(data) {
			t.Fatal("invalid UTF-8 accepted")
		}
		carried := bytes.ContainsRune(data, utf8.RuneError) || bytes.Contains(bytes.ToLower(data), []byte(`\ufffd`))
		if !carried && hasReplacement(v) {
			t.Fatalf("input %q decoded with a U+FFFD it did not carry", data)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted value does not encode: %v", err)
		}
		w, err := Decode(out)
		if err != nil {
			t.Fatalf("re-encoded value refused: %v", err)
		}
		if !reflect.DeepEqual(v, w) {
			t.Fatalf("round trip changed the value: %v != %v", v, w)
		}
	})
}

func hasReplacement(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.ContainsRune(x, utf8.RuneError)
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, utf8.RuneError) || hasReplacement(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasReplacement(e) {
				return true
			}
		}
	}
	return false
}
