package host

import (
	"net/http"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// The precheck kind's own tests are in pkg/precheckrun; here what the
// host owns of its route.

// precheckExtra gives a precheck the default minute: tests about anything
// but the deadline must not race it.
const precheckExtra = sandboxtest.PrecheckExtra

func newPrecheckRig(t *testing.T, extra string) *rig {
	t.Helper()
	r := newRig(t, extra, func(o *Options) {
		o.Access.ClientUIDs = []int{clientUID}
	})
	t.Cleanup(r.h.Shutdown)
	r.docker.RunFn = sandboxtest.PrecheckRunner(&sandboxtest.PrecheckMCP{})
	return r
}

// TestPrecheckRouteRefusals: the router refuses a peer that is no client
// (403) and another method (405) before the kind sees the request (moved
// from TestPrecheckRefusals, whose other cases are the kind's).
func TestPrecheckRouteRefusals(t *testing.T) {
	r := newPrecheckRig(t, precheckExtra)
	ok := `export default () => ({ wake: false })`
	if code, _ := apiAs(t, r.h, 999, http.MethodPost, "/v1/prechecks", precheck.Request{Channel: "room", Script: ok}); code != http.StatusForbidden {
		t.Errorf("a peer that is no client: %d", code)
	}
	if code, _ := apiAs(t, r.h, clientUID, http.MethodGet, "/v1/prechecks", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", code)
	}
	if n := len(r.docker.Created); n != 0 {
		t.Errorf("%d containers created for refused requests", n)
	}
	r.assertClean(t)
}
