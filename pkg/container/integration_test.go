package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/roundtable-sandbox/sandbox/pkg/container/testimage"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/protocol"
)

// Integration tests run only with SANDBOX_IT_DOCKER=unix:///path/docker.sock
// (test/integration.sh starts a private dockerd and sets it).
const itImage = "roundtable-sandbox-it:latest"

// The containers' uid:gid when the tests run as root (they chown the
// workspace to it); otherwise the test's own ids.
const itID = 4242

var (
	imageOnce sync.Once
	imageErr  error
	// runSuffix keeps each run's installations apart from a crashed earlier run's leftovers.
	runSuffix = strconv.FormatInt(time.Now().UnixNano()%(36*36*36*36*36), 36)
)

// itInst is the test's installation id for this run.
func itInst(name string) string { return name + "-" + runSuffix }

func itDriver(t testing.TB) *Driver {
	t.Helper()
	host := os.Getenv("SANDBOX_IT_DOCKER")
	if host == "" {
		t.Skip("integration test skipped: set SANDBOX_IT_DOCKER=unix:///path/docker.sock to run it against a real dockerd")
	}
	d, err := New(host)
	if err != nil {
		t.Fatalf("New(%q): %v", host, err)
	}
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	if err := d.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// On a daemon without journald (the development dockerd), containers
	// with the journald driver cannot start: SANDBOX_IT_LOG_DRIVER=none lets
	// the Run tests work there. Create-only tests always use journald.
	d.logDriver = os.Getenv("SANDBOX_IT_LOG_DRIVER")
	imageOnce.Do(func() { imageErr = loadTestImage(d) })
	if imageErr != nil {
		t.Fatalf("test image: %v", imageErr)
	}
	return d
}

// loadTestImage builds testdata/itworker as a static binary, wraps it in a
// FROM scratch docker-archive and loads it through LoadImage.
func loadTestImage(d *Driver) error {
	dir, err := os.MkdirTemp("", "sandbox-it-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "itworker")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/itworker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New("go build itworker: " + err.Error() + ": " + string(out))
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	archive := filepath.Join(dir, "image.tar")
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	if err := testimage.Write(f, itImage, data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return d.LoadImage(context.Background(), archive)
}

// itIDs are the containers' ids: never the test process's own (the driver
// refuses those, as it refuses the host's), so these tests need root.
func itIDs() (int, int) { return itID, itID }

// itSpec returns a valid spec with fresh workspace and turn directories.
func itSpec(t testing.TB, installation string) Spec {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("containers never run as the test process's own uid: run the Docker integration tests as root (make integration)")
	}
	uid, gid := itIDs()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	turnDir := filepath.Join(root, "turn")
	for _, dir := range []string{ws, turnDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	// t.TempDir may sit under a symlinked /tmp: the driver wants real paths.
	ws, _ = filepath.EvalSymlinks(ws)
	turnDir, _ = filepath.EvalSymlinks(turnDir)
	turn := ids.NewTurnID()
	channel := "it:" + t.Name()
	name, err := ids.ContainerName(channel, turn)
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		Name: name, Image: itImage, UID: uid, GID: gid,
		WorkspaceDir: ws, TurnDir: turnDir,
		MemoryMB: 128, CPUs: 0.5, Pids: 32, TmpfsMB: 8,
		LogTag: ids.LogTag(channel),
		Labels: map[string]string{
			layout.LabelInstallation: itInst(installation),
			layout.LabelTurn:         turn,
			layout.LabelChannel:      ids.ChannelTag(channel),
			layout.LabelDeadline:     strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10),
		},
	}
	if rt := os.Getenv("SANDBOX_IT_RUNTIME"); rt != "" {
		spec.Runtime = rt
	}
	return spec
}

