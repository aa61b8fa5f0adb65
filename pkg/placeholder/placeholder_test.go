package placeholder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestNewIsRandomAndRecognisable(t *testing.T) {
	seen := map[string]bool{}
	for range 64 {
		p, err := New()
		if err != nil {
			t.Fatal(err)
		}
		v := p.Reveal()
		if len(v) != Len || !strings.HasPrefix(v, Prefix) {
			t.Fatalf("placeholder %q: want %d bytes starting %s", v, Len, Prefix)
		}
		if q, ok := Parse(v); !ok || q != p {
			t.Fatalf("Parse(%q) = %v, %v", v, q, ok)
		}
		if seen[v] {
			t.Fatalf("placeholder minted twice")
		}
		seen[v] = true
	}
	for _, bad := range []string{"", Prefix, Prefix + strings.Repeat("g", 32), Prefix + strings.Repeat("A", 32),
		Prefix + strings.Repeat("a", 31), "x" + Prefix[1:] + strings.Repeat("a", 32)} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestPlaceholderNeverPrints(t *testing.T) {
	p, _ := New()
	v := p.Reveal()
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "p", p)
	j, _ := json.Marshal(map[string]any{"p": p})
	for _, got := range []string{p.String(), fmt.Sprintf("%v %s %q %#v %+v %x", p, p, p, p, p, p), logged.String(), string(j)} {
		if strings.Contains(got, v) || strings.Contains(got, v[len(Prefix):]) {
			t.Errorf("placeholder revealed in %q", got)
		}
	}
}
