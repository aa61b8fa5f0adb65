package host

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
)

// The path parameters of the probes below, escaped and as the handler
// must get them.
var probeParams = map[string][2]string{
	"{channel}": {"guild%2F1234", "guild/1234"},
	"{run}":     {strings.Repeat("ab", 16), strings.Repeat("ab", 16)},
	"{job}":     {strings.Repeat("cd", 16), strings.Repeat("cd", 16)},
	"{session}": {strings.Repeat("ef", 16), strings.Repeat("ef", 16)},
}

func probePath(pattern string) (path, param string) {
	for name, v := range probeParams {
		if strings.Contains(pattern, name) {
			return strings.Replace(pattern, name, v[0], 1), v[1]
		}
	}
	return pattern, ""
}

// routeRig is a host whose table's handlers only record what they got.
func routeRig(t *testing.T) (h *Host, got *[]string) {
	t.Helper()
	r := newRig(t, "", func(o *Options) {
		o.Access = config.ResolvedAccess{ClientUIDs: []int{clientUID}, Guests: o.Config.Guests}
	})
	calls := []string{}
	for i := range r.h.routes {
		ep := r.h.routes[i].Endpoint
		r.h.routes[i].Fn = func(w http.ResponseWriter, _ *http.Request, param string) error {
			calls = append(calls, ep.Method+" "+ep.Pattern+" "+param)
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	return r.h, &calls
}

func uidOf(h *Host, role Role) int {
	switch role {
	case RoleAdmin:
		return h.opts.UID
	case RoleClient:
		return clientUID
	}
	return 777 // neither a client nor an admin
}

// TestRouterServesItsTable: every endpoint reaches its own handler with
// its parameter unescaped, at its role and not below it; each path answers
// another method 405 naming the methods it has.
func TestRouterServesItsTable(t *testing.T) {
	h, got := routeRig(t)
	for _, ep := range Endpoints() {
		path, param := probePath(ep.Pattern)
		*got = (*got)[:0]
		if code, body := apiAs(t, h, uidOf(h, ep.Role), ep.Method, path, nil); code != http.StatusNoContent {
			t.Errorf("%s %s as %s: %d %s, want its handler", ep.Method, path, ep.Role, code, body)
		}
		if want := []string{ep.Method + " " + ep.Pattern + " " + param}; !slices.Equal(*got, want) {
			t.Errorf("%s %s called %q, want %q", ep.Method, path, *got, want)
		}
		if ep.Role > RoleNone {
			if code, _ := apiAs(t, h, uidOf(h, ep.Role-1), ep.Method, path, nil); code != http.StatusForbidden {
				t.Errorf("%s %s as %s: %d, want 403", ep.Method, path, ep.Role-1, code)
			}
		}
	}
	allow := map[string][]string{}
	for _, ep := range Endpoints() {
		allow[ep.Pattern] = append(allow[ep.Pattern], ep.Method)
	}
	for pattern, methods := range allow {
		path, _ := probePath(pattern)
		req := httptest.NewRequest(http.MethodDelete, path, nil)
		req = req.WithContext(context.WithValue(req.Context(), peerKey{}, Peer{Known: true, UID: h.opts.UID}))
		w := httptest.NewRecorder()
		h.Handler().ServeHTTP(w, req)
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != strings.Join(methods, ", ") {
			t.Errorf("DELETE %s: %d Allow %q, want 405 Allow %q", path, w.Code, w.Header().Get("Allow"), strings.Join(methods, ", "))
		}
	}
}

// TestRouterRefusals: what matches no pattern is 404, a bad parameter 400
// naming it (before the method is looked at), and no handler runs.
func TestRouterRefusals(t *testing.T) {
	h, got := routeRig(t)
	id := strings.Repeat("ab", 16)
	tests := []struct {
		method, path string
		status       int
		reason       string
	}{
		{"GET", "/", 404, "not found"},
		{"GET", "/v1", 404, "not found"},
		{"GET", "/v1/health/", 404, "not found"},
		{"GET", "/v1/channels/c/explode", 404, "not found"},
		{"GET", "/v1/channels/a%2F..%2Fb/extra/more", 404, "not found"},
		{"GET", "/v1/runs/" + id + "/explode", 404, "not found"},
		{"GET", "/v1/jobs/" + id + "/events", 404, "not found"},
		{"GET", "/v1/channels/a%0Ab", 400, "bad channel"},
		{"POST", "/v1/channels//turns", 400, "bad channel"},
		{"DELETE", "/v1/channels/a%0Ab/mode", 400, "bad channel"},
		{"GET", "/v1/channels/a%0Ab/jobs/events", 400, "bad channel"},
		{"GET", "/v1/runs/ABABABABABABABABABABABABABABABAB", 400, "bad run id"},
		{"POST", "/v1/runs/x/approve", 400, "bad run id"},
		{"GET", "/v1/jobs/x", 400, "bad job id"},
	}
	for _, tt := range tests {
		code, body := apiAs(t, h, h.opts.UID, tt.method, tt.path, nil)
		var e apiwire.ErrorResponse
		_ = json.Unmarshal(body, &e)
		if code != tt.status || !strings.Contains(e.Error, tt.reason) {
			t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.path, code, e.Error, tt.status, tt.reason)
		}
	}
	if len(*got) != 0 {
		t.Errorf("refused requests reached handlers: %q", *got)
	}
}

// TestRouteTableShapes: no two patterns of one shape name different
// parameters (the router checks one parameter before the method), and no
// method and pattern is listed twice.
func TestRouteTableShapes(t *testing.T) {
	seen := map[string]string{}
	dup := map[string]bool{}
	for _, rt := range (&Host{}).routeTable() {
		shape := make([]string, len(rt.segs))
		param := ""
		for i, s := range rt.segs {
			if _, ok := params[s]; ok {
				shape[i], param = "*", s
			} else {
				shape[i] = s
			}
		}
		key := strings.Join(shape, "/")
		if p, ok := seen[key]; ok && p != param {
			t.Errorf("%s: parameter %s where another pattern of its shape has %s", rt.Pattern, param, p)
		}
		seen[key] = param
		if dup[rt.Method+" "+rt.Pattern] {
			t.Errorf("%s %s is listed twice", rt.Method, rt.Pattern)
		}
		dup[rt.Method+" "+rt.Pattern] = true
		if strings.Count(rt.Pattern, "{") > 1 {
			t.Errorf("%s has more than one parameter", rt.Pattern)
		}
	}
}
