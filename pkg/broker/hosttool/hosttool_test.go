package hosttool

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"u-42": "u-42", "": "", "a b": "a b", "Zoë": "Zo%C3%AB", "x\r\nSet-Cookie: a": "x%0D%0ASet-Cookie:%20a",
		" lead": "%20lead", "tab\t": "tab%09", "nul\x00": "nul%00",
	} {
		if got := headerValue(in); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", in, got, want)
		}
		h := http.Header{}
		h.Set("X", headerValue(in))
	}
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
