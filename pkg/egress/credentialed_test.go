package egress

import (
	"errors"
	"io"
	"net/http"
	"testing"
)

// TestSameFieldName: a header name a server may read as the credential
// header (intercept.go refuses it beside the declared one) is the same
// name; a merely similar one is not.
func TestSameFieldName(t *testing.T) {
	const declared = "Private-Token"
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"Accept", false},
		{"Private-Token", true},
		{"Private_Token", true},
		{"private_token", true},
		{"PRIVATE-TOKEN", true},
		{"Private.Token", true},
		{"Private-Tokens", false},
		{"Private-Toke", false},
		{"Privatetoken1", false},
	} {
		if got := sameFieldName(tt.name, declared); got != tt.want {
			t.Errorf("sameFieldName(%q, %q) = %v, want %v", tt.name, declared, got, tt.want)
		}
	}
}

// fakeInjection is an Injection whose header check answers reflects.
type fakeInjection struct{ reflects bool }

func (f fakeInjection) HeaderReflects(http.Header) bool { return f.reflects }
func (f fakeInjection) Guard(r io.Reader) io.Reader     { return r }

// TestCheckCredentialedAnswer: any Content-Encoding but identity is
// refused (the guard cannot read it); identity, none or an empty one pass.
func TestCheckCredentialedAnswer(t *testing.T) {
	for _, tt := range []struct {
		name     string
		header   http.Header
		reflects bool
		want     error
	}{
		{"no encoding", http.Header{"Content-Type": {"text/plain"}}, false, nil},
		{"identity", http.Header{"Content-Encoding": {"identity"}}, false, nil},
		{"IDENTITY, empty", http.Header{"Content-Encoding": {"IDENTITY", ""}}, false, nil},
		{"gzip", http.Header{"Content-Encoding": {"gzip"}}, false, errEncoded},
		{"deflate", http.Header{"Content-Encoding": {"deflate"}}, false, errEncoded},
		{"br", http.Header{"Content-Encoding": {"br"}}, false, errEncoded},
		{"zstd", http.Header{"Content-Encoding": {"zstd"}}, false, errEncoded},
		{"identity then gzip", http.Header{"Content-Encoding": {"identity, gzip"}}, false, errEncoded},
		{"second field", http.Header{"Content-Encoding": {"identity", "x-gzip"}}, false, errEncoded},
		{"reflects", http.Header{"X-Echo": {"t"}}, true, errReflected},
		{"encoded and reflects", http.Header{"Content-Encoding": {"gzip"}}, true, errEncoded},
	} {
		got := checkCredentialedAnswer(tt.header, fakeInjection{tt.reflects})
		if !errors.Is(got, tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
