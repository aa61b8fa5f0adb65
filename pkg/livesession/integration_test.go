package livesession

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	dclient "github.com/docker/docker/client"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roundtable-sandbox/sandbox/pkg/apiwire"
	"github.com/roundtable-sandbox/sandbox/pkg/chanstate"
	"github.com/roundtable-sandbox/sandbox/pkg/config"
	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/reaper"
	"github.com/roundtable-sandbox/sandbox/pkg/sandbox"
	"github.com/roundtable-sandbox/sandbox/pkg/sandboxtest"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
	"github.com/roundtable-sandbox/sandbox/pkg/workerlog"
)

// itEngine adapts the real driver as the host's pkg/cli does (a kind
// cannot import it).
type itEngine struct{ d *container.Driver }

func (e itEngine) Create(ctx context.Context, s sandbox.ContainerSpec) (string, error) {
	spec := container.Spec{
		Name: s.Name, Image: s.Image, UID: s.UID, GID: s.GID, WorkspaceDir: s.WorkspaceDir, TurnDir: s.TurnDir,
		MemoryMB: s.MemoryMB, CPUs: s.CPUs, Pids: s.Pids, TmpfsMB: s.TmpfsMB, Runtime: s.Runtime, LogTag: s.LogTag, Labels: s.Labels,
	}
	if x := s.Session; x != nil {
		spec.Session = &container.SessionOptions{WorkMB: x.WorkMB, OutputMB: x.OutputMB, Command: x.Command}
	}
	return e.d.Create(ctx, spec)
}
func (e itEngine) Run(context.Context, string, []byte, int64, func(context.Context) error, io.Writer) (sandbox.RunResult, error) {
	return sandbox.RunResult{}, fmt.Errorf("not a turn's driver")
}
func (e itEngine) Kill(ctx context.Context, id string) error   { return e.d.Kill(ctx, id) }
func (e itEngine) Remove(ctx context.Context, id string) error { return e.d.Remove(ctx, id) }
func (e itEngine) Attach(ctx context.Context, id string, stdout, stderr io.Writer) (sandbox.SessionStream, error) {
	s, err := e.d.Start(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.Duplex(stdout, stderr), nil
}
func (e itEngine) Pause(ctx context.Context, id string) error   { return e.d.Pause(ctx, id) }
func (e itEngine) Unpause(ctx context.Context, id string) error { return e.d.Unpause(ctx, id) }

// TestIntegrationSession drives the kind against a real Docker daemon
// and the small test toolbox with this tree's sandbox-worker: state kept
// across execs (a file, a background dev server), an 8 MiB binary file in
// and out, a directory's tar, pause and a transparent resume with the
// state intact, then close. It logs the round trip of an exec of `true`
// (and writes it to SANDBOX_IT_SESSION_REPORT when set); no assertion is
// timed. test/integration.sh sets the switches.
func TestIntegrationSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	it := itKind(t, ctx, nil)
	k, cli, d, cfg := it.k, it.cli, it.d, it.k.cfg
	log := sandboxtest.Logger(t)

	st, err := k.Create(ctx, apiwire.SessionCreate{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := k.Lookup(st.ID, 1000, false)
	run := func(x apiwire.SessionExec) (string, string, *apiwire.SessionExecResult) {
		t.Helper()
		var out, errOut strings.Builder
		var res *apiwire.SessionExecResult
		var failed string
		err := k.Exec(ctx, s, x, func(ev apiwire.SessionExecEvent) error {
			switch ev.Type {
			case apiwire.ExecStdout:
				out.Write(ev.Data)
			case apiwire.ExecStderr:
				errOut.Write(ev.Data)
			case apiwire.ExecResult:
				res = ev.Result
			case apiwire.ExecError:
				failed = ev.Error
			}
			return nil
		})
		if err != nil || res == nil {
			t.Fatalf("exec %+v: %v %s; stderr %q", x, err, failed, errOut.String())
		}
		return out.String(), errOut.String(), res
	}

	// State across execs: exec 1 writes, exec 2 reads.
	if out, errOut, res := run(apiwire.SessionExec{Command: "echo kept > keep.txt; id -u; pwd"}); res.ExitCode != 0 || out != fmt.Sprintf("%d\n/work\n", s.guest) {
		t.Fatalf("exec 1: %+v %q %q", res, out, errOut)
	}
	if out, _, res := run(apiwire.SessionExec{Executable: "cat", Args: []string{"keep.txt"}}); res.ExitCode != 0 || out != "kept\n" {
		t.Fatalf("exec 2: %+v %q", res, out)
	}
	// The guest holds no capability; a root exec exactly a run's setup
	// command's (CHOWN, FOWNER, FSETID: 0x19); nobody writes the root
	// filesystem or the project.
	if out, _, res := run(apiwire.SessionExec{Command: "grep CapEff /proc/self/status; touch /etc/x 2>/dev/null || echo ro; touch /workspace/x 2>/dev/null || echo ro"}); res.ExitCode != 0 ||
		out != "CapEff:\t0000000000000000\nro\nro\n" {
		t.Fatalf("guest exec: %+v %q", res, out)
	}
	if out, _, res := run(apiwire.SessionExec{Command: "id -u; grep CapEff /proc/self/status; touch /etc/x 2>/dev/null || echo ro", Root: true}); res.ExitCode != 0 ||
		out != "0\nCapEff:\t0000000000000019\nro\n" {
		t.Fatalf("root exec: %+v %q", res, out)
	}
	// A dev server started by one exec (listening before that exec ends,
	// then in the background) answers the next.
	server := `import http.server, os, sys
s = http.server.ThreadingHTTPServer(("127.0.0.1", 8765), http.server.SimpleHTTPRequestHandler)
if os.fork():
    print("listening")
    sys.exit(0)
os.setsid()
n = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(n, fd)
s.serve_forever()
`
	if out, errOut, res := run(apiwire.SessionExec{Executable: "python3", Args: []string{"-c", server}}); res.ExitCode != 0 || out != "listening\n" {
		t.Fatalf("dev server: %+v %q %q", res, out, errOut)
	}
	query := apiwire.SessionExec{Executable: "curl", Args: []string{"-sS", "--max-time", "30", "http://127.0.0.1:8765/keep.txt"}}
	if out, errOut, res := run(query); res.ExitCode != 0 || out != "kept\n" {
		t.Fatalf("dev server query: %+v %q %q", res, out, errOut)
	}
	// An exec of true, twenty times: the round trip as the kind sees it.
	var rt []time.Duration
	for range 20 {
		t0 := time.Now()
		if _, _, res := run(apiwire.SessionExec{Executable: "true"}); res.ExitCode != 0 {
			t.Fatalf("true: %+v", res)
		}
		rt = append(rt, time.Since(t0))
	}
	slices.Sort(rt)
	report := fmt.Sprintf("session exec of true through the kind: median %v, p95 %v, max %v (20 execs)\n", rt[10], rt[18], rt[19])
	// The same through docker exec in the same container, as the docker
	// CLI does it (create, attach, read to the end, inspect).
	var de []time.Duration
	for range 20 {
		t0 := time.Now()
		ex, err := cli.ContainerExecCreate(ctx, s.h.ContainerID, dcontainer.ExecOptions{User: fmt.Sprint(s.guest), AttachStdout: true, AttachStderr: true, Cmd: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		hj, err := cli.ContainerExecAttach(ctx, ex.ID, dcontainer.ExecAttachOptions{})
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, hj.Reader)
		hj.Close()
		if ins, err := cli.ContainerExecInspect(ctx, ex.ID); err != nil || ins.ExitCode != 0 {
			t.Fatalf("docker exec true: %+v %v", ins, err)
		}
		de = append(de, time.Since(t0))
	}
	slices.Sort(de)
	report += fmt.Sprintf("docker exec of true in the same container: median %v, p95 %v (20 execs); ratio of medians %.3f\n",
		de[10], de[18], float64(rt[10])/float64(de[10]))
	// 8 MiB of random bytes in and out.
	blob := make([]byte, 8<<20)
	rand.Read(blob)
	t0 := time.Now()
	if f, err := k.Put(ctx, s, "blob.bin", 0o600, blob); err != nil || f.Size != int64(len(blob)) {
		t.Fatalf("put: %+v %v", f, err)
	}
	putTook := time.Since(t0)
	t0 = time.Now()
	f, err := k.Get(ctx, s, "blob.bin", false)
	if err != nil || !bytes.Equal(f.Data, blob) || f.Mode != 0o600 {
		t.Fatalf("get: size %d mode %o %v", len(f.Data), f.Mode, err)
	}
	report += fmt.Sprintf("8 MiB put %v, get %v\n", putTook, time.Since(t0))
	if out, _, res := run(apiwire.SessionExec{Command: "sha256sum < blob.bin | cut -c1-8"}); res.ExitCode != 0 || len(out) != 9 {
		t.Fatalf("the blob inside: %+v %q", res, out)
	}
	l, err := k.ListDir(ctx, s, ".")
	if err != nil || !slices.ContainsFunc(l.Entries, func(e apiwire.SessionEntry) bool { return e.Name == "blob.bin" && e.Size == 8<<20 }) {
		t.Fatalf("list: %+v %v", l, err)
	}
	tf, err := k.Get(ctx, s, ".", true)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(tf.Data))
	var names []string
	for {
		hd, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hd.Name)
	}
	if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "keep.txt") }) {
		t.Errorf("tar of .: %v", names)
	}
	// Pause, then a transparent resume with the files and the server intact.
	if err := k.Pause(s); err != nil {
		t.Fatal(err)
	}
	if running, _ := d.Running(ctx, s.h.ContainerID); !running {
		t.Fatalf("a paused container is not running")
	}
	if s.Status().State != apiwire.SessionPaused {
		t.Fatalf("state %s", s.Status().State)
	}
	t0 = time.Now()
	out, _, res := run(apiwire.SessionExec{Executable: "cat", Args: []string{"keep.txt"}})
	report += fmt.Sprintf("resume from pause to the exec's result %v\n", time.Since(t0))
	if res.ExitCode != 0 || out != "kept\n" || s.Status().Resumes != 1 {
		t.Fatalf("after the resume: %+v %q %+v", res, out, s.Status())
	}
	if out, errOut, res := run(query); res.ExitCode != 0 || out != "kept\n" {
		t.Fatalf("dev server after the resume: %+v %q %q", res, out, errOut)
	}
	t.Log(report)
	if p := os.Getenv("SANDBOX_IT_SESSION_REPORT"); p != "" {
		_ = os.WriteFile(p, []byte(report), 0o644)
	}
	k.Close(s)
	list, err := d.List(ctx, cfg.Installation)
	if err != nil || len(list) != 0 {
		t.Fatalf("after close: %v %v", list, err)
	}

	// A paused session closes as a running one does.
	st3, err := k.Create(ctx, apiwire.SessionCreate{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s3, _ := k.Lookup(st3.ID, 1000, false)
	if err := k.Pause(s3); err != nil {
		t.Fatal(err)
	}
	k.Close(s3)
	if list, err := d.List(ctx, cfg.Installation); err != nil || len(list) != 0 {
		t.Fatalf("after closing a paused session: %v %v", list, err)
	}

	// After a crash (no host to ask) the reaper removes a session whose
	// deadline label passed, a paused one too.
	st2, err := k.Create(ctx, apiwire.SessionCreate{TTLSeconds: 60}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := k.Lookup(st2.ID, 1000, false)
	if err := k.Pause(s2); err != nil {
		t.Fatal(err)
	}
	rp := &reaper.Reaper{Installation: cfg.Installation, RunRoot: cfg.RunRoot, PolicyDir: cfg.PolicyDir,
		Containers: d, Units: noUnits{}, Log: log,
		Now: func() time.Time { return st2.ExpiresAt.Add(time.Minute) }}
	early := *rp
	early.Now = func() time.Time { return st2.ExpiresAt.Add(-time.Second) }
	if sum, err := early.Reap(ctx); err != nil || sum.Containers != 0 {
		t.Fatalf("reap before the deadline: %+v %v", sum, err)
	}
	if sum, err := rp.Reap(ctx); err != nil || sum.Containers != 1 {
		t.Fatalf("reap after the deadline: %+v %v", sum, err)
	}
	if list, err := d.List(ctx, cfg.Installation); err != nil || len(list) != 0 {
		t.Fatalf("after the reap: %v %v", list, err)
	}
}

// noUnits: a session has no broker units.
type noUnits struct{}

func (noUnits) ListBrokers(context.Context) ([]string, error) { return nil, nil }
func (noUnits) StopBroker(context.Context, string) error      { return nil }

// itSetup is what itKind made.
type itSetup struct {
	k   *Kind
	cli *dclient.Client
	d   *container.Driver
}

// itKind is the kind on a real Docker daemon (SANDBOX_IT_DOCKER) with the
// small test toolbox and this tree's sandbox-worker imported as the runs
// image; change edits the configuration first. It skips without the
// switches or root.
func itKind(t *testing.T, ctx context.Context, change func(*config.Config)) itSetup {
	t.Helper()
	host, base := os.Getenv("SANDBOX_IT_DOCKER"), os.Getenv("SANDBOX_IT_TOOLBOX_TAR")
	if host == "" || base == "" {
		t.Skip("integration test skipped: set SANDBOX_IT_DOCKER and SANDBOX_IT_TOOLBOX_TAR (test/integration.sh does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the session's work directory belongs to a guest uid")
	}
	bin := os.Getenv("SANDBOX_IT_SANDBOX_WORKER")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "sandbox-worker")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/roundtable-sandbox/sandbox/cmd/sandbox-worker")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build sandbox-worker: %v: %s", err, out)
		}
	}
	w, err := toolbox.ReadWorker(bin)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := toolbox.Connect(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	tag := fmt.Sprintf("roundtable-sandbox-livesession-it:%d", time.Now().UnixNano())
	if _, err := toolbox.Import(ctx, cli, toolbox.ImportOptions{BaseTar: base, Worker: w, Tag: tag}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	d, err := container.New(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })

	cfg := sandboxtest.Config(t, "")
	cfg.Runs.Image = tag
	cfg.Installation = "livesession-it"
	cfg.Runtime = os.Getenv("SANDBOX_IT_RUNTIME")
	cfg.Sessions.MemoryMB, cfg.Sessions.WorkMB, cfg.Sessions.TmpfsMB, cfg.Sessions.OutputMB = 512, 128, 32, 32
	if change != nil {
		change(cfg)
	}
	state, _, err := chanstate.LoadState(cfg.StateFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := sandboxtest.NewHost(cfg, state)
	journal := &sandboxtest.Journal{}
	log := sandboxtest.Logger(t)
	life := sandbox.New(sandbox.Options{Containers: itEngine{d}, Units: sandboxtest.NewUnits(), Logger: log,
		WorkerLogs: workerlog.New(workerlog.DefaultLimits(), journal.Send, nil)})
	k := New(Options{Config: cfg, Lifecycle: life, Host: h, Logger: log, Registry: prometheus.NewRegistry(), SweepEvery: -1})
	t.Cleanup(func() {
		k.Stop()
		h.Stop()
	})
	return itSetup{k: k, cli: cli, d: d}

}

// TestIntegrationSessionStandby: with sessions.standby a plain create
// takes the prepared container (its first exec works in it) and the next
// is prepared; the create times with and without a ready standby are
// logged side by side (SANDBOX_IT_SESSION_STANDBY_REPORT when set), and
// nothing is timed in an assertion.
func TestIntegrationSessionStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("SANDBOX_IT_SESSION_STANDBY_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	measure := func(k *Kind, standby bool) []time.Duration {
		var out []time.Duration
		for i := 0; i < rounds; i++ {
			var want string
			if standby {
				// Off the clock: the standby is ready.
				k.Sweep()
				k.standbyRun.Wait()
				k.mu.Lock()
				if k.standby != nil {
					want = k.standby.id
				}
				k.mu.Unlock()
				if want == "" {
					t.Fatalf("round %d: no standby prepared", i)
				}
			}
			t0 := time.Now()
			st, err := k.Create(ctx, apiwire.SessionCreate{}, 1000)
			took := time.Since(t0)
			if err != nil || (standby && st.ID != want) {
				t.Fatalf("round %d: create %v (id %s, standby %s)", i, err, st.ID, want)
			}
			out = append(out, took)
			s, err := k.Lookup(st.ID, 1000, false)
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			if err := k.Exec(ctx, s, apiwire.SessionExec{Command: "echo ok"}, func(ev apiwire.SessionExecEvent) error {
				if ev.Type == apiwire.ExecStdout {
					got.Write(ev.Data)
				}
				return nil
			}); err != nil || got.String() != "ok\n" {
				t.Fatalf("round %d: exec in the new session: %v %q", i, err, got.String())
			}
			k.Close(s)
		}
		return out
	}
	cold := measure(itKind(t, ctx, nil).k, false)
	warm := measure(itKind(t, ctx, func(c *config.Config) { c.Sessions.Standby = 1 }).k, true)
	line := func(name string, ds []time.Duration) string {
		ms := make([]float64, len(ds))
		for i, d := range ds {
			ms[i] = float64(d.Microseconds()) / 1000
		}
		slices.Sort(ms)
		p95 := ms[min(len(ms)-1, (len(ms)*95+99)/100-1)]
		return fmt.Sprintf("%s: n %d, median %.1f ms, p95 %.1f ms, all %v", name, len(ms), ms[len(ms)/2], p95, ms)
	}
	report := line("session create, no standby", cold) + "\n" + line("session create, a ready standby", warm) + "\n"
	t.Log(report)
	if p := os.Getenv("SANDBOX_IT_SESSION_STANDBY_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
}
