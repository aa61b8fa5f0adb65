package credential

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestStreamFindsSecretsSplitAcrossPieces(t *testing.T) {
	secret := "sk-ant-api03-" + strings.Repeat("Zq7x", 20)
	b64 := base64.StdEncoding.EncodeToString([]byte(secret))
	tests := []struct {
		name   string
		pieces []string
		want   bool
	}{
		{"whole", []string{"hello " + secret}, true},
		{"split in two", []string{"hello " + secret[:10], secret[10:] + " bye"}, true},
		{"one byte a piece", strings.Split(secret, ""), true},
		{"piece of 16 over a boundary", []string{"x" + secret[20:28], secret[28:36] + "y"}, true},
		{"upper-cased and spaced", []string{strings.ToUpper(secret[:30]), " ", strings.ToUpper(secret[30:])}, true},
		{"base64 split", []string{b64[:7], b64[7:50], b64[50:]}, true},
		{"reversed split", []string{reverse(secret)[:40], reverse(secret)[40:]}, true},
		{"unrelated text", []string{"sk-ant-", "api03-", "nothing here at all"}, false},
		{"short prefix only", []string{"sk-ant-api03-Zq"}, false},
	}
	for _, tt := range tests {
		s := NewStream(NewSecret(secret))
		got := false
		for _, p := range tt.pieces {
			got = got || s.Reflects(p)
		}
		if got != tt.want {
			t.Errorf("%s: Reflects = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestStreamKeepsABoundedTail(t *testing.T) {
	s := NewStream(NewSecret(strings.Repeat("k", 40)))
	for range 1000 {
		s.Reflects(strings.Repeat("abc ", 1000))
	}
	if len(s.tail) > s.keep || s.keep > 200 {
		t.Fatalf("tail %d bytes, keep %d: the stream grew", len(s.tail), s.keep)
	}
	if NewStream().Reflects("anything") {
		t.Fatal("a stream with no secrets reported a reflection")
	}
}

func TestMatcherIsReflected(t *testing.T) {
	secret := NewSecret("sk-ant-api03-" + strings.Repeat("Zq7x", 20))
	m := NewMatcher(secret)
	for _, v := range []any{
		"plain", map[string]any{"a": secret.Reveal()}, []any{"x", strings.ToUpper(secret.Reveal())},
		map[string]any{"k": base64.StdEncoding.EncodeToString([]byte(secret.Reveal()))},
	} {
		if got, want := m.Reflected(v), Reflected(v, secret); got != want {
			t.Errorf("Matcher.Reflected(%v) = %v, Reflected = %v", v, got, want)
		}
	}
	if st := m.Stream(); st.Reflects(secret.Reveal()[:10]) || !st.Reflects(secret.Reveal()[10:20]) {
		t.Error("Matcher.Stream does not find the secret split in two pieces")
	}
	if NewMatcher().Reflected(secret.Reveal()) {
		t.Error("a matcher with no secrets reported a reflection")
	}
}