// itRemove removes a container for a test that is about something else.
// Each Remove is bounded by CleanupTimeout, and dockerd can take longer
// while it goes on removing (rehearsals: 5 s passed at load averages of 4
// and 9, and a second call was told "removal already in progress"). The
// product leaves such a container to the reaper's next pass; here, after
// a second call, the test waits for dockerd's own word that the container
// is gone (ContainerWait, WaitConditionRemoved, up to a minute).
// TestIntegrationRemoveRunning keeps testing Remove's bound itself.
func itRemove(t *testing.T, d *Driver, id string) error {
	t.Helper()
	err := d.Remove(context.Background(), id)
	if err == nil {
		return nil
	}
	t.Logf("Remove(%s): %v; removing again", id, err)
	if err = d.Remove(context.Background(), id); err == nil {
		return nil
	}
	t.Logf("Remove(%s): %v; waiting for dockerd to finish it", id, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	okC, errC := d.cli.ContainerWait(ctx, id, dockercontainer.WaitConditionRemoved)
	select {
	case <-okC:
		return nil
	case werr := <-errC:
		if cerrdefs.IsNotFound(werr) {
			return nil
		}
		return fmt.Errorf("%v; then waiting for its removal: %w", err, werr)
	}
}

// itCreate creates spec and removes the container when the test ends.
func itCreate(t *testing.T, d *Driver, spec Spec) string {
	t.Helper()
	t.Cleanup(func() {
		if err := itRemove(t, d, spec.Name); err != nil {
			t.Errorf("cleanup Remove(%s): %v", spec.Name, err)
		}
	})
	id, err := d.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return id
}

func TestIntegrationCreateMatchesDesign(t *testing.T) {
	d := itDriver(t)
	d.logDriver = "" // the production configuration, whatever the daemon supports
	spec := itSpec(t, "it-design")
	id := itCreate(t, d, spec)
	c, err := d.cli.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	hc, cfg := c.HostConfig, c.Config
	uid, gid := itIDs()
	checks := []struct {
		field     string
		got, want any
	}{
		{"Name", c.Name, "/" + spec.Name},
		{"Image", cfg.Image, itImage},
		{"NetworkMode", string(hc.NetworkMode), "none"},
		{"ReadonlyRootfs", hc.ReadonlyRootfs, true},
		{"Privileged", hc.Privileged, false},
		{"CapDrop", strings.Join(hc.CapDrop, ","), "ALL"},
		{"CapAdd", len(hc.CapAdd), 0},
		{"SecurityOpt", strings.Join(hc.SecurityOpt, ","), "no-new-privileges"},
		{"User", cfg.User, strconv.Itoa(uid) + ":" + strconv.Itoa(gid)},
		{"Memory", hc.Memory, int64(spec.MemoryMB) << 20},
		{"MemorySwap", hc.MemorySwap, int64(spec.MemoryMB) << 20},
		{"NanoCPUs", hc.NanoCPUs, int64(500_000_000)},
		{"PidsLimit", *hc.PidsLimit, spec.Pids},
		{"Tmpfs", hc.Tmpfs["/tmp"], "size=8m,mode=1777,nosuid,nodev,noexec"},
		{"Tmpfs count", len(hc.Tmpfs), 1},
		{"Binds", len(hc.Binds), 0},
		{"Mounts", len(hc.Mounts), 2},
		{"VolumesFrom", len(hc.VolumesFrom), 0},
		{"LogConfig.Type", hc.LogConfig.Type, "none"},
		{"LogConfig opts", len(hc.LogConfig.Config), 0},
		{"AutoRemove", hc.AutoRemove, false},
		{"Env", strings.Join(cfg.Env, " "), "SANDBOX_BROKER_SOCKET=/run/broker/broker.sock SANDBOX_API_KEY=sandbox-dummy-key"},
		{"OpenStdin", cfg.OpenStdin, true},
		{"StdinOnce", cfg.StdinOnce, true},
		{"AttachStdin", cfg.AttachStdin, true},
		{"AttachStdout", cfg.AttachStdout, true},
		{"AttachStderr", cfg.AttachStderr, true},
		{"IpcMode", string(hc.IpcMode), "none"},
		{"Ulimits", fmt.Sprint(hc.Ulimits), fmt.Sprintf("[nofile=%d:%d nproc=%d:%d]", MaxOpenFiles, MaxOpenFiles, spec.Pids, spec.Pids)},
		{"Tty", cfg.Tty, false},
		{"WorkingDir", cfg.WorkingDir, "/workspace"},
		{"Runtime", hc.Runtime == spec.Runtime || (spec.Runtime == "" && hc.Runtime == "runc"), true},
		{"RestartPolicy", string(hc.RestartPolicy.Name), ""},
		{"PortBindings", len(hc.PortBindings), 0},
		{"Devices", len(hc.Devices), 0},
	}
	for _, want := range []string{layout.LabelInstallation, layout.LabelTurn, layout.LabelChannel, layout.LabelDeadline} {
		checks = append(checks, struct {
			field     string
			got, want any
		}{"Labels[" + want + "]", cfg.Labels[want], spec.Labels[want]})
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	// The two binds, field by field, in the daemon's own view (HostConfig)
	// and as mounted (MountPoint).
	wantMounts := map[string]struct {
		src string
		ro  bool
	}{"/workspace": {spec.WorkspaceDir, false}, "/run/broker": {spec.TurnDir, true}}
	for _, m := range hc.Mounts {
		w, ok := wantMounts[m.Target]
		if !ok {
			t.Errorf("unexpected mount target %s", m.Target)
			continue
		}
		if m.Type != mount.TypeBind || m.Source != w.src || m.ReadOnly != w.ro || m.BindOptions == nil || m.BindOptions.Propagation != mount.PropagationRPrivate {
			t.Errorf("mount %s = %+v (bind options %+v), want bind from %s ro=%v rprivate", m.Target, m, m.BindOptions, w.src, w.ro)
		}
	}
	for _, mp := range c.Mounts {
		w, ok := wantMounts[mp.Destination]
		if !ok {
			t.Errorf("unexpected mount point %s", mp.Destination)
			continue
		}
		if string(mp.Type) != "bind" || mp.Source != w.src || mp.RW == w.ro || string(mp.Propagation) != "rprivate" {
			t.Errorf("mount point %s = %+v, want bind %s rw=%v rprivate", mp.Destination, mp, w.src, !w.ro)
		}
	}
	if len(c.Mounts) != 2 {
		t.Errorf("mount points = %d, want 2", len(c.Mounts))
	}
}

// TestIntegrationInsideView checks the confinement from inside a running
// container: what a hostile worker would see.
func TestIntegrationInsideView(t *testing.T) {
	d := itDriver(t)
	spec := itSpec(t, "it-inside")
	id := itCreate(t, d, spec)
	res, err := d.Run(context.Background(), id, []byte("probe\n"), 64<<10)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var got struct {
		UID, GID                           int
		Env                                []string
		Cwd                                string
		RootWritable, TmpWritable          bool
		WorkspaceWritable, BrokerWritable  bool
		CapEff, CapBnd, NoNewPrivs, Groups string
		Interfaces                         []string
		DockerSocket                       bool
	}
	if err := json.Unmarshal(res.Stdout, &got); err != nil {
		t.Fatalf("probe output %q: %v", res.Stdout, err)
	}
	uid, gid := itIDs()
	checks := []struct {
		field     string
		got, want any
	}{
		{"uid", got.UID, uid},
		{"gid", got.GID, gid},
		// Docker itself adds PATH, HOSTNAME and HOME; nothing of the host's.
		{"env", strings.Join(slices.Sorted(slices.Values(got.Env)), " "), "HOME=/ HOSTNAME=" + id[:12] + " PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SANDBOX_API_KEY=sandbox-dummy-key SANDBOX_BROKER_SOCKET=/run/broker/broker.sock"},
		{"cwd", got.Cwd, "/workspace"},
		{"root writable", got.RootWritable, false},
		{"/tmp writable", got.TmpWritable, true},
		{"/workspace writable", got.WorkspaceWritable, true},
		{"/run/broker writable", got.BrokerWritable, false},
		{"CapEff", got.CapEff, "0000000000000000"},
		{"CapBnd", got.CapBnd, "0000000000000000"},
		{"NoNewPrivs", got.NoNewPrivs, "1"},
		{"interfaces", strings.Join(got.Interfaces, ","), "lo"},
		{"docker socket", got.DockerSocket, false},
		{"exit code", res.ExitCode, int64(0)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("inside: %s = %v, want %v", c.field, c.got, c.want)
		}
	}
}

func TestIntegrationRunRoundTrip(t *testing.T) {
	d := itDriver(t)
	var phases []string
	d.Observe = func(phase string, took time.Duration) {
		if took < 0 {
			t.Errorf("phase %s took %v", phase, took)
		}
		phases = append(phases, phase)
	}
	tests := []struct {
		name      string
		stdin     []byte
		max       int64
		wantOut   []byte
		wantExit  int64
		truncated bool
	}{
		{"echo", []byte("hello\nworld {\"ok\":true}"), 1 << 10, []byte("hello\nworld {\"ok\":true}"), 0, false},
		{"empty stdin", nil, 1 << 10, nil, 0, false},
		{"large stdin", bytes.Repeat([]byte("a"), MaxStdin), MaxStdin, bytes.Repeat([]byte("a"), MaxStdin), 0, false},
		{"exit status", []byte("exit 7\n"), 1 << 10, nil, 7, false},
		{"exactly at bound", []byte("12345678"), 8, []byte("12345678"), 0, false},
		{"over bound", []byte("123456789"), 8, []byte("12345678"), 137, true},
		{"flood", []byte("flood\n"), 64 << 10, bytes.Repeat([]byte("x"), 64<<10), 137, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			phases = nil
			id := itCreate(t, d, itSpec(t, "it-run"))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := d.Run(ctx, id, tt.stdin, tt.max)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !bytes.Equal(res.Stdout, tt.wantOut) {
				t.Errorf("stdout = %d bytes %.40q, want %d bytes %.40q", len(res.Stdout), res.Stdout, len(tt.wantOut), tt.wantOut)
			}
			if res.Truncated != tt.truncated {
				t.Errorf("Truncated = %v, want %v", res.Truncated, tt.truncated)
			}
			// A killed "over bound" worker may also have exited by itself first.
			if res.ExitCode != tt.wantExit && !(tt.truncated && res.ExitCode == 0) {
				t.Errorf("ExitCode = %d, want %d", res.ExitCode, tt.wantExit)
			}
			if want := []string{PhaseAttach, PhaseStart, PhaseRun, PhaseWait}; !slices.Equal(phases, want) {
				t.Errorf("phases = %v, want %v", phases, want)
			}
		})
	}
}

func TestIntegrationRunRefusesOversizedStdin(t *testing.T) {
	d := itDriver(t)
	id := itCreate(t, d, itSpec(t, "it-run"))
	_, err := d.Run(context.Background(), id, make([]byte, MaxStdin+1), 1024)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Run(stdin %d bytes) = %v, want ErrTooLarge", MaxStdin+1, err)
	}
	c, err := d.cli.ContainerInspect(context.Background(), id)
	if err != nil || c.State.Status != "created" {
		t.Errorf("refused Run touched the container: state %v, %v", c.State, err)
	}
}

