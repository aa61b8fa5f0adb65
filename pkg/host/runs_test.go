package host

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// The code runs' supervisor fakes are pkg/sandboxtest's, shared with
// pkg/coderun's tests.
type runDocker = sandboxtest.RunDocker

var (
	supervise    = sandboxtest.Supervise
	bigSupervise = sandboxtest.BigSupervise
)

func newRunRig(t *testing.T, extra string, fn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)) (*rig, *runDocker) {
	t.Helper()
	rd := &runDocker{StreamFn: fn}
	r := newRig(t, extra, func(o *Options) {
		rd.Docker = o.Containers.(*fakeDocker)
		o.Containers = rd
		o.Access = config.ResolvedAccess{ClientUIDs: []int{clientUID, otherUID}, Guests: o.Config.Guests}
	})
	t.Cleanup(r.h.Shutdown)
	return r, rd
}

// apiAs calls the host's handler as a peer uid.
func apiAs(t *testing.T, h *Host, uid int, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	}
	req := httptest.NewRequest(method, path, rd)
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, Peer{Known: true, UID: uid, GID: uid}))
	w := httptest.NewRecorder()
	h.Handler().ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

// Peers of these tests: the config's default clients are the
// sandbox-clients group, which a test peer is not in; the host's own uid
// is an admin, so admin calls use it and client calls an api.clients uid.
const (
	clientUID = 4242
	otherUID  = 4343
)

const runsExtra = `
egress:
  allow: ["127.0.0.1:8080"]
runs:
  projects:
    - name: demo
      path: /srv/demo
`

// The code-run kind's own tests are pkg/coderun's (runs_test.go there);
// what stays here is the host's: its router's role refusals.

// TestRunRoutesRefuseByRole: the host's router refuses a stranger's run
// and a client's approval (even of its own run) with 403, creating nothing.
func TestRunRoutesRefuseByRole(t *testing.T) {
	r, _ := newRunRig(t, runsExtra, supervise(0))
	if code, _ := apiAs(t, r.h, 5555, "POST", "/v1/runs", runs.Params{Command: "x"}); code != http.StatusForbidden {
		t.Errorf("a stranger: %d, want 403", code)
	}
	st, err := r.h.codeRuns().Start(runs.Params{Command: "curl http://127.0.0.1:8080/", Network: true}, clientUID)
	must(t, err)
	// A client cannot approve, not even its own run.
	if code, _ := apiAs(t, r.h, clientUID, "POST", "/v1/runs/"+st.ID+"/approve", nil); code != http.StatusForbidden {
		t.Errorf("client approve: %d, want 403", code)
	}
	if n := len(r.docker.Created); n != 0 {
		t.Errorf("%d containers created for refused calls", n)
	}
}
