package host

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
)

// TestOpenAPIServed: GET /v1/openapi.json answers the embedded document to
// any peer, a uid with no role included.
func TestOpenAPIServed(t *testing.T) {
	r := newRig(t, "", nil)
	code, body := apiAs(t, r.h, 777, http.MethodGet, "/v1/openapi.json", nil)
	if code != http.StatusOK || !bytes.Equal(body, api.OpenAPI) {
		t.Fatalf("GET /v1/openapi.json as a peer with no role: %d %.80q, want 200 and the document", code, body)
	}
}
