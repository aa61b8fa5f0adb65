package host

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/client"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/reaper"
)

type notes struct {
	mu   sync.Mutex
	list []string
}

func (n *notes) add(s string) { n.mu.Lock(); n.list = append(n.list, s); n.mu.Unlock() }
func (n *notes) has(s string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range n.list {
		if x == s {
			return true
		}
	}
	return false
}

// daemonRig builds a Daemon with fakes whose checks pass for this process.
func daemonRig(t *testing.T, extra string) (*Daemon, *fakeDocker, *fakeUnits, *notes, string) {
	t.Helper()
	cfg := testConfig(t, extra)
	env := config.Env{UID: os.Getuid(), GID: os.Getgid(), GOOS: "linux", LookupGroup: func(n string) (int, error) {
		if n == "sandbox-clients" {
			return 4321, nil
		}
		return 0, errors.New("no such group")
	}}
	if env.UID == 0 { // the roots belong to a stand-in service user
		env.UID, env.GID = 4242, 4242
		for _, d := range []string{cfg.RunRoot, cfg.WorkspaceRoot, cfg.PolicyDir, filepath.Dir(cfg.StateFile)} {
			must(t, os.Chown(d, 4242, 4242))
		}
	}
	sock := filepath.Join(filepath.Dir(cfg.RunRoot), "host.sock")
	ln, err := net.Listen("unix", sock)
	must(t, err)
	docker, units, n := newFakeDocker(cfg), newFakeUnits(), &notes{}
	d := &Daemon{
		Config: cfg, Env: env, Listener: ln, Logger: testLogger(t), Notify: n.add,
		ConnectEngine: func(context.Context) (Engine, error) { return docker, nil },
		ConnectUnits:  func(context.Context) (UnitManager, error) { return units, nil },
		Reap:          func(context.Context, Engine, UnitManager) error { n.add("reaped"); return nil },
		Options:       Options{RemoveRetryDelay: time.Millisecond, PeerGroups: func(int) []int { return nil }},
	}
	return d, docker, units, n, sock
}

func TestDaemonInProcessThroughClient(t *testing.T) {
	d, docker, units, n, sock := daemonRig(t, "initialChannels: [\"guild:1\", \"a/../b c\"]\n")
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	waitFor(t, "READY=1", func() bool { return n.has("READY=1") })
	if !n.has("reaped") {
		t.Error("READY before the startup reap")
	}
	c := client.New(sock)
	bg := context.Background()

	hl, err := c.Health(bg)
	if err != nil || hl.Status != "ok" || !hl.Accepting {
		t.Fatalf("Health = %+v, %v", hl, err)
	}
	for _, ch := range []string{"guild:1", "a/../b c"} {
		reply, err := c.RunTurn(bg, ch, apiwire.Speaker{ID: "s1", Name: "Ann", PrincipalID: "p1"}, "hello")
		if err != nil || !reply.OK || reply.Text != "hello" || len(reply.TurnID) != 32 {
			t.Errorf("RunTurn(%q) = %+v, %v", ch, reply, err)
		}
	}
	st, err := c.Channel(bg, "a/../b c")
	if err != nil || st.Mode != "on" || st.Channel != "a/../b c" || len(st.Tag) != 16 {
		t.Errorf("Channel = %+v, %v", st, err)
	}
	if _, err := c.SetMode(bg, "guild:1", "off"); err != nil {
		t.Fatal(err)
	}
	_, err = c.RunTurn(bg, "guild:1", apiwire.Speaker{ID: "s1"}, "hello")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 409 || !errors.Is(err, client.ErrModeOff) || ce.Reason != "channel is not in sandbox mode" {
		t.Errorf("turn in an off channel: %v", err)
	}
	chans, err := c.Channels(bg)
	if err != nil || len(chans) != 2 {
		t.Errorf("Channels = %+v, %v", chans, err)
	}
	if st, err := c.Fresh(bg, "a/../b c"); err != nil || !st.PendingFresh {
		t.Errorf("Fresh = %+v, %v", st, err)
	}
	if r, err := c.Cancel(bg, "a/../b c"); err != nil || r.Cancelled {
		t.Errorf("Cancel of an idle channel = %+v, %v", r, err)
	}
	if _, err := c.RunTurn(bg, "a/../b c", apiwire.Speaker{ID: "s1"}, strings.Repeat("x", 32_001)); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("oversized text: %v", err)
	}

	// A turn that hangs is cancelled by shutdown: 503, container removed,
	// units stopped, STOPPING=1 sent, Serve returns.
	started := make(chan struct{})
	docker.Mu.Lock()
	docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		close(started)
		return blockRun(ctx, spec, stdin)
	}
	docker.Mu.Unlock()
	turnErr := make(chan error, 1)
	go func() {
		_, err := c.RunTurn(bg, "a/../b c", apiwire.Speaker{ID: "s1"}, "hang")
		turnErr <- err
	}()
	<-started
	turns, err := c.Turns(bg)
	if err != nil || len(turns) != 1 || turns[0].ChannelTag == "" || turns[0].DeadlineUnix < time.Now().Unix() {
		t.Errorf("Turns = %+v, %v", turns, err)
	}
	stop()
	if err := <-turnErr; !errors.Is(err, client.ErrShuttingDown) {
		t.Errorf("turn during shutdown: %v, want 503", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v", err)
	}
	if !n.has("STOPPING=1") || !units.Closed {
		t.Errorf("notes %v, units closed %v", n.list, units.Closed)
	}
	if docker.LiveCount() != 0 || units.ActiveCount() != 0 {
		t.Errorf("left behind: %d containers, %d units", docker.LiveCount(), units.ActiveCount())
	}
	if ds := docker.Created; len(ds) != 3 {
		t.Errorf("containers created = %d, want 3", len(ds))
	}
}

