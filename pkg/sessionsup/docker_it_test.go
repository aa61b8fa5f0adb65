package sessionsup

import (
	"context"
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
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/roundtable-sandbox/sandbox/pkg/container"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	"github.com/roundtable-sandbox/sandbox/pkg/layout"
	"github.com/roundtable-sandbox/sandbox/pkg/sessionwire"
	"github.com/roundtable-sandbox/sandbox/pkg/toolbox"
)

// The session supervisor as PID 1 of a real container from the small test
// toolbox with this tree's sandbox-worker: a code run's container with
// setup (root, the setup capabilities, no CAP_KILL), the supervisor's work
// directory /output (the session kind will mount its own). Requests go
// over the attach stream one after another, as the host kind will send
// them. make integration sets both switches.
func TestIntegrationSession(t *testing.T) {
	host, base := os.Getenv("SANDBOX_IT_DOCKER"), os.Getenv("SANDBOX_IT_TOOLBOX_TAR")
	if host == "" || base == "" {
		t.Skip("integration test skipped: set SANDBOX_IT_DOCKER and SANDBOX_IT_TOOLBOX_TAR (test/integration.sh does)")
	}
	needRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sandbox-worker")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/roundtable-sandbox/sandbox/cmd/sandbox-worker")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build sandbox-worker: %v: %s", err, out)
	}
	w, err := toolbox.ReadWorker(bin)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := toolbox.Connect(host)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	tag := fmt.Sprintf("roundtable-sandbox-session-it:%d", time.Now().UnixNano())
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
	defer d.Close()

	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	ws, _ = filepath.EvalSymlinks(ws)
	gate, _ := filepath.EvalSymlinks(t.TempDir())
	if err := os.Mkdir(filepath.Join(gate, "workspace"), 0o500); err != nil {
		t.Fatal(err)
	}
	os.Chown(gate, guestUID, guestGID)
	os.Chmod(gate, 0o700)
	turn := ids.NewTurnID()
	channel := "session-it:" + t.Name()
	name, err := ids.ContainerName(channel, turn)
	if err != nil {
		t.Fatal(err)
	}
	spec := container.Spec{
		Name: name, Image: tag, UID: guestUID, GID: guestGID, WorkspaceDir: ws,
		MemoryMB: 256, CPUs: 1, Pids: 64, TmpfsMB: 16, LogTag: ids.LogTag(channel),
		Labels: map[string]string{
			layout.LabelInstallation: "session-it",
			layout.LabelTurn:         turn,
			layout.LabelChannel:      ids.ChannelTag(channel),
			layout.LabelDeadline:     strconv.FormatInt(time.Now().Add(5*time.Minute).Unix(), 10),
		},
		Run: &container.RunOptions{Setup: true, GateDir: gate, OutputMB: 64,
			Command: []string{layout.ToolboxWorker, "session", strconv.Itoa(guestUID), strconv.Itoa(guestGID), sessionwire.RootOutput}},
	}
	if rt := os.Getenv("SANDBOX_IT_RUNTIME"); rt != "" {
		spec.Runtime = rt
	}
	id, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Remove(context.Background(), name); err != nil {
			t.Errorf("remove %s: %v", name, err)
		}
	})
	hj, err := cli.ContainerAttach(ctx, id, dcontainer.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Close()
	go func() { <-ctx.Done(); hj.Close() }() // a stuck read ends with the test's deadline
	if err := cli.ContainerStart(ctx, id, dcontainer.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	outR, outW := io.Pipe()
	var logs strings.Builder
	go func() {
		_, err := stdcopy.StdCopy(outW, &logs, hj.Reader)
		outW.CloseWithError(err)
	}()
	enc := sessionwire.NewRequestEncoder(hj.Conn)
	dec := sessionwire.NewEventDecoder(outR)
	// until reads frames to id's final event.
	until := func(id string) execResult {
		t.Helper()
		var frames []sessionwire.EventFrame
		for {
			fr, err := dec.Next()
			if err != nil {
				t.Fatalf("event stream: %v; supervisor log: %s", err, logs.String())
			}
			if fr.ID != id {
				continue
			}
			frames = append(frames, fr)
			if fr.Type == sessionwire.FrameEvent && fr.Event.Kind != sessionwire.EventStarted &&
				(fr.Event.Kind != sessionwire.EventList || fr.Event.List.Done) {
				r := collect(frames)
				b, _ := fileData(frames)
				r.stdout += string(b)
				return r
			}
		}
	}
	script := []byte("import sys\nprint('hello from', sys.argv[1])\n")
	if err := enc.Put(sessionwire.Request{ID: "put", Op: sessionwire.OpPut,
		File: &sessionwire.File{Path: "hello.py", Size: int64(len(script))}}, script); err != nil {
		t.Fatal(err)
	}
	if r := until("put"); r.err != nil {
		t.Fatalf("put: %+v", r.err)
	}
	t0 := time.Now()
	x := sessionwire.Exec{Command: "wc -l < hello.py; id -u; echo out > result.txt", MaxOutputBytes: 1 << 20}
	if err := enc.Request(sessionwire.Request{ID: "e1", Op: sessionwire.OpExec, Exec: &x}); err != nil {
		t.Fatal(err)
	}
	r := until("e1")
	t.Logf("first exec round trip %v", time.Since(t0))
	if r.res == nil || r.res.ExitCode != 0 || r.stdout != "2\n4242\n" {
		t.Fatalf("exec 1: %+v %q %q", r.res, r.stdout, r.stderr)
	}
	t0 = time.Now()
	x = sessionwire.Exec{Executable: "true", MaxOutputBytes: 1 << 10}
	if err := enc.Request(sessionwire.Request{ID: "e2", Op: sessionwire.OpExec, Exec: &x}); err != nil {
		t.Fatal(err)
	}
	if r := until("e2"); r.res == nil || r.res.ExitCode != 0 {
		t.Fatalf("exec 2: %+v %+v", r.res, r.err)
	}
	t.Logf("exec of true round trip %v", time.Since(t0))
	var rt []time.Duration
	for i := range 20 {
		t0 = time.Now()
		id := fmt.Sprintf("t%d", i)
		if err := enc.Request(sessionwire.Request{ID: id, Op: sessionwire.OpExec, Exec: &x}); err != nil {
			t.Fatal(err)
		}
		if r := until(id); r.res == nil || r.res.ExitCode != 0 {
			t.Fatalf("exec %s: %+v %+v", id, r.res, r.err)
		}
		rt = append(rt, time.Since(t0))
	}
	slices.Sort(rt)
	t.Logf("20 execs of true in the container: median %v, max %v", rt[10], rt[19])
	if p := os.Getenv("SANDBOX_IT_SESSION_REPORT"); p != "" {
		// test/integration.sh shows no passing test's log: the numbers
		// go to this file when asked.
		_ = os.WriteFile(p, []byte(fmt.Sprintf("exec of true in the container: median %v, max %v (20 execs)\n", rt[10], rt[19])), 0o644)
	}
	// Cancel works without CAP_KILL: the supervisor kills as the guest.
	x = sessionwire.Exec{Command: "echo go; sleep 1000", MaxOutputBytes: 1 << 10}
	if err := enc.Request(sessionwire.Request{ID: "e3", Op: sessionwire.OpExec, Exec: &x}); err != nil {
		t.Fatal(err)
	}
	// The signal goes once the exec started (a signal for an exec not yet
	// running is refused with not_found).
	for started := false; !started; {
		fr, err := dec.Next()
		if err != nil {
			t.Fatalf("event stream: %v; supervisor log: %s", err, logs.String())
		}
		started = fr.ID == "e3" && fr.Type == sessionwire.FrameEvent && fr.Event.Kind == sessionwire.EventStarted
	}
	if err := enc.Request(sessionwire.Request{ID: "k", Op: sessionwire.OpSignal, Signal: &sessionwire.Signal{Target: "e3", Name: sessionwire.SignalKill}}); err != nil {
		t.Fatal(err)
	}
	if r := until("e3"); r.res == nil || !r.res.Cancelled || r.res.ExitCode != 137 {
		t.Fatalf("cancelled exec: %+v %+v", r.res, r.err)
	}
	if err := enc.Request(sessionwire.Request{ID: "get", Op: sessionwire.OpGet, File: &sessionwire.File{Path: "result.txt"}}); err != nil {
		t.Fatal(err)
	}
	if r := until("get"); r.err != nil || r.stdout != "out\n" {
		t.Fatalf("get: %+v %q", r.err, r.stdout)
	}
	_ = hj.CloseWrite() // the session ends with its stdin
	waitc, errc := cli.ContainerWait(ctx, id, dcontainer.WaitConditionNotRunning)
	select {
	case w := <-waitc:
		if w.StatusCode != 0 {
			t.Fatalf("supervisor exit %d; log: %s", w.StatusCode, logs.String())
		}
	case err := <-errc:
		t.Fatal(err)
	}
}
