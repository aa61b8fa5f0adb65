package host

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/kind"
)

// routeTable is the API, one entry per method and path: the host's own
// routes, then each kind's.
func (h *Host) routeTable() []route {
	rs := []api.Route{
		{Endpoint: Endpoint{Method: http.MethodGet, Pattern: "/metrics", Role: RoleClient}, Fn: h.handleMetrics},
		{Endpoint: Endpoint{Method: http.MethodGet, Pattern: "/v1/health", Role: RoleNone}, Fn: h.handleHealth},
		{Endpoint: Endpoint{Method: http.MethodGet, Pattern: "/v1/openapi.json", Role: RoleNone}, Fn: api.ServeOpenAPI},
		{Endpoint: Endpoint{Method: http.MethodGet, Pattern: "/v1/turns", Role: RoleClient}, Fn: h.handleTurns},
		{Endpoint: Endpoint{Method: http.MethodGet, Pattern: "/v1/channels", Role: RoleClient}, Fn: h.handleChannels},
		{Endpoint: Endpoint{Method: http.MethodGet, Pattern: "/v1/channels/{channel}", Role: RoleClient}, Fn: h.handleChannel},
		{Endpoint: Endpoint{Method: http.MethodPost, Pattern: "/v1/channels/{channel}/turns", Role: RoleClient}, Admits: true, Fn: h.handleTurn},
		{Endpoint: Endpoint{Method: http.MethodPut, Pattern: "/v1/channels/{channel}/mode", Role: RoleAdmin}, Fn: h.handleMode},
		{Endpoint: Endpoint{Method: http.MethodPost, Pattern: "/v1/channels/{channel}/fresh", Role: RoleAdmin}, Fn: h.handleFresh},
		{Endpoint: Endpoint{Method: http.MethodPost, Pattern: "/v1/channels/{channel}/cancel", Role: RoleAdmin}, Fn: h.handleCancel},
	}
	for _, k := range h.kindsOrZero() {
		if r, ok := k.(kind.Router); ok {
			rs = append(rs, r.Routes()...)
		}
	}
	return newRoutes(rs)
}

// kindsOrZero are the host's kinds, or on a zero Host (Endpoints) each
// kind's Zero value, whose Routes name the endpoints.
func (h *Host) kindsOrZero() []kind.Kind {
	if h.kinds != nil {
		return h.kinds
	}
	out := make([]kind.Kind, len(registry))
	for i, r := range registry {
		out[i] = r.Zero
	}
	return out
}

// Endpoints lists the API the router serves, in its table's order.
func Endpoints() []Endpoint {
	var out []Endpoint
	for _, r := range (&Host{}).routeTable() {
		out = append(out, r.Endpoint)
	}
	return out
}

// route dispatches on the escaped path so a channel key may hold any
// printable character ("/" as %2F, "." and ".." as they are) without the
// path cleaning of http.ServeMux: no pattern matches 404; a bad parameter
// 400, before the method is looked at; another method 405 with Allow; a
// caller below the route's role 403; a route that starts work 503 once the
// host stops. The handler reads the caller's role from its request
// (api.RoleOf).
func (h *Host) route(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	found, raw, param := match(h.routes, segs)
	if len(found) == 0 {
		h.fail(w, ErrNotFound)
		return
	}
	value := ""
	if param != "" {
		v, err := url.PathUnescape(raw)
		if err != nil || !params[param].Valid(v) {
			h.fail(w, badRequest(params[param].Reason))
			return
		}
		value = v
	}
	var allow []string
	for _, rt := range found {
		if r.Method != rt.Method {
			allow = append(allow, rt.Method)
			continue
		}
		p := peerFrom(r.Context())
		role := Authorize(h.opts.Access, h.opts.UID, p)
		if rt.Role != RoleNone && role < rt.Role {
			h.log.Warn("API request refused", "uid", p.UID, "gid", p.GID, "pid", p.PID, "path", r.URL.Path[:min(len(r.URL.Path), 64)], "needs", rt.Role.String())
			h.fail(w, ErrForbidden)
			return
		}
		if rt.Admits && !h.accepting() {
			h.fail(w, ErrShuttingDown)
			return
		}
		if err := rt.Fn(w, r.WithContext(api.WithRole(r.Context(), role)), value); err != nil {
			h.fail(w, err)
		}
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	h.fail(w, ErrMethod)
}