// A PID 1 that ignores SIGTERM and never exits: the deadline ends Run with
// SIGKILL, and Kill + Remove leave nothing behind.
func TestIntegrationDeadlineKills(t *testing.T) {
	d := itDriver(t)
	spec := itSpec(t, "it-hang")
	id := itCreate(t, d, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := d.Run(ctx, id, []byte("hang\n"), 1024)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if took > 2*time.Second+CleanupTimeout {
		t.Errorf("Run returned after %v, want within deadline + %v", took, CleanupTimeout)
	}
	c, err := d.cli.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if c.State.Running {
		t.Errorf("container still running after Run's deadline: %+v", c.State)
	}
	cleanup := context.Background()
	if err := d.Kill(cleanup, id); err != nil {
		t.Errorf("Kill of a stopped container = %v, want nil", err)
	}
	if err := d.Remove(cleanup, id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := d.cli.ContainerInspect(cleanup, id); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect after Remove = %v, want not found", err)
	}
}

// Remove also ends a running container (force) without a Kill first.
func TestIntegrationRemoveRunning(t *testing.T) {
	d := itDriver(t)
	id := itCreate(t, d, itSpec(t, "it-hang"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := d.Run(ctx, id, []byte("hang\n"), 1024)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := d.cli.ContainerInspect(context.Background(), id)
		if err == nil && c.State.Running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("container never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Remove(context.Background(), id); err != nil {
		t.Fatalf("Remove of a running container: %v", err)
	}
	if _, err := d.cli.ContainerInspect(context.Background(), id); !cerrdefs.IsNotFound(err) {
		t.Errorf("inspect after Remove = %v, want not found", err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Log("Run ended without error after the container was removed (exit observed)")
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return after its container was removed")
	}
	cancel()
}

func TestIntegrationMissing(t *testing.T) {
	d := itDriver(t)
	ctx := context.Background()
	missing := ids.ContainerPrefix + "0000000000000000-00000000"
	if err := d.Remove(ctx, missing); err != nil {
		t.Errorf("Remove(missing) = %v, want nil", err)
	}
	if err := d.Kill(ctx, missing); err != nil {
		t.Errorf("Kill(missing) = %v, want nil", err)
	}
	if ok, err := d.ImagePresent(ctx, itImage); !ok || err != nil {
		t.Errorf("ImagePresent(%s) = %v, %v; want true", itImage, ok, err)
	}
	if ok, err := d.ImagePresent(ctx, "roundtable-sandbox-absent:none"); ok || err != nil {
		t.Errorf("ImagePresent(absent) = %v, %v; want false, nil", ok, err)
	}
}

func TestIntegrationCreateRefusals(t *testing.T) {
	d := itDriver(t)
	ctx := context.Background()

	noImage := itSpec(t, "it-refuse")
	noImage.Image = "roundtable-sandbox-absent:none"
	if _, err := d.Create(ctx, noImage); !errors.Is(err, ErrImageMissing) {
		t.Errorf("Create(absent image) = %v, want ErrImageMissing (never pulled)", err)
	}

	dup := itSpec(t, "it-refuse")
	itCreate(t, d, dup)
	if _, err := d.Create(ctx, dup); !errors.Is(err, ErrConflict) {
		t.Errorf("Create(same name twice) = %v, want ErrConflict", err)
	}

	root := itSpec(t, "it-refuse")
	root.UID = 0
	if _, err := d.Create(ctx, root); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Create(uid 0) = %v, want ErrInvalidSpec", err)
	}
	list, err := d.List(ctx, itInst("it-refuse"))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != dup.Name {
		t.Errorf("containers after refusals = %+v, want only %s", list, dup.Name)
	}
}

func TestIntegrationList(t *testing.T) {
	d := itDriver(t)
	ctx := context.Background()
	a1, a2, b := itSpec(t, "it-list-a"), itSpec(t, "it-list-a"), itSpec(t, "it-list-b")
	for _, s := range []Spec{a1, a2, b} {
		itCreate(t, d, s)
	}
	got, err := d.List(ctx, itInst("it-list-a"))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
		if c.State != "created" || c.Labels[layout.LabelInstallation] != itInst("it-list-a") || c.Created.IsZero() || time.Since(c.Created) > time.Minute {
			t.Errorf("listed %+v: want state created, installation it-list-a, recent Created", c)
		}
	}
	slices.Sort(names)
	want := []string{a1.Name, a2.Name}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("List(it-list-a) names = %v, want %v", names, want)
	}
	if got, err := d.List(ctx, itInst("it-list-none")); err != nil || len(got) != 0 {
		t.Errorf("List(it-list-none) = %v, %v; want empty", got, err)
	}
}

// With SANDBOX_IT_WORKER_IMAGE set (test/integration.sh loads the real
// worker image), the worker answers a malformed turn with one reply object.
func TestIntegrationWorkerImage(t *testing.T) {
	image := os.Getenv("SANDBOX_IT_WORKER_IMAGE")
	if image == "" {
		t.Skip("worker image test skipped: set SANDBOX_IT_WORKER_IMAGE (and SANDBOX_IT_DOCKER) to run it")
	}
	d := itDriver(t)
	spec := itSpec(t, "it-worker")
	spec.Image = image
	id := itCreate(t, d, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := d.Run(ctx, id, []byte(`{"not":"a turn"}`), protocol.MaxReplyBytes)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	reply, err := protocol.DecodeReply(res.Stdout)
	if err != nil {
		t.Fatalf("worker stdout %q is not a reply: %v", res.Stdout, err)
	}
	if reply.OK {
		t.Errorf("reply to a malformed turn = %+v, want ok=false", reply)
	}
}

// The container has no log driver: its stderr reaches the caller's writer
// through RunLogged, and nothing else (the stand-in journal of
// test/integration.sh, when there, receives nothing from Docker).
func TestIntegrationStderrThroughRunLogged(t *testing.T) {
	d := itDriver(t)
	d.logDriver = ""
	spec := itSpec(t, "it-journal")
	id := itCreate(t, d, spec)
	var stderr bytes.Buffer
	res, err := d.RunLogged(context.Background(), id, []byte("exit 3\n"), 1024, nil, &stderr)
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("RunLogged = %+v, %v; want exit 3", res, err)
	}
	if !strings.Contains(stderr.String(), "exiting on request") {
		t.Errorf("stderr through RunLogged = %q, want the worker's log line", stderr.String())
	}
	if journal := os.Getenv("SANDBOX_IT_JOURNAL"); journal != "" {
		time.Sleep(500 * time.Millisecond)
		if data, _ := os.ReadFile(journal); bytes.Contains(data, []byte(spec.Name)) {
			t.Errorf("Docker sent the container's output to journald: %s", journal)
		}
	}
}

// A stderr writer that refuses more ends the run and kills the worker.
func TestIntegrationStderrRefusedKills(t *testing.T) {
	d := itDriver(t)
	spec := itSpec(t, "it-journal")
	id := itCreate(t, d, spec)
	res, err := d.RunLogged(context.Background(), id, []byte("exit 3\n"), 1024, nil, refuseAll{})
	if err != nil || !res.StderrRefused {
		t.Fatalf("RunLogged with a refusing stderr = %+v, %v; want StderrRefused", res, err)
	}
}

type refuseAll struct{}

func (refuseAll) Write([]byte) (int, error) { return 0, errors.New("bound reached") }

// Create's context ends during the request: the error wraps ctx.Err(), and
// nothing is left once Create returned, though the daemon goes on with an
// abandoned create (settleAbandonedCreate claims the name; a daemon slowed
// by the packages beside it outran the timed removals this replaced). The
// caller's own second removal by name finds nothing to do.
func TestIntegrationCreateCancelled(t *testing.T) {
	d := itDriver(t)
	for _, timeout := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
		spec := itSpec(t, "it-cancel")
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, err := d.Create(ctx, spec)
		cancel()
		if err == nil {
			// The daemon was faster than the deadline: a normal create.
			t.Logf("create finished within %v", timeout)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Create(timeout %v) = %v, want an error wrapping context.DeadlineExceeded", timeout, err)
		}
		if err != nil {
			if list, lerr := d.List(context.Background(), itInst("it-cancel")); lerr != nil || len(list) != 0 {
				t.Errorf("Create(timeout %v) returned %v and left %+v, %v", timeout, err, list, lerr)
			}
		}
		if err := d.Remove(context.Background(), spec.Name); err != nil {
			t.Errorf("second removal of %s: %v", spec.Name, err)
		}
	}
	if list, err := d.List(context.Background(), itInst("it-cancel")); err != nil || len(list) != 0 {
		t.Errorf("containers left after cancelled creates: %+v, %v", list, err)
	}
}

