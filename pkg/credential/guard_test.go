package credential

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
)

const guardSecret = "ghp_GUARDsecretValue0123456789abcdef"

// TestGuard: a clean body passes whole (in any read sizes); a body
// reflecting the secret in any form fails with ErrReflected, and what was
// handed out before holds no PieceBytes run of the secret.
func TestGuard(t *testing.T) {
	m := NewMatcher(NewSecret(guardSecret), NewSecret("Bearer "+guardSecret))
	filler := strings.Repeat("git pack data \x00\x01\xff ", 400)
	large := strings.Repeat(filler, 10) // past the guard's 32 KiB read
	for _, c := range []struct {
		name    string
		body    string
		reflect bool
	}{
		{"clean", filler, false},
		{"clean, large", large, false},
		{"large, at the end", large + guardSecret, true},
		{"empty", "", false},
		{"raw at the end", filler + guardSecret, true},
		{"raw in the middle", filler + guardSecret + filler, true},
		{"base64", filler + base64.StdEncoding.EncodeToString([]byte(guardSecret)) + filler, true},
		{"upper case, spaced", filler + strings.ToUpper(strings.Join(strings.Split(guardSecret, ""), " ")), true},
		{"one piece", filler + guardSecret[3:3+PieceBytes] + filler, true},
		{"header echoed", "{\"headers\":{\"Authorization\":[\"Bearer " + guardSecret + "\"]}}", true},
	} {
		for _, one := range []bool{false, true} {
			if one && len(c.body) > 32<<10 {
				continue // one byte a read: the small bodies show the split
			}
			var src io.Reader = strings.NewReader(c.body)
			if one {
				src = iotest.OneByteReader(src)
			}
			got, err := io.ReadAll(m.Guard(src))
			if c.reflect {
				if !errors.Is(err, ErrReflected) {
					t.Errorf("%s (one byte %v): err %v, want ErrReflected", c.name, one, err)
				}
				if NewMatcher(NewSecret(guardSecret)).Reflected(string(got)) {
					t.Errorf("%s (one byte %v): what was handed out reflects the secret", c.name, one)
				}
				// Held back: not even the start of the run that was found
				// left (a cut after 15 bytes would give away 15 bytes).
				if i := strings.Index(c.body, "UARDsecr"); i >= 0 && strings.Contains(string(got), c.body[i:i+4]) {
					t.Errorf("%s (one byte %v): the start of the reflected run was handed out before the cut", c.name, one)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, []byte(c.body)) {
				t.Errorf("%s (one byte %v): %d bytes, %v; want the body whole", c.name, one, len(got), err)
			}
		}
	}
}

func TestHeaderReflects(t *testing.T) {
	m := NewMatcher(NewSecret(guardSecret))
	for _, c := range []struct {
		h    http.Header
		want bool
	}{
		{http.Header{"Content-Type": {"text/plain"}}, false},
		{http.Header{"X-Echo": {"Bearer " + guardSecret}}, true},
		{http.Header{"Location": {"https://elsewhere/?t=" + base64.URLEncoding.EncodeToString([]byte(guardSecret))}}, true},
		{http.Header{guardSecret: {"x"}}, true},
		// Percent-escaped in one field, the escapes each field's own.
		{http.Header{"X-A": {"50%"}, "X-B": {"q=" + percentAll(guardSecret)}}, true},
		{http.Header{"X-A": {"%"}, "X-B": {"41%42"}}, false},
		// Split across two values of one field (a whole secret, no piece).
		{http.Header{"X-Split": {guardSecret[:len(guardSecret)/2], guardSecret[len(guardSecret)/2:]}}, true},
	} {
		if got := m.HeaderReflects(c.h); got != c.want {
			t.Errorf("%v: %v, want %v", c.h, got, c.want)
		}
	}
}

// BenchmarkGuard is the reflection guard's cost per answer byte (the
// credentialed route's body check): 1 MiB of text through it.
func BenchmarkGuard(b *testing.B) {
	m := NewMatcher(NewSecret(guardSecret), NewSecret("Bearer "+guardSecret))
	body := []byte(strings.Repeat("git pack data 9876543210 zyxwvutsrq ", 1<<20/36))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, m.Guard(bytes.NewReader(body))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGuardPercent is BenchmarkGuard on a body dense with %XX escapes
// (a URL-encoded form or log of query strings): the worst case of the
// percent-decoded view, which every read holding a '%' adds.
func BenchmarkGuardPercent(b *testing.B) {
	m := NewMatcher(NewSecret(guardSecret), NewSecret("Bearer "+guardSecret))
	line := "q=caf%C3%A9%20au%20lait&path=%2Fsrv%2Fgit%2Frepo.git&n=%31%32%33 "
	body := []byte(strings.Repeat(line, 1<<20/len(line)))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, m.Guard(bytes.NewReader(body))); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzTextReflects: TextReflects(v) is HeaderReflects of the one-field
// block {"": {v}}, for any v (the secret's forms, percent escapes, split
// or not).
func FuzzTextReflects(f *testing.F) {
	const a, b = "rtsbx_ph_0123456789abcdef0123456789abcdef", "tok-VALUE-42"
	for _, s := range []string{"", "Bearer", a, "x" + a + "y", "Bearer " + b, strings.ToUpper(b), "%74ok-VALUE-42",
		"tok%2DVALUE%2d42", "tok-VAL UE-42", "%", "%7", "%zz" + b, strings.Repeat("%41", 200) + b, url.QueryEscape(a)} {
		f.Add(s)
	}
	m := NewMatcher(NewSecret(a), NewSecret(b))
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := m.TextReflects(v), m.HeaderReflects(http.Header{"": {v}}); got != want {
			t.Fatalf("TextReflects(%q): got %v, HeaderReflects %v", v, got, want)
		}
	})
}
