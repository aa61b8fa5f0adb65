package credential

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchSecrets are four credentials of realistic lengths (a short bearer, a
// 51-character classic key, a 164-character project key and a 40-character
// token), as a broker with a model, a tool and two MCP servers holds them.
func benchSecrets() []Secret {
	return []Secret{
		NewSecret("tok-0123456789abcdef"),
		NewSecret("sk-" + strings.Repeat("AbC1dEf2GhI3", 4)),
		NewSecret("sk-proj-" + strings.Repeat("Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0", 6)[:156]),
		NewSecret(strings.Repeat("ghp_0aZ9", 5)),
	}
}

// benchAnswers are 1 MiB answers without a credential: one long model reply
// (prose with line breaks) and a tool result of many small objects.
func benchAnswers(b *testing.B) map[string]any {
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog; 0123456789 QWERTY base64+/=\n", 1<<20/72)
	var items []any
	for i := 0; len(items) < 1<<20/45; i++ {
		items = append(items, map[string]any{"id": json.Number(fmt.Sprint(i)), "name": fmt.Sprintf("item-%08d", i), "ok": true})
	}
	out := map[string]any{
		"prose":   map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": prose}}}},
		"objects": map[string]any{"content": items},
	}
	for name, v := range out {
		data, _ := json.Marshal(v)
		if len(data) < 1<<20-4096 || len(data) > 1<<20+(1<<17) {
			b.Fatalf("%s answer is %d bytes, want about 1 MiB", name, len(data))
		}
	}
	return out
}

// BenchmarkReflected measures the refusal check on a clean 1 MiB answer,
// the worst case (the whole answer is scanned).
func BenchmarkReflected(b *testing.B) {
	secrets := benchSecrets()
	for name, v := range benchAnswers(b) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(1 << 20)
			b.ReportAllocs()
			for b.Loop() {
				if Reflected(v, secrets...) {
					b.Fatal("false positive")
				}
			}
		})
	}
}
