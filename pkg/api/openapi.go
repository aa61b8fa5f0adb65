package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the host API's OpenAPI 3.1 document: every route, its least
// role (x-sandbox-role), its bodies and its error answers. The host serves
// these very bytes (GET /v1/openapi.json), the .deb ships the file and the
// TypeScript client is generated from it; openapi_test.go holds it to the
// route table and the wire types.
//
//go:embed openapi.json
var OpenAPI []byte

// ServeOpenAPI answers the document (any peer: it says what the API is,
// nothing about the host's state).
func ServeOpenAPI(w http.ResponseWriter, _ *http.Request, _ string) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	w.Write(OpenAPI)
	return nil
}
