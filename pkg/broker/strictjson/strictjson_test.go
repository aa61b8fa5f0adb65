package strictjson

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
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