// RunGated starts the container before ready is called and writes stdin only
// after it returned nil; a failing ready, or ctx ending inside it, leaves the
// container killed (not removed) and Run's error wrapping the reason.
func TestIntegrationRunGated(t *testing.T) {
	d := itDriver(t)
	errUnits := errors.New("unit job failed")
	tests := []struct {
		name    string
		ready   func(ctx context.Context) error
		timeout time.Duration
		wantErr []error
	}{
		{"ready", func(context.Context) error { return nil }, 60 * time.Second, nil},
		{"not ready", func(context.Context) error { return errUnits }, 60 * time.Second, []error{ErrNotReady, errUnits}},
		{"deadline while gated", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, 2 * time.Second, []error{context.DeadlineExceeded}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var phases []string
			d.Observe = func(phase string, _ time.Duration) { phases = append(phases, phase) }
			defer func() { d.Observe = nil }()
			id := itCreate(t, d, itSpec(t, "it-gate"))
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			running := false
			res, err := d.RunGated(ctx, id, []byte("gated\n"), 1<<10, func(ctx context.Context) error {
				c, err := d.cli.ContainerInspect(context.Background(), id)
				running = err == nil && c.State.Running
				return tt.ready(ctx)
			})
			if !running {
				t.Errorf("container was not running when ready was called")
			}
			if tt.wantErr == nil {
				if err != nil || string(res.Stdout) != "gated\n" || res.ExitCode != 0 {
					t.Fatalf("RunGated = %q exit %d, %v; want the echo, exit 0", res.Stdout, res.ExitCode, err)
				}
				if want := []string{PhaseAttach, PhaseStart, PhaseRun, PhaseWait}; !slices.Equal(phases, want) {
					t.Errorf("phases = %v, want %v", phases, want)
				}
				return
			}
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("RunGated = %v, want an error wrapping %v", err, want)
				}
			}
			if len(res.Stdout) != 0 {
				t.Errorf("stdout = %q, want nothing (stdin was never written)", res.Stdout)
			}
			c, err := d.cli.ContainerInspect(context.Background(), id)
			if err != nil || c.State.Running {
				t.Errorf("after a failed gate: state %+v, %v; want killed, still present", c.State, err)
			}
		})
	}
}

