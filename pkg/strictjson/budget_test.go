package strictjson

import (
	"errors"
	"strings"
	"testing"
)

func TestCountTokens(t *testing.T) {
	tests := []struct {
		body string
		max  int
		ok   bool
	}{
		{`{}`, 2, true},
		{`{}`, 1, false},
		{`{"a":1}`, 4, true}, // { "a" 1 }
		{`{"a":1}`, 3, false},
		{`{"a":"{[,]}"}`, 4, true}, // brackets inside a string are not tokens
		{`{"a":"\"[[[["}`, 4, true},
		{`[true,false,null,-1.5e3]`, 6, true},
		{`[true,false,null,-1.5e3]`, 5, false},
		{`{"stream":true,"messages":[[],[],[]]}`, 13, true},
		{`{"stream":true,"messages":[[],[],[]]}`, 12, false},
		{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), 1 << 20, true},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), 1 << 20, false},
	}
	for _, tt := range tests {
		err := CountTokens([]byte(tt.body), tt.max)
		if (err == nil) != tt.ok {
			t.Errorf("CountTokens(%s, %d) = %v, want ok=%v", tt.body, tt.max, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("CountTokens(%s) error %v is not ErrInvalid", tt.body, err)
		}
	}
}

// The count never undercounts what the decoder sees.
func FuzzCountTokens(f *testing.F) {
	f.Add(`{"a":[1,2,{"b":"c"}],"d":true}`)
	f.Add(`{"stream":true,"messages":[[],[]]}`)
	f.Fuzz(func(t *testing.T, body string) {
		v, err := Decode([]byte(body))
		if err != nil {
			return
		}
		n := count(v)
		if err := CountTokens([]byte(body), n); err != nil {
			t.Fatalf("CountTokens(%q, %d decoded tokens) = %v", body, n, err)
		}
		if n > 1 {
			if err := CountTokens([]byte(body), n-1); err == nil {
				t.Fatalf("CountTokens(%q, %d) accepted a body of %d tokens", body, n-1, n)
			}
		}
	})
}

func count(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := 2
		for _, e := range x {
			n += 1 + count(e)
		}
		return n
	case []any:
		n := 2
		for _, e := range x {
			n += count(e)
		}
		return n
	}
	return 1
}
