package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestSessionKeysDocumented: every sessions.* key has a row in the
// configuration reference (docs/operating.md) whose default is the
// code's, so neither drifts.
func TestSessionKeysDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for key, v := range defaults() {
		if !strings.HasPrefix(key, "sessions.") {
			continue
		}
		// A row names the key, alone or beside its siblings
		// ("`a` / `b` | 1 / 2 | ..."), then its default in that place.
		re := regexp.MustCompile("(?m)^\\| ([^|]*`" + regexp.QuoteMeta(key) + "`[^|]*)\\| ([^|]*) \\|")
		m := re.FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("%s: no row in docs/operating.md", key)
			continue
		}
		keys, defs := strings.Split(m[1], " / "), strings.Split(m[2], " / ")
		for i, k := range keys {
			if strings.TrimSpace(k) != "`"+key+"`" {
				continue
			}
			want := fmt.Sprint(v)
			if f, ok := v.(float64); ok {
				want = fmt.Sprintf("%.1f", f)
			}
			if b, ok := v.(bool); ok {
				want = fmt.Sprintf("`%v`", b)
			}
			if i >= len(defs) || strings.TrimSpace(defs[i]) != want {
				t.Errorf("%s: documented default %q, code %s", key, m[2], want)
			}
		}
	}
}

func TestSessionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Sessions)
		want   string
	}{
		{"per client over box", func(s *Sessions) { s.MaxPerClient = s.MaxLive + 1 }, "sessions.maxPerClient"},
		{"memory under one", func(s *Sessions) { s.MaxMemoryMB = s.MemoryMB - 1 }, "sessions.maxMemoryMb"},
		{"tmpfs over memory", func(s *Sessions) { s.WorkMB = s.MemoryMB }, "sessions.workMb"},
		{"files over the host's budget", func(s *Sessions) { s.MaxLive, s.MaxFileBytes = 16, MaxSessionFileBytes }, "sessions.maxFileBytes"},
		{"idle too short", func(s *Sessions) { s.IdleSeconds = 1 }, "sessions.idleSeconds"},
		{"ttl too long", func(s *Sessions) { s.TTLSeconds = MaxSessionTTL + 1 }, "sessions.ttlSeconds"},
	} {
		c, err := Load(write(t, base))
		if err != nil {
			t.Fatal(err)
		}
		tc.change(&c.Sessions)
		var got []string
		c.validateSessions(func(key, format string, a ...any) { got = append(got, key) })
		if len(got) == 0 || got[0] != tc.want {
			t.Errorf("%s: refused %v, want %s", tc.name, got, tc.want)
		}
	}
}
