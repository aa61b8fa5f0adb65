package coderun_test

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/api"
	"github.com/roundtable-sandbox/sandbox/pkg/coderun"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/peerauth"
	"github.com/roundtable-sandbox/sandbox/pkg/runs"
	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
)

// Moved from pkg/host (runs*_test.go): the code-run kind is made from its
// Registration over pkg/sandboxtest's kit, its driver streaming a job to a
// fake supervisor, and its routes are served as the host's router serves
// them once it authorized the caller (the admin: this process's uid; any
// other uid: a client). The router's own refusals stay in pkg/host.

const (
	clientUID = 4242
	otherUID  = 4343
)

var must = sandboxtest.Must

// rig is the code-run kind made the way the host makes it.
type rig struct {
	kit     *sandboxtest.Kit
	k       *coderun.Kind
	routes  []api.Route
	cfg     *config.Config
	docker  *sandboxtest.Docker
	units   *sandboxtest.Units
	journal *sandboxtest.Journal
	fleet   *fleet.Fleet // in fleet mode

	chowns sandboxtest.Chowns
}

type chownCall = sandboxtest.ChownCall

func (r *rig) chownCalls() []chownCall { return r.chowns.Calls() }

// lockedBuffer is a log written by the kind's goroutines and read by a
// test.
type lockedBuffer = sandboxtest.LockedBuffer

// The code runs' supervisor fakes are pkg/sandboxtest's, shared with the
// host's tests.
type runDocker = sandboxtest.RunDocker

var (
	supervise    = sandboxtest.Supervise
	bigSupervise = sandboxtest.BigSupervise
)

func newRunRig(t *testing.T, extra string, fn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error)) (*rig, *runDocker) {
	t.Helper()
	return newRunRigWith(t, extra, fn, nil)
}

// newRunRigWith is newRunRig with the kit's options changed by mutate
// (wrap: the runDocker wrapped further, a standby driver say).
func newRunRigWith(t testing.TB, extra string, fn func(ctx context.Context, job wire.Job, stdout io.Writer) (int64, error), mutate func(*sandboxtest.KitOptions)) (*rig, *runDocker) {
	t.Helper()
	rd := &runDocker{StreamFn: fn}
	r := &rig{}
	o := sandboxtest.KitOptions{Chown: r.chowns.Chown, Containers: func(d *sandboxtest.Docker) sandbox.Containers {
		rd.Docker = d
		return rd
	}}
	if mutate != nil {
		mutate(&o)
	}
	kit := sandboxtest.NewKit(t, extra, o)
	made, err := coderun.Registration.New(kit.Deps)
	must(t, err)
	k := made.(*coderun.Kind)
	r.kit, r.k, r.routes, r.cfg, r.docker, r.units, r.journal = kit, k, k.Routes(), kit.Cfg, kit.Docker, kit.Units, kit.Journal
	t.Cleanup(r.shutdown)
	return r, rd
}

// shutdown stops as the host does: its work first, then the kind.
func (r *rig) shutdown() {
	r.kit.Host.Stop()
	r.k.Stop()
}

func (r *rig) assertClean(t *testing.T) { t.Helper(); r.kit.AssertClean(t) }

// roleOf is the role the host's access gives uid in these tests.
func roleOf(uid int) peerauth.Role {
	if uid == os.Getuid() {
		return peerauth.RoleAdmin
	}
	return peerauth.RoleClient
}

// apiAs calls the kind's routes as a peer uid.
func apiAs(t *testing.T, r *rig, uid int, method, path string, body any) (int, []byte) {
	t.Helper()
	return sandboxtest.Call(t, coderun.Registration, r.routes, roleOf(uid), uid, method, path, body)
}

func waitRun(t *testing.T, r *rig, id string) runs.Status {
	t.Helper()
	run, err := r.k.Registry().Get(id)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %s did not finish: %+v", id, run.Status())
	}
	// Its result may come before its cleanup: wait for that too.
	select {
	case <-run.Ended():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %s finished but its cleanup did not end", id)
	}
	return run.Status()
}
