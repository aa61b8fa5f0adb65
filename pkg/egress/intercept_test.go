package egress

import (
	"encoding/base64"
	"strings"
	"testing"
)

const (
	testPH    = "rtsbx_ph_0123456789abcdef0123456789abcdef"
	testValue = "tok-VALUE-42"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestSubstitute(t *testing.T) {
	for _, tt := range []struct {
		in, want, left string
		ok             bool
	}{
		{testPH, testValue, "", true},
		{"Bearer " + testPH, "Bearer " + testValue, "Bearer", true},
		{"token " + testPH, "token " + testValue, "token", true},
		{"Basic " + b64("x-access-token:"+testPH), "Basic " + b64("x-access-token:"+testValue), "x-access-token:", true},
		{"basic " + b64(testPH+":x-oauth-basic"), "basic " + b64(testValue+":x-oauth-basic"), ":x-oauth-basic", true},
		{"Basic " + b64(testPH+":"+testPH), "Basic " + b64(testValue+":"+testValue), ":", true},
		// Not a place a placeholder may be: unchanged, all of it left.
		{"Bearer pre" + testPH, "Bearer pre" + testPH, "Bearer pre" + testPH, false},
		{"Bearer " + testPH + " x", "Bearer " + testPH + " x", "Bearer " + testPH + " x", false},
		{"Basic " + b64("u:pre"+testPH), "Basic " + b64("u:pre"+testPH), "u:pre" + testPH, false},
		{"Basic !!!", "Basic !!!", "Basic !!!", false},
		{"Bearer other", "Bearer other", "Bearer other", false},
	} {
		got, left, ok := substitute(tt.in, testPH, testValue)
		if got != tt.want || left != tt.left || ok != tt.ok {
			t.Errorf("substitute(%q) = %q, %q, %v; want %q, %q, %v", tt.in, got, left, ok, tt.want, tt.left, tt.ok)
		}
	}
}

// FuzzSubstitute: whatever the code sends, a swap leaves no placeholder in
// the result, and what is left (what the broker screens) holds every
// placeholder the result would have carried unswapped.
func FuzzSubstitute(f *testing.F) {
	for _, s := range []string{testPH, "Bearer " + testPH, "Basic " + b64("u:"+testPH), "Basic " + b64(testPH+":p"), "x y z", "Basic"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		out, left, ok := substitute(v, testPH, testValue)
		if !ok {
			if out != v {
				t.Fatalf("not swapped but changed: %q -> %q", v, out)
			}
			return
		}
		plain := out
		if scheme, cred, found := strings.Cut(out, " "); found && strings.EqualFold(scheme, "Basic") {
			d, err := base64.StdEncoding.DecodeString(cred)
			if err != nil {
				t.Fatalf("swapped Basic does not decode: %q", out)
			}
			plain = string(d)
		}
		if strings.Contains(plain, testPH) && !strings.Contains(left, testPH) {
			t.Fatalf("a placeholder passes unscreened: %q -> %q (left %q)", v, out, left)
		}
		if !strings.Contains(plain, testValue) {
			t.Fatalf("swapped without the value: %q -> %q", v, out)
		}
	})
}
