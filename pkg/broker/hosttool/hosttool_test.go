package hosttool

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

func TestHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"u-42": "u-42", "": "", "a b": "a b", "Zoë": "Zo%C3%AB", "x\r\nSet-Cookie: a": "x%0D%0ASet-Cookie:%20a",
		" lead": "%20lead", "tab\t": "tab%09", "nul\x00": "nul%00",
		"j%C3%B6rg": "j%25C3%25B6rg", "100%": "100%25", "%": "%25",
	} {
		if got := headerValue(in); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", in, got, want)
		}
		h := http.Header{}
		h.Set("X", headerValue(in))
		if back, err := url.PathUnescape(h.Get("X")); err != nil || back != in {
			t.Errorf("PathUnescape(headerValue(%q)) = %q, %v: not the value sent", in, back, err)
		}
	}
}

// Two ids that differ must never share a header: before '%' was always
// encoded, "jörg" and "j%C3%B6rg" were both sent as "j%C3%B6rg".
func TestHeadersDistinct(t *testing.T) {
	ids := []string{"jörg", "j%C3%B6rg", "j%25C3%25B6rg", "a b", "a%20b", " a", "%20a", "", "%", "%25"}
	seen := map[string]string{}
	for _, sp := range ids {
		h := http.Header{}
		Identity{TurnID: "t", Identity: policy.Identity{SpeakerID: sp}}.Headers(h)
		got := h.Get("X-Sandbox-Speaker-Id")
		if prev, dup := seen[got]; dup {
			t.Errorf("speaker ids %q and %q both sent as %q", prev, sp, got)
		}
		seen[got] = sp
	}
}

func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"jörg", "j%C3%B6rg", " x", "a\r\nb", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := headerValue(s)
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("headerValue(%q) = %q: not printable ASCII", s, v)
			}
		}
		if back, err := url.PathUnescape(v); err != nil || back != s {
			t.Fatalf("PathUnescape(headerValue(%q)) = %q, %v", s, back, err)
		}
	})
}

func TestResult(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`: `{"a":1}`, " [1] \n": `[1]`, "text": `"text"`, "{bad": `"{bad"`, "": `""`, "1 2": `"1 2"`,
		"\xff": "\"\ufffd\"",
	} {
		if got := string(Result([]byte(in))); got != want {
			t.Errorf("Result(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestClock(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.FixedZone("X", 3600))
	if got := Clock(at); got != "2026-11-29T09:00:00Z" {
		t.Errorf("Clock = %s", got)
	}
}

func TestExecCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start := time.Now()
	_, err := Exec(ctx, []string{"/bin/sh", "-c", "sleep 30"}, nil, nil, 1024)
	if !errors.Is(err, ErrFailed) || time.Since(start) > 3*time.Second {
		t.Errorf("cancel: %v after %v", err, time.Since(start))
	}
	if _, err := Exec(context.Background(), []string{"/nonexistent/tool"}, nil, nil, 1024); !errors.Is(err, ErrFailed) {
		t.Errorf("missing binary: %v", err)
	}
	out, err := Exec(context.Background(), []string{"/bin/sh", "-c", "cat; echo -n $FOO"}, []string{"FOO=bar"}, []byte("in:"), 1024)
	if err != nil || string(out) != "in:bar" {
		t.Errorf("Exec = %q, %v", out, err)
	}
	big := make([]byte, 1<<20) // more than a pipe buffer, never read by the tool
	if _, err := Exec(context.Background(), []string{"/bin/true"}, nil, big, 1024); err != nil {
		t.Errorf("unread stdin: %v", err)
	}
}
