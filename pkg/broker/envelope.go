package broker

import (
	"net/http"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/broker/envelope"
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

func refused(msg string, category error) error { return envelope.Refused(msg, category) }

// parseRoute checks the request target byte by byte: origin form only, no
// query, no encoding, no dot or empty segments, exactly one of the
// configured routes.
func (b *Broker) parseRoute(r *http.Request) (route, error) {
	uri := r.RequestURI
	if uri == "" || uri[0] != '/' {
		return route{}, refused("request target not in origin form", envelope.ErrRefused)
	}
	for i := 0; i < len(uri); i++ {
		c := uri[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '/') {
			// '?', '%', '#', ';', '.', upper case, anything else.
			return route{}, refused("request target has characters outside the route alphabet", envelope.ErrRefused)
		}
	}
	if r.URL == nil || r.URL.Path != uri || r.URL.RawPath != "" || r.URL.RawQuery != "" || r.URL.ForceQuery {
		return route{}, refused("request target does not match its parsed form", envelope.ErrRefused)
	}
	parts := strings.Split(uri[1:], "/")
	for _, p := range parts {
		if p == "" {
			return route{}, refused("empty path segment", envelope.ErrRefused)
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
	return route{}, refused("unknown route", envelope.ErrNotFound)
}