func TestDaemonLoadsMissingImageFromArchive(t *testing.T) {
	d, docker, _, n, _ := daemonRig(t, "")
	archive := filepath.Join(t.TempDir(), "worker-image.tar")
	os.WriteFile(archive, []byte("tar"), 0o644)
	d.Config.ImageArchive = archive
	docker.Image = false
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	waitFor(t, "READY=1", func() bool { return n.has("READY=1") })
	stop()
	must(t, <-served)
	if len(docker.Loaded) != 1 || docker.Loaded[0] != archive {
		t.Errorf("loaded = %v", docker.Loaded)
	}
}

func TestDaemonStartupRefusals(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(d *Daemon, docker *fakeDocker)
		want   string
	}{
		{"image missing, no archive", func(d *Daemon, f *fakeDocker) {
			f.Image = false
			d.Config.ImageArchive = "/nonexistent/worker-image.tar"
		}, "docker load -i"},
		{"docker down", func(d *Daemon, f *fakeDocker) { f.PingErr = errors.New("connection refused") }, "docker ping"},
		{"root", func(d *Daemon, f *fakeDocker) { d.Env.UID = 0 }, "refusing to run as root"},
		{"unknown group", func(d *Daemon, f *fakeDocker) { d.Config.API.Clients.Groups = []string{"ghosts"} }, `api.clients.groups[0]: unknown group "ghosts"`},
		{"reap fails", func(d *Daemon, f *fakeDocker) {
			d.Reap = func(context.Context, Engine, UnitManager) error { return errors.New("boom") }
		}, "startup reap"},
		{"policy dir group", func(d *Daemon, f *fakeDocker) { d.BrokerGID = 4343 }, "chmod 2750"},
		{"lock held", func(d *Daemon, f *fakeDocker) {
			l, err := AcquireLock(d.Config.LockFile)
			if err == nil {
				t.Cleanup(func() { l.Release() })
			}
		}, "stop the other sandbox-host first"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, docker, _, n, _ := daemonRig(t, "")
			tt.mutate(d, docker)
			err := d.Serve(context.Background())
			if !errors.Is(err, ErrStartup) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Serve = %v, want ErrStartup containing %q", err, tt.want)
			}
			if n.has("READY=1") {
				t.Error("READY=1 sent by a host that refused to start")
			}
		})
	}
}

type hostUp struct{}

func (hostUp) HostActive(context.Context) (bool, error) { return true, nil }

// The standalone reaper's view of GET /v1/turns matches what the host serves.
func TestReaperReadsActiveTurns(t *testing.T) {
	r := newRig(t, "", nil)
	must(t, r.h.state.SetMode("c", ModeOn))
	started := make(chan struct{})
	r.docker.RunFn = func(ctx context.Context, spec ContainerSpec, stdin []byte) (RunResult, error) {
		close(started)
		return blockRun(ctx, spec, stdin)
	}
	hc, sock := serve(t, r)
	go func() {
		req, _ := http.NewRequest("POST", "http://host/v1/channels/c/turns", strings.NewReader(`{"speaker":{"id":"s"},"text":"x"}`))
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	active, known, err := reaper.HostTurns(hostUp{}, sock)(context.Background())
	want := r.h.status("c").RunningTurn
	if err != nil || !known || !active[want] || len(active) != 1 {
		t.Errorf("reaper sees %v known=%v err=%v, want {%s}", active, known, err, want)
	}
}
