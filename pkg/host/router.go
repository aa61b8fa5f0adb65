package host

import (
	"strings"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
)

// An Endpoint is one route of the host API: its method, its path pattern
// (literal segments and at most one parameter: {channel} or a kind's, such
// as {run} or {job})
// and the least role it needs. The router dispatches from the route table
// alone (the host's routes and each kind's), so Endpoints is the API;
// docs/api.md's endpoint table is checked against it (test/newcomer).
type Endpoint = api.Endpoint

// route is a route of the table with its pattern split at "/", without
// the leading one.
type route struct {
	api.Route
	segs []string
}

// newRoutes splits each route's pattern for match.
func newRoutes(rs []api.Route) []route {
	out := make([]route, len(rs))
	for i, r := range rs {
		out[i] = route{Route: r, segs: strings.Split(strings.TrimPrefix(r.Pattern, "/"), "/")}
	}
	return out
}

// params are the path parameters and their checks, each one URL-escaped
// segment: the host's {channel} and every kind's.
var params = func() map[string]api.Param {
	m := map[string]api.Param{
		"{channel}": {Name: "{channel}", Valid: func(s string) bool { return ids.ValidChannel(s) == nil }, Reason: "bad channel: must be 1 to 256 printable characters, URL-path-escaped"},
	}
	for _, r := range registry {
		for _, p := range r.Params {
			m[p.Name] = p
		}
	}
	return m
}()

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
