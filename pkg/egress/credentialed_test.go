package egress

import (
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/policy"
)

// TestCheckCredentialedRequest: a header or declared trailer a server may
// read as the credential header is refused, a merely similar name is not.
func TestCheckCredentialedRequest(t *testing.T) {
	c := policy.EgressCredential{Name: "gitlab", Header: "Private-Token"}
	for _, tt := range []struct {
		name    string
		header  http.Header
		trailer http.Header
		want    error
	}{
		{"none", http.Header{"Accept": {"*/*"}}, nil, nil},
		{"exact", http.Header{"Private-Token": {"x"}}, nil, errCredentialHeader},
		{"underscore", http.Header{"Private_Token": {"x"}}, nil, errCredentialHeader},
		{"lower underscore", http.Header{"private_token": {"x"}}, nil, errCredentialHeader},
		{"upper", http.Header{"PRIVATE-TOKEN": {"x"}}, nil, errCredentialHeader},
		{"dot", http.Header{"Private.Token": {"x"}}, nil, errCredentialHeader},
		{"empty value", http.Header{"Private_token": {""}}, nil, errCredentialHeader},
		{"declared trailer", nil, http.Header{"Private_Token": nil}, errCredentialHeader},
		{"longer", http.Header{"Private-Tokens": {"x"}}, nil, nil},
		{"shorter", http.Header{"Private-Toke": {"x"}}, nil, nil},
		{"no separator", http.Header{"Privatetoken1": {"x"}}, nil, nil},
		{"upgrade", http.Header{"Upgrade": {"websocket"}}, nil, errUpgrade},
	} {
		r := &http.Request{Header: tt.header, Trailer: tt.trailer}
		if got := checkCredentialedRequest(r, c); !errors.Is(got, tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

// fakeInjection is an Injection whose header check answers reflects.
type fakeInjection struct{ reflects bool }

func (f fakeInjection) Value() string                   { return "v" }
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
