package host

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
)

// An Endpoint is one route of the host API: its method, its path pattern
// (literal segments and at most one parameter, {channel}, {run} or {job})
// and the least role it needs. The router dispatches from this table alone,
// so Endpoints is the API; README's endpoint table is checked against it
// (test/newcomer).
type Endpoint struct {
	Method, Pattern string
	Role            Role
}

// Modes are the values of PUT /v1/channels/{channel}/mode's "mode".
var Modes = []string{ModeOn, ModeOff, ModeRich}

type route struct {
	Endpoint
	segs []string // the pattern split at "/", without the leading one
	// fn gets the path's parameter, unescaped and checked ("" when the
	// pattern has none).
	fn handler
}

// The path parameters and their checks: each is one URL-escaped segment.
var params = map[string]struct {
	valid  func(string) bool
	reason string
}{
	"{channel}": {func(s string) bool { return ids.ValidChannel(s) == nil }, "bad channel: must be 1 to 256 printable characters, URL-path-escaped"},
	"{run}":     {runIDRe.MatchString, "bad run id: 32 lowercase hex characters"},
	"{job}":     {func(s string) bool { return ids.ValidTurnID(s) == nil }, "bad job id: 32 lowercase hex characters"},
}

// routeTable is the API, one entry per method and path.
func (h *Host) routeTable() []route {
	rs := []route{
		{Endpoint: Endpoint{http.MethodGet, "/metrics", RoleClient}, fn: h.handleMetrics},
		{Endpoint: Endpoint{http.MethodGet, "/v1/health", RoleNone}, fn: h.handleHealth},
		{Endpoint: Endpoint{http.MethodGet, "/v1/turns", RoleClient}, fn: h.handleTurns},
		{Endpoint: Endpoint{http.MethodPost, "/v1/prechecks", RoleClient}, fn: h.handlePrecheck},
		{Endpoint: Endpoint{http.MethodGet, "/v1/channels", RoleClient}, fn: h.handleChannels},
		{Endpoint: Endpoint{http.MethodGet, "/v1/channels/{channel}", RoleClient}, fn: h.handleChannel},
		{Endpoint: Endpoint{http.MethodPost, "/v1/channels/{channel}/turns", RoleClient}, fn: h.handleTurn},
		{Endpoint: Endpoint{http.MethodPut, "/v1/channels/{channel}/mode", RoleAdmin}, fn: h.handleMode},
		{Endpoint: Endpoint{http.MethodPost, "/v1/channels/{channel}/fresh", RoleAdmin}, fn: h.handleFresh},
		{Endpoint: Endpoint{http.MethodPost, "/v1/channels/{channel}/cancel", RoleAdmin}, fn: h.handleCancel},
		{Endpoint: Endpoint{http.MethodPost, "/v1/channels/{channel}/delegations", RoleClient}, fn: h.handleDelegate},
		{Endpoint: Endpoint{http.MethodGet, "/v1/channels/{channel}/jobs/events", RoleClient}, fn: h.handleJobEvents},
		{Endpoint: Endpoint{http.MethodGet, "/v1/jobs/{job}", RoleClient}, fn: h.handleJobGet},
		{Endpoint: Endpoint{http.MethodGet, "/v1/runs", RoleClient}, fn: h.handleRunList},
		{Endpoint: Endpoint{http.MethodPost, "/v1/runs", RoleClient}, fn: h.handleRunStart},
		{Endpoint: Endpoint{http.MethodGet, "/v1/runs/{run}", RoleClient}, fn: h.withRun(h.handleRunGet)},
		{Endpoint: Endpoint{http.MethodGet, "/v1/runs/{run}/events", RoleClient}, fn: h.withRun(h.handleRunEvents)},
		{Endpoint: Endpoint{http.MethodPost, "/v1/runs/{run}/cancel", RoleClient}, fn: h.withRun(h.handleRunCancel)},
		{Endpoint: Endpoint{http.MethodPost, "/v1/runs/{run}/approve", RoleAdmin}, fn: h.withRun(h.handleRunApprove)},
		{Endpoint: Endpoint{http.MethodPost, "/v1/runs/{run}/deny", RoleAdmin}, fn: h.withRun(h.handleRunDeny)},
	}
	for i := range rs {
		rs[i].segs = strings.Split(strings.TrimPrefix(rs[i].Pattern, "/"), "/")
	}
	return rs
}

// Endpoints lists the API the router serves, in its table's order.
func Endpoints() []Endpoint {
	var out []Endpoint
	for _, r := range (&Host{}).routeTable() {
		out = append(out, r.Endpoint)
	}
	return out
}

// withRun looks up the run named by the path for its handler: another
// client's run does not exist for the caller (404); an admin sees all.
func (h *Host) withRun(fn func(http.ResponseWriter, *http.Request, *runs.Run) error) handler {
	return func(w http.ResponseWriter, r *http.Request, id string) error {
		run, err := h.runs.Get(id)
		if err != nil {
			return err
		}
		if !h.isAdmin(r) && run.Owner() != peerFrom(r.Context()).UID {
			return ErrNotFound
		}
		return fn(w, r, run)
	}
}

// match returns the table's routes whose pattern has the shape of the
// escaped path segs (same length, the same literals) and the raw segment
// at their parameter's place with the parameter's name ("" for none).
func match(table []route, segs []string) (found []route, raw, param string) {
	for _, rt := range table {
		if len(rt.segs) != len(segs) {
			continue
		}
		ok, p, v := true, "", ""
		for i, s := range rt.segs {
			if _, isParam := params[s]; isParam {
				p, v = s, segs[i]
			} else if s != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			found, raw, param = append(found, rt), v, p
		}
	}
	return found, raw, param
}

// route dispatches on the escaped path so a channel key may hold any
// printable character ("/" as %2F, "." and ".." as they are) without the
// path cleaning of http.ServeMux: no pattern matches 404; a bad parameter
// 400, before the method is looked at; another method 405 with Allow; a
// caller below the route's role 403.
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
		if err != nil || !params[param].valid(v) {
			h.fail(w, badRequest(params[param].reason))
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
		if rt.Role != RoleNone && Authorize(h.opts.Access, h.opts.UID, peerFrom(r.Context())) < rt.Role {
			p := peerFrom(r.Context())
			h.log.Warn("API request refused", "uid", p.UID, "gid", p.GID, "pid", p.PID, "path", r.URL.Path[:min(len(r.URL.Path), 64)], "needs", rt.Role.String())
			h.fail(w, ErrForbidden)
			return
		}
		if err := rt.fn(w, r, value); err != nil {
			h.fail(w, err)
		}
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	h.fail(w, ErrMethod)
}
