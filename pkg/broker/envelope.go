package broker

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Route kinds.
const (
	routeModel = "model"
	routeTool  = "tools"
	routeMCP   = "mcp"
)

type route struct {
	kind string
	name string // configured tool or server; "" for model
}

// label is the route as logged: built only from policy-configured names.
func (r route) label() string {
	if r.kind == "" {
		return "unknown"
	}
	if r.name == "" {
		return "/" + r.kind
	}
	return "/" + r.kind + "/" + r.name
}

// allowedHeaders may appear at most once each. Host is not in r.Header.
var allowedHeaders = map[string]bool{
	"Authorization":   true,
	"Content-Type":    true,
	"Content-Length":  true,
	"Accept":          true,
	"Accept-Encoding": true,
	"User-Agent":      true,
}

// dummyAuthorization is the only caller credential the broker accepts.
const dummyAuthorization = "Bearer " + protocol.DummyAPIKey

func refused(msg string, category error) error { return fmt.Errorf("broker: %s: %w", msg, category) }

// parseRoute checks the request target byte by byte: origin form only, no
// query, no encoding, no dot or empty segments, exactly one of the
// configured routes.
func (b *Broker) parseRoute(r *http.Request) (route, error) {
	uri := r.RequestURI
	if uri == "" || uri[0] != '/' {
		return route{}, refused("request target not in origin form", ErrRefused)
	}
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '/') {
			// '?', '%', '#', ';', '.', upper case, anything else.
			return route{}, refused("request target has characters outside the route alphabet", ErrRefused)
		}
	}
	if r.URL == nil || r.URL.Path != uri || r.URL.RawPath != "" || r.URL.RawQuery != "" || r.URL.ForceQuery {
		return route{}, refused("request target does not match its parsed form", ErrRefused)
	}
	parts := strings.Split(uri[1:], "/")
	for _, p := range parts {
		if p == "" {
			return route{}, refused("empty path segment", ErrRefused)
		}
	}
	switch {
	case len(parts) == 1 && parts[0] == routeModel:
		if b.pol.Precheck || b.pol.Rich != nil {
			break // a precheck's broker has no model route (and no model credential); a rich one has /anthropic
		}
		return route{kind: routeModel}, nil
	case len(parts) == 2 && parts[0] == routeTool:
		if _, ok := b.pol.Tool(parts[1]); ok {
			return route{kind: routeTool, name: parts[1]}, nil
		}
	case len(parts) == 2 && parts[0] == routeMCP:
		if _, ok := b.pol.Server(parts[1]); ok {
			return route{kind: routeMCP, name: parts[1]}, nil
		}
	}
	return route{}, refused("unknown route", ErrNotFound)
}

// checkHeaders allows only the small header set, each once, HTTP/1.1 only,
// the dummy bearer, a JSON content type and a Content-Length body (no
// Transfer-Encoding, so no chunked body and no CL+TE ambiguity).
func checkHeaders(r *http.Request) error {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		return refused("only HTTP/1.1", ErrRefused)
	}
	for name, values := range r.Header {
		if !allowedHeaders[name] {
			// Hop-by-hop (Connection, Keep-Alive, TE, Trailer, Upgrade),
			// Proxy-*, Forwarded, X-Forwarded-*, X-Real-IP, Via, Cookie,
			// Expect and every other header.
			return refused("header not allowed", ErrRefused)
		}
		if len(values) != 1 {
			return refused("repeated header", ErrRefused)
		}
	}
	if len(r.Trailer) != 0 || len(r.TransferEncoding) != 0 {
		return refused("transfer encoding not allowed", ErrLengthRequired)
	}
	if r.Header.Get("Authorization") != dummyAuthorization {
		return refused("caller credential is not the dummy key", ErrUnauthorized)
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return refused("content type must be application/json", ErrMediaType)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return refused("content type parameter not allowed", ErrMediaType)
		}
	}
	if r.ContentLength < 0 {
		return refused("Content-Length required", ErrLengthRequired)
	}
	return nil
}
