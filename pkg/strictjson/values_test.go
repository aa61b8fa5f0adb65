package strictjson

import (
	"encoding/json"
	"testing"
)

func TestIntegerAndNumber(t *testing.T) {
	tests := []struct {
		v   any
		i   int64
		iok bool
		f   float64
		fok bool
	}{
		{json.Number("3"), 3, true, 3, true},
		{json.Number("1.5"), 0, false, 1.5, true},
		{json.Number("1e400"), 0, false, 0, false}, // out of float64's range
		{json.Number("9223372036854775808"), 0, false, 9223372036854775808, true},
		{float64(3), 0, false, 0, false}, // not a decoded literal
		{"3", 0, false, 0, false},
	}
	for _, tt := range tests {
		// The value counts only with ok.
		if i, ok := Integer(tt.v); ok != tt.iok || ok && i != tt.i {
			t.Errorf("Integer(%#v) = %d, %v; want %d, %v", tt.v, i, ok, tt.i, tt.iok)
		}
		if f, ok := Number(tt.v); ok != tt.fok || ok && f != tt.f {
			t.Errorf("Number(%#v) = %g, %v; want %g, %v", tt.v, f, ok, tt.f, tt.fok)
		}
	}
}

func TestOnly(t *testing.T) {
	allowed := map[string]bool{"a": true, "b": true}
	tests := []struct {
		m    map[string]any
		want bool
	}{
		{map[string]any{}, true},
		{map[string]any{"a": 1, "b": 2}, true},
		{map[string]any{"a": 1, "c": 3}, false},
	}
	for _, tt := range tests {
		if got := Only(tt.m, allowed); got != tt.want {
			t.Errorf("Only(%v) = %v, want %v", tt.m, got, tt.want)
		}
	}
}

func TestEncodeKeepsTextAndNoNewline(t *testing.T) {
	got, err := Encode(map[string]any{"t": "<a&b>", "n": json.Number("1.50")})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"n":1.50,"t":"<a&b>"}`; string(got) != want {
		t.Errorf("Encode = %s, want %s", got, want)
	}
}