// TestIntegrationStartThenFinish is a standby's life: started, waiting on
// stdin (Running true, nothing on stdout), then finished later; a killed
// waiting container reads as not running.
func TestIntegrationStartThenFinish(t *testing.T) {
	d := itDriver(t)
	id := itCreate(t, d, itSpec(t, "it-warm"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := d.Start(ctx, id)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	// The worker waits for stdin, as a standby does for up to its maximum
	// age; SANDBOX_IT_STANDBY_WAIT (a duration) makes the wait longer.
	wait := 300 * time.Millisecond
	if v, err := time.ParseDuration(os.Getenv("SANDBOX_IT_STANDBY_WAIT")); err == nil {
		wait = v
		ctx, cancel = context.WithTimeout(context.Background(), wait+60*time.Second)
		defer cancel()
	}
	time.Sleep(wait)
	if running, err := d.Running(ctx, id); err != nil || !running {
		t.Fatalf("Running = %v, %v; want a waiting container", running, err)
	}
	res, err := s.Finish(ctx, []byte("later\n"), 1<<10, nil)
	if err != nil || string(res.Stdout) != "later\n" || res.ExitCode != 0 {
		t.Fatalf("Finish = %q exit %d, %v", res.Stdout, res.ExitCode, err)
	}
	if running, err := d.Running(ctx, id); err != nil || running {
		t.Errorf("after Finish Running = %v, %v", running, err)
	}

	dead := itCreate(t, d, itSpec(t, "it-warm"))
	s2, err := d.Start(ctx, dead)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := d.Kill(ctx, dead); err != nil {
		t.Fatal(err)
	}
	if running, err := d.Running(ctx, dead); err != nil || running {
		t.Errorf("killed standby Running = %v, %v; want false", running, err)
	}
	if running, err := d.Running(ctx, "roundtable-sandbox-0000000000000000-00000000"); err != nil || running {
		t.Errorf("missing container Running = %v, %v; want false, nil", running, err)
	}
}

// TestIntegrationFinishFramed: with accept, a worker's final frame (here
// the echoed line, then its exit) returns Framed with that line at once,
// without the streams' end or Docker's wait, and its Tail reads on to the
// streams' end; a worker that prints its frame and never exits returns
// its frame too, its Tail cut after FrameDrainGrace, its container left
// running for the caller's removal; a frame accept refuses is read to the exit as Finish does.
// SANDBOX_IT_FRAMED_ROUNDS (default 5) times RunLogged against RunFramed
// on the echo worker and logs the medians (no assertion on them).
func TestIntegrationFinishFramed(t *testing.T) {
	d := itDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	yes := func([]byte) bool { return true }

	id := itCreate(t, d, itSpec(t, "it-framed"))
	res, err := d.RunFramed(ctx, id, []byte("frame\n"), 1<<10, nil, nil, yes)
	if err != nil || !res.Framed || string(res.Stdout) != "frame\n" || res.ExitCode != -1 || res.Tail == nil {
		t.Fatalf("RunFramed = %+v, %v; want the frame, Framed, a tail", res, err)
	}
	if err := res.Tail(); err != nil {
		t.Errorf("Tail of a worker that exits after its frame = %v, want nil", err)
	}

	hang := itCreate(t, d, itSpec(t, "it-framed"))
	res, err = d.RunFramed(ctx, hang, []byte("framehang\n"), 1<<10, nil, nil, yes)
	if err != nil || !res.Framed || string(res.Stdout) != "framed\n" {
		t.Fatalf("RunFramed on a worker that never exits = %+v, %v; want its frame", res, err)
	}
	// The frame returned at once; the tail reads on to its bound and cuts.
	if err := res.Tail(); err == nil || !strings.Contains(err.Error(), "cut") {
		t.Errorf("Tail of a worker that holds its streams open = %v, want a cut", err)
	}
	if running, err := d.Running(ctx, hang); err != nil || !running {
		t.Errorf("Running = %v, %v; want the container left for its removal", running, err)
	}
	if err := itRemove(t, d, hang); err != nil {
		t.Fatalf("Remove: %v", err)
	}

	refused := itCreate(t, d, itSpec(t, "it-framed"))
	res, err = d.RunFramed(ctx, refused, []byte("frame\n"), 1<<10, nil, nil, func([]byte) bool { return false })
	if err != nil || res.Framed || string(res.Stdout) != "frame\n" || res.ExitCode != 0 {
		t.Fatalf("RunFramed with a refused frame = %+v, %v; want Finish's result with the exit status", res, err)
	}

	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("SANDBOX_IT_FRAMED_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	// Alternating rounds; the driver's own phases: stdin to the end of
	// stdout (worker_run) and the wait after it (container_wait), against
	// stdin to the framed return.
	var mu sync.Mutex
	phases := map[string][]time.Duration{}
	framedRound := false
	d.Observe = func(phase string, took time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if framedRound {
			phase = "framed " + phase
		}
		phases[phase] = append(phases[phase], took)
	}
	defer func() { d.Observe = nil }()
	for range rounds {
		for _, framed := range []bool{false, true} {
			id := itCreate(t, d, itSpec(t, "it-framed"))
			mu.Lock()
			framedRound = framed
			mu.Unlock()
			var err error
			if framed {
				var res Result
				if res, err = d.RunFramed(ctx, id, []byte("frame\n"), 1<<10, nil, nil, yes); err == nil && res.Tail != nil {
					err = res.Tail() // its drain is observed before the next round
				}
			} else {
				_, err = d.RunLogged(ctx, id, []byte("frame\n"), 1<<10, nil, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	median := func(phase string) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		took := slices.Clone(phases[phase])
		if len(took) == 0 {
			return 0
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	t.Logf("medians of %d rounds: stdin to stdout's end %v, then Docker's wait %v; framed: stdin to the return %v, then the tail read on after the frame %v",
		rounds, median(PhaseRun), median(PhaseWait), median("framed "+PhaseRun), median("framed "+PhaseFrameDrain))
}
